"""Observations: the read-only operator timeline, with a summary of refusals and dedupes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.functions import TruncDate
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..models import Observation
from .base import AuditAdmin
from .list_filters import ActorFilter, CreatedWithinFilter, SourceFilter, VisibleRelatedFilter

SUMMARY_KINDS = (
    Observation.Kind.MEMORY_WRITE_REFUSED,
    Observation.Kind.MEMORY_DEDUPLICATED,
    Observation.Kind.QUERY_DEDUPLICATED,
)


#: The chart's size and margins (room for the axis labels and the legend), in pixels.
CHART_WIDTH, CHART_HEIGHT = 640, 190
CHART_LEFT, CHART_RIGHT, CHART_TOP, CHART_BOTTOM = 48, 12, 12, 52


def summarize(observations: QuerySet[Observation], days: int = 30) -> dict[str, Any]:
    """Counts per source for 7 and 30 days, and a per-day series for the chart."""
    now = timezone.now()
    recent = observations.order_by().filter(
        kind__in=SUMMARY_KINDS, created_at__gte=now - timedelta(days=days)
    )
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
    return {
        "rows": [
            {**row, "week": row["week"] or 0, "label": Observation.Kind(row["kind"]).label}
            for row in per_source
        ],
        "chart": chart(series[SUMMARY_KINDS[0]], series[SUMMARY_KINDS[1]], start=start, end=today),
    }


def chart(refused: list[int], deduplicated: list[int], *, start: Any, end: Any) -> dict[str, Any]:
    """The two per-day series as SVG polylines, with the plot area's edges for the axes."""
    peak = max([1, *refused, *deduplicated])
    left, top = CHART_LEFT, CHART_TOP
    right, bottom = CHART_WIDTH - CHART_RIGHT, CHART_HEIGHT - CHART_BOTTOM
    step = (right - left) / max(len(refused), 1)

    def points(values: list[int]) -> str:
        return " ".join(
            f"{left + i * step + step / 2:.1f},{bottom - (value / peak) * (bottom - top):.1f}"
            for i, value in enumerate(values)
        )

    return {
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
        "left": left,
        "right": right,
        "top": top,
        "bottom": bottom,
        "middle": (top + bottom) / 2,
        "refused": points(refused),
        "deduplicated": points(deduplicated),
        "peak": peak,
        "start": start,
        "end": end,
        "total_refused": sum(refused),
        "total_deduplicated": sum(deduplicated),
    }


@admin.register(Observation)
class ObservationAdmin(AuditAdmin):
    list_display = ["created_at", "kind", "where", "source", "count", "actor"]
    list_filter = [
        "kind",
        CreatedWithinFilter,
        ("org", VisibleRelatedFilter),
        ("domain", VisibleRelatedFilter),
        SourceFilter,
        ActorFilter,
    ]
    list_select_related = ["org", "domain"]
    search_fields = ["source", "actor"]
    # No date_hierarchy: its links are a DISTINCT over every observation; the created
    # filter and the chart cover time.
    show_full_result_count = False  # append-only and large: one COUNT(*) a page is enough
    change_list_template = "admin/memoryhub/observation/change_list.html"
    readonly_fields = ["created_at", "kind", "org", "domain", "source", "count", "payload", "actor"]

    @admin.display(description=_("org / domain"), ordering="domain")
    def where(self, obj: Observation) -> str:
        return str(obj.domain) if obj.domain_id is not None else obj.org.slug

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        """The list, and above it the summary of the rows its filters select."""
        response = super().changelist_view(request, extra_context)
        context = getattr(response, "context_data", None)
        if context is not None and "cl" in context:
            context["summary"] = summarize(context["cl"].queryset)
        return response
