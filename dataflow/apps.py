from django.apps import AppConfig
from django.core import checks


class DataflowConfig(AppConfig):
    name = "dataflow"
    verbose_name = "Dataflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        import connectors  # noqa: F401  (registers every connector)
        from dataflow.checks import check_landing_zone

        checks.register(check_landing_zone)
