"""django-celery-beat's periodic tasks, as its admin shows them, with its list actions
(enable, disable, toggle, run now) asking for the change permission: as shipped they ask
for none, and a flow's schedule is one of these rows, so staff who may only view them could
run or stop other users' scheduled flows."""

from __future__ import annotations

from django.contrib import admin
from django_celery_beat.admin import PeriodicTaskAdmin
from django_celery_beat.models import PeriodicTask

#: PeriodicTaskAdmin's actions that change or run tasks.
TASK_ACTIONS = ("enable_tasks", "disable_tasks", "toggle_tasks", "run_tasks")


class GuardedPeriodicTaskAdmin(PeriodicTaskAdmin):
    def get_actions(self, request):
        actions = super().get_actions(request)
        if not self.has_change_permission(request):
            for name in TASK_ACTIONS:
                actions.pop(name, None)
        return actions


# django_celery_beat is before dataflow in INSTALLED_APPS: its admin has registered already.
admin.site.unregister(PeriodicTask)
admin.site.register(PeriodicTask, GuardedPeriodicTaskAdmin)
