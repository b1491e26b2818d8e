"""The sink directories kept as their owner's after their flow was deleted
(``SinkPathClaim``: deleting one gives the path free)."""

from __future__ import annotations

from django.contrib import admin

from dataflow.models import SinkPathClaim


@admin.register(SinkPathClaim)
class SinkPathClaimAdmin(admin.ModelAdmin):
    list_display = ["path", "owner", "flow_name", "created_at"]
    search_fields = ["path", "owner__username", "flow_name"]
    readonly_fields = ["path", "owner", "flow_name", "created_at"]

    def has_add_permission(self, request):
        return False  # a claim is made by deleting a flow that keeps its output
