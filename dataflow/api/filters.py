"""Query filters of the lists (django-filter)."""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q

from dataflow.models import DataFlow, DeadLetter, FlowStatus


class IntegerFilter(django_filters.NumberFilter):
    """An integer (django-filter's NumberFilter takes decimals)."""

    # Declared: the checker takes NumberFilter's DecimalField for the type of any field_class.
    field_class: type[forms.IntegerField] = forms.IntegerField


class FlowFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(
        field_name="name", lookup_expr="exact", help_text="The flow's exact name."
    )
    name__icontains = django_filters.CharFilter(
        field_name="name", lookup_expr="icontains", help_text="Part of the name, any case."
    )
    search = django_filters.CharFilter(method="filter_search", help_text="Part of the name or description.")
    status = django_filters.ChoiceFilter(choices=FlowStatus.choices, help_text="The flow's state.")
    source_type = django_filters.CharFilter(help_text="The source's type (files, redis_stream, ...).")
    sink_type = django_filters.CharFilter(help_text="The sink's type (parquet, csv, ...).")

    class Meta:
        model = DataFlow
        fields = ["name", "name__icontains", "search", "status", "source_type", "sink_type"]

    def filter_search(self, queryset, name, value):
        return queryset.filter(Q(name__icontains=value) | Q(description__icontains=value))


class DeadLetterFilter(django_filters.FilterSet):
    run = IntegerFilter(field_name="run_id", help_text="Only the dead letters of this run (its id).")
    split = django_filters.CharFilter(field_name="split_id", help_text="Only those of this split.")

    class Meta:
        model = DeadLetter
        fields = ["run", "split"]
