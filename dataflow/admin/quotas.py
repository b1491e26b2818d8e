"""Per-user quotas in the admin: an operator raises or lowers any of a user's quotas
(``services.quotas``); an empty field keeps the ``DATAFLOW_USER_QUOTAS`` default."""

from __future__ import annotations

from django.contrib import admin

from dataflow.models import UserQuota


@admin.register(UserQuota)
class UserQuotaAdmin(admin.ModelAdmin):
    list_display = (
        "user",
        "flows",
        "schedules",
        "min_schedule_seconds",
        "concurrent_runs",
        "splits",
        "max_splits_per_flow",
    )
    search_fields = ("user__username",)
    raw_id_fields = ("user",)
