"""The retrieval playground: what would the agent get for this query?"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _

from tenants.models import Domain

from ..scope import Scope
from ..services import query as query_service
from ..services.errors import UnknownSource, ValidationFailed
from .base import admin_context


def _names(text: str) -> list[str] | None:
    names = [part.strip() for part in text.split(",")]
    return [name for name in names if name] or None


class PlaygroundForm(forms.Form):
    domain: forms.ModelChoiceField = forms.ModelChoiceField(queryset=Domain.objects.none())
    query = forms.CharField(max_length=4000, widget=forms.TextInput(attrs={"size": 80}))
    mode = forms.ChoiceField(choices=[(m, m) for m in query_service.MODES], initial="hybrid")
    k = forms.IntegerField(min_value=1, max_value=100, initial=5)
    sources = forms.CharField(
        required=False, help_text=_("Knowledge bases, comma-separated; empty: all.")
    )
    namespaces = forms.CharField(
        required=False, help_text=_('Comma-separated; empty: the shared namespace ("").')
    )
    where = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text=_('A where filter as JSON, e.g. {"team": "support"}.'),
    )

    def __init__(self, *args: Any, domains: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["domain"].queryset = domains  # type: ignore[attr-defined]

    def clean_where(self) -> Any:
        text = self.cleaned_data.get("where") or ""
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(_("Not JSON: %s") % exc.msg) from None

    def clean_namespaces(self) -> list[str]:
        text = self.cleaned_data.get("namespaces") or ""
        return [part.strip() for part in text.split(",")] if text.strip() else [""]


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
                sources=_names(data["sources"]),
                namespaces=data["namespaces"],
                where=data["where"],
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
                grounding=query_service.render_grounding(result.items),
                strategy=result.strategy,
                cached=result.cached,
            )
    return TemplateResponse(request, "admin/memoryhub/playground.html", context)
