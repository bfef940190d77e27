"""Observations: the read-only operator timeline, with a summary of refusals and dedupes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from ..models import Observation
from .base import AuditAdmin

SUMMARY_KINDS = (
    Observation.Kind.MEMORY_WRITE_REFUSED,
    Observation.Kind.MEMORY_DEDUPLICATED,
    Observation.Kind.QUERY_DEDUPLICATED,
)


def summarize(observations: QuerySet[Observation], days: int = 30) -> dict[str, Any]:
    """Counts per source for 7 and 30 days, and a per-day series for the chart."""
    now = timezone.now()
    recent = observations.filter(kind__in=SUMMARY_KINDS, created_at__gte=now - timedelta(days=days))
    week = now - timedelta(days=7)
    per_source = (
        recent.values("kind", "source")
        .annotate(
            month=Sum("count"),
            week=Sum("count", filter=Q(created_at__gte=week)),
            events=Count("id"),
        )
        .order_by("kind", "-month")
    )
    today = timezone.localdate()
    start = today - timedelta(days=days - 1)
    series: dict[str, list[int]] = {str(kind): [0] * days for kind in SUMMARY_KINDS[:2]}
    for row in (
        recent.filter(kind__in=series)
        .annotate(day=TruncDate("created_at"))
        .values("kind", "day")
        .annotate(total=Sum("count"))
    ):
        index = (row["day"] - start).days
        if 0 <= index < days:
            series[row["kind"]][index] = row["total"] or 0
    peak = max([1] + [value for values in series.values() for value in values])
    width, height = 600, 120
    step = width / days

    def points(values: list[int]) -> str:
        return " ".join(
            f"{i * step + step / 2:.1f},{height - (value / peak) * (height - 10):.1f}"
            for i, value in enumerate(values)
        )

    return {
        "rows": [
            {**row, "week": row["week"] or 0, "label": Observation.Kind(row["kind"]).label}
            for row in per_source
        ],
        "chart": {
            "width": width,
            "height": height,
            "refused": points(series[SUMMARY_KINDS[0]]),
            "deduplicated": points(series[SUMMARY_KINDS[1]]),
            "peak": peak,
            "start": start,
            "end": today,
            "total_refused": sum(series[SUMMARY_KINDS[0]]),
            "total_deduplicated": sum(series[SUMMARY_KINDS[1]]),
        },
    }


@admin.register(Observation)
class ObservationAdmin(AuditAdmin):
    list_display = ["created_at", "kind", "org", "domain", "source", "count", "actor"]
    list_filter = [
        "kind",
        ("org", admin.RelatedOnlyFieldListFilter),
        ("domain", admin.RelatedOnlyFieldListFilter),
        "source",
    ]
    list_select_related = ["org", "domain"]
    search_fields = ["source", "actor"]
    date_hierarchy = "created_at"
    change_list_template = "admin/memoryhub/observation/change_list.html"
    readonly_fields = ["created_at", "kind", "org", "domain", "source", "count", "payload", "actor"]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        extra_context = extra_context or {}
        extra_context["summary"] = summarize(self.get_queryset(request))
        return super().changelist_view(request, extra_context)
