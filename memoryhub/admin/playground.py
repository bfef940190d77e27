"""The retrieval playground: what would the agent get for this query?"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.validators import MaxLengthValidator, MaxValueValidator
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _

from tenants.admin import preselect_single_choice
from tenants.models import Domain

from .. import boundary, vocabulary
from ..conf import memoryhub_settings
from ..embedders.base import is_lexical
from ..exceptions import UnknownSource, ValidationFailed
from ..models import KnowledgeBase, MemoryRecord
from ..scope import Scope
from ..services import query as query_service
from .base import admin_context

#: How many of a domain's namespaces the form offers (the most used first).
NAMESPACE_CHOICES = 20

#: What a result's score means, per mode.
SCORE_HELP = {
    "vector": _(
        "vector: cosine similarity of the query's and the record's embeddings, "
        "from -1 to 1 (higher is closer)."
    ),
    "keyword": _(
        "keyword: PostgreSQL's full-text rank (ts_rank), normalised to 0–1 (higher "
        "matches more of the query's words, more often)."
    ),
    "hybrid": _(
        "hybrid: each leg's scores normalised over its candidates (0–1) and combined "
        "with the domain's vector weight; the Vector leg and Keyword leg columns show "
        "where each result stood in each ranking (— : that leg did not find it)."
    ),
}
#: What each part of a query's strategy (``hybrid+hnsw-tenant``) says of how it searched.
STRATEGY_PARTS = {
    "hybrid": _("the vector and keyword legs, fused"),
    "keyword": _("the keyword leg alone (full-text search)"),
    "exact": _("the vector leg compared the query with every record it may return (no index)"),
    "hnsw": _("the vector leg searched the approximate index shared by small domains"),
    "hnsw-tenant": _("the vector leg searched the domain's own approximate index"),
}


def strategy_help(strategy: str) -> list[tuple[str, str]]:
    """Each part of ``strategy`` with what it says (``+2models``: records of two
    embedding models, each searched with its own)."""
    parts = []
    for part in strategy.split("+"):
        if part.endswith("models"):
            models = part.removesuffix("models")
            explained = str(
                _("records of %(n)s embedding models, each searched with its own") % {"n": models}
            )
        else:
            explained = str(STRATEGY_PARTS.get(part, ""))
        parts.append((part, explained))
    return parts


RERANKED_HELP = _(
    "reranked: the relevance score of the configured reranker (higher is more relevant), "
    "over the best fused candidates."
)


def source_choices(domains: QuerySet[Domain]) -> list[Any]:
    """The domains' knowledge base names; grouped by domain when there are several."""
    knowledge_bases = (
        KnowledgeBase.unscoped.filter(domain__in=domains)
        .select_related("domain__org")
        .order_by("domain__org__slug", "domain__slug", "name")
    )
    groups: dict[str, list[tuple[str, str]]] = {}
    for knowledge_base in knowledge_bases:
        groups.setdefault(str(knowledge_base.domain), []).append(
            (knowledge_base.name, knowledge_base.name)
        )
    if len(groups) == 1:
        return next(iter(groups.values()))
    return list(groups.items())


def namespace_choices(domains: QuerySet[Domain]) -> list[tuple[str, str]]:
    """The shared namespace, then the domains' most used ones: one bounded query."""
    top = (
        MemoryRecord.unscoped.filter(domain__in=domains)
        .order_by()
        .values_list("namespace", flat=True)
        .annotate(rows=Count("pk"))
        .order_by("-rows", "namespace")[:NAMESPACE_CHOICES]
    )
    return [("", str(_("(shared)")))] + [(name, name) for name in top if name]


