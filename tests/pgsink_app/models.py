from django.db import models


class OrderTotal(models.Model):
    customer = models.TextField(primary_key=True)
    total = models.DecimalField(max_digits=22, decimal_places=2)
    orders = models.BigIntegerField()

    class Meta:
        managed = False  # the flow's sink owns the table: no migration makes it
        db_table = "order_totals"
