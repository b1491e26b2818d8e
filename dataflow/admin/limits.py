"""What a user may use (``UserLimits``: a field left empty takes the site's default) and the
sink directories kept as their owner's after their flow was deleted (``SinkPathClaim``:
deleting one gives the path free)."""

from __future__ import annotations

from django.contrib import admin

from dataflow.models import SinkPathClaim, UserLimits


@admin.register(UserLimits)
class UserLimitsAdmin(admin.ModelAdmin):
    list_display = ["user", "max_splits_per_flow"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user"]


@admin.register(SinkPathClaim)
class SinkPathClaimAdmin(admin.ModelAdmin):
    list_display = ["path", "owner", "flow_name", "created_at"]
    search_fields = ["path", "owner__username", "flow_name"]
    readonly_fields = ["path", "owner", "flow_name", "created_at"]

    def has_add_permission(self, request):
        return False  # a claim is made by deleting a flow that keeps its output