class PlaygroundForm(forms.Form):
    """A query as an agent would send it, in a domain the user can read.

    The source and namespace choices are those of the chosen domain (before one is
    chosen, of every domain the user can read).
    """

    domain: forms.ModelChoiceField = forms.ModelChoiceField(queryset=Domain.objects.none())
    query = forms.CharField(max_length=4000, widget=forms.TextInput(attrs={"size": 80}))
    mode = forms.ChoiceField(
        choices=[(m, m) for m in vocabulary.MODES],
        initial="hybrid",
        help_text=_("What the score means in the chosen mode is said above the results."),
    )
    k = forms.IntegerField(min_value=1, max_value=100, initial=5)
    sources = forms.MultipleChoiceField(
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 6}),
        help_text=_("Knowledge bases; none selected: all."),
    )
    namespaces = forms.MultipleChoiceField(
        required=False,
        widget=forms.SelectMultiple(attrs={"size": 6}),
        help_text=_("The most used namespaces; none selected: the shared one."),
    )
    other_namespaces = forms.CharField(
        required=False,
        max_length=4000,
        help_text=_("More namespaces, comma-separated (e.g. user:alice)."),
    )
    where = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text=_('A where filter as JSON, e.g. {"team": "support"}.'),
    )
    occurred_after = forms.CharField(
        required=False,
        max_length=64,
        help_text=_("Only what occurred at or after this (ISO 8601, or a date: its start in UTC)."),
    )
    occurred_before = forms.CharField(
        required=False, max_length=64, help_text=_("Only what occurred before this.")
    )
    context_turns = forms.IntegerField(
        required=False,
        min_value=0,
        initial=0,
        help_text=_("Show each hit's neighbouring turns of its session (metadata session)."),
    )

    #: The filters most queries leave alone: shown folded unless one is set or wrong.
    MORE = ("other_namespaces", "where", "occurred_after", "occurred_before", "context_turns")

    #: What a link that names only the domain and the query searches with: the empty
    #: form's choices.
    DEFAULTS = {"mode": "hybrid", "k": "5"}

    def __init__(self, *args: Any, domains: QuerySet[Domain], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.is_bound and any(name not in self.data for name in self.DEFAULTS):
            data = QueryDict(mutable=True)
            data.update(self.data)
            for name, value in self.DEFAULTS.items():
                data.setdefault(name, value)
            self.data = data
        # The bounds the query service enforces, as the operator set them.
        limits = vocabulary.bounds()
        self.fields["k"] = forms.IntegerField(min_value=1, max_value=limits.MAX_K, initial=5)
        self.fields["context_turns"].max_value = limits.MAX_CONTEXT_TURNS  # type: ignore[attr-defined]
        self.fields["context_turns"].validators = [MaxValueValidator(limits.MAX_CONTEXT_TURNS)]
        self.fields["query"].max_length = limits.MAX_QUERY_LENGTH  # type: ignore[attr-defined]
        self.fields["query"].validators = [MaxLengthValidator(limits.MAX_QUERY_LENGTH)]
        self.fields["query"].widget.attrs["maxlength"] = str(limits.MAX_QUERY_LENGTH)
        self.fields["domain"].queryset = domains  # type: ignore[attr-defined]
        preselect_single_choice(self.fields["domain"])
        chosen = self._chosen_domain(domains)
        offered = domains if chosen is None else domains.filter(pk=chosen)
        self.fields["sources"].choices = source_choices(offered)  # type: ignore[attr-defined]
        self.fields["namespaces"].choices = namespace_choices(offered)  # type: ignore[attr-defined]

    def main_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name not in self.MORE]

    def more_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.MORE]

    def more_open(self) -> bool:
        """Whether one of the folded filters holds a value (other than its initial
        one) or an error."""
        if not self.is_bound:
            return False
        return any(
            self[name].errors or str(self.data.get(name, "")).strip() not in ("", "0")
            for name in self.MORE
        )

    def _chosen_domain(self, domains: QuerySet[Domain]) -> int | None:
        """The id of the domain in the submitted data, if it is one of ``domains``."""
        value = str(self.data.get("domain", "")) if self.is_bound else ""
        if not (value.isascii() and value.isdigit() and len(value) < 19):
            return None
        return int(value) if domains.filter(pk=int(value)).exists() else None

    def clean_where(self) -> Any:
        text = self.cleaned_data.get("where") or ""
        if not text.strip():
            return None
        try:
            where = boundary.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(_("Not JSON: %s") % exc) from None
        problems = boundary.json_problems(where, "where")
        if problems:
            raise forms.ValidationError(boundary.messages(problems))
        return where

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        other = [part.strip() for part in cleaned.get("other_namespaces", "").split(",")]
        namespaces = list(cleaned.get("namespaces") or []) + [name for name in other if name]
        cleaned["namespaces"] = list(dict.fromkeys(namespaces)) or [""]
        return cleaned


def playground_view(model_admin: Any, request: HttpRequest) -> HttpResponse:
    form = PlaygroundForm(request.GET or None, domains=model_admin.domains_for(request))
    context = admin_context(model_admin, request, title=_("Retrieval playground"), form=form)
    if request.GET and form.is_valid():
        data = form.cleaned_data
        try:
            result = query_service.query(
                Scope.for_domain(data["domain"]),
                query=data["query"],
                k=data["k"],
                mode=data["mode"],
                sources=data["sources"] or None,
                namespaces=data["namespaces"],
                where=data["where"],
                explain=True,
                # The query service validates these (a bad date names its field).
                **{
                    name: data[name]
                    for name in ("occurred_after", "occurred_before", "context_turns")
                    if data.get(name)
                },
            )
        except ValidationFailed as exc:
            for path, messages in exc.errors.items():
                field = "where" if path.startswith("where") else path.split("[")[0]
                form.add_error(
                    field if field in form.fields else None, f"{path}: {'; '.join(messages)}"
                )
        except UnknownSource as exc:
            form.add_error("sources", str(exc))
        else:
            context.update(
                items=result.items,
                rows=[(item, result.legs.get(item.id or "")) for item in result.items],
                grounding=query_service.render_grounding(result.items),
                strategy=result.strategy,
                strategy_help=strategy_help(result.strategy),
                cached=result.cached,
                reranked=result.reranked,
                score_help=RERANKED_HELP if result.reranked else SCORE_HELP.get(data["mode"], ""),
                lexical=is_lexical(memoryhub_settings.embedder()),
            )
    return TemplateResponse(request, "admin/memoryhub/playground.html", context)
