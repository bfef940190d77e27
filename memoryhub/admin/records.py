"""Memory records: list, curate through the services, re-embed, erase a data subject."""

from __future__ import annotations

import difflib
import json
import math
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from tenants.admin import preselect_single_choice
from tenants.models import Domain, Org

from ..exceptions import RecordNotFound, ValidationFailed
from ..items import STORED_FIELDS
from ..models import MemoryRecord
from ..namespaces import for_user
from ..policy import Action
from ..scope import Scope, tenant_scope
from ..services import consolidation as consolidation_service
from ..services import forget as forget_service
from ..services import history as history_service
from ..services import indexing as indexing_service
from ..services import subjects, supersession, updates
from ..services import write as write_service
from ..templatetags.memoryhub_admin import when_wrapped
from .base import OperatorAdmin, admin_context, operator_view, principal
from .erasure import erasure_batch, show_receipt
from .knowledge import RecordForm, item_from
from .list_filters import (
    EmbeddingModelFilter,
    NamespaceFilter,
    ValidityFilter,
    VisibleRelatedFilter,
    knowledge_base_label,
    shown,
)
from .playground import playground_view

#: How much of a record's content its change-list row shows (the rest on hover).
CONTENT_PREVIEW_CHARS = 120
#: The hover text's limit: a page of long chunks would otherwise weigh megabytes.
CONTENT_TITLE_CHARS = 2000


def preview(text: str, limit: int = CONTENT_PREVIEW_CHARS) -> str:
    """``text`` on one line, cut at the last word boundary before ``limit`` characters."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    boundary = cut.rfind(" ")
    if boundary > limit // 2:  # one very long word is cut inside it
        cut = cut[:boundary]
    return cut.rstrip(" ,.;:") + "…"


class KnowledgeBaseChoiceField(forms.ModelChoiceField):
    """Knowledge bases labelled ``org / domain / name`` (give it ``domain__org``)."""

    def label_from_instance(self, obj: Any) -> str:
        return knowledge_base_label(obj)


#: How many sources of a fact, and facts of a turn, a record page links to.
PROVENANCE_SHOWN = 20

#: What the system keeps of a record: read-only, the record page's "Indexing" section.
INDEXING_FIELDS = (
    "id",
    "status",
    "embedding_summary",
    "attempts",
    "last_error",
    "content_hash",
    "indexed_at",
    "created_at",
    "updated_at",
)


@admin.register(MemoryRecord)
class MemoryRecordAdmin(OperatorAdmin):
    form = RecordForm
    # The content takes the room; key, tags and kind are a line under it, the domain the
    # source's second line (narrow columns: the list fits a 1280 px screen).
    list_display = ["short_content", "source", "state"]
    list_filter = [
        ("knowledge_base", VisibleRelatedFilter),
        NamespaceFilter,
        "kind",
        "status",
        ("org", VisibleRelatedFilter),
        ("domain", VisibleRelatedFilter),
        EmbeddingModelFilter,
        ValidityFilter,
        "created_at",
    ]
    list_select_related = ["knowledge_base", "domain__org"]
    # At a million records: no second COUNT(*) of everything the user sees, and no
    # per-choice facet counts (each a scan).
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    search_fields = ["content", "key", "namespace"]
    readonly_fields = INDEXING_FIELDS
    # No date_hierarchy: its year links are a DISTINCT over every record the user sees.
    actions = ["reembed"]
    change_list_template = "admin/memoryhub/memoryrecord/change_list.html"
    change_form_template = "admin/memoryhub/memoryrecord/change_form.html"

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        main = list(RecordForm.Meta.fields)
        if obj is None:
            return [(None, {"fields": [*main, "supersede"]})]
        return [
            (None, {"fields": main}),
            (_("Indexing"), {"fields": list(INDEXING_FIELDS)}),
        ]

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        if "knowledge_base" in form.base_fields:
            # A new field, not the declared one's queryset changed: RecordForm's declared
            # field is shared by every form class built from it (and every request).
            form.base_fields["knowledge_base"] = preselect_single_choice(
                KnowledgeBaseChoiceField(
                    queryset=self.editable_knowledge_bases(request).order_by(
                        "domain__org__slug", "domain__slug", "name"
                    ),
                    label=_("Knowledge base"),
                )
            )
        return form

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(self.readonly_fields)
        if obj is not None:
            fields += ["knowledge_base", "namespace"]
        return fields

    @admin.display(description=_("content"))
    def short_content(self, obj: MemoryRecord) -> str:
        title = obj.content
        if len(title) > CONTENT_TITLE_CHARS:
            title = title[: CONTENT_TITLE_CHARS - 1] + "…"
        details = [
            shown(obj.namespace) or format_html("<em>{}</em>", _("shared")),
            format_html("{} <strong>{}</strong>", _("key"), shown(obj.key)) if obj.key else "",
            format_html("{} {}", _("tags"), self.tag_list(obj)) if obj.tags else "",
            obj.get_kind_display().split(":")[0].lower(),
        ]
        return format_html(
            '<span class="mh-content" title="{}">{}</span><div class="mh-details">{}</div>',
            title,
            preview(obj.content),
            format_html_join(" · ", "{}", ((part,) for part in details if part)),
        )

    @admin.display(description=_("status, updated"), ordering="updated_at")
    def state(self, obj: MemoryRecord) -> str:
        return format_html(
            '<span class="mh-status-{}">{}</span><div class="mh-details mh-when">{}</div>',
            obj.status,
            obj.get_status_display(),
            when_wrapped(obj.updated_at),
        )

    @admin.display(description=_("tags"))
    def tag_list(self, obj: MemoryRecord) -> str:
        return ", ".join(obj.tags) or "—"

    @admin.display(description=_("source"), ordering="knowledge_base__name")
    def source(self, obj: MemoryRecord) -> str:
        domain = obj.domain
        return format_html(
            '{}<div class="mh-details">{}/{}</div>',
            obj.knowledge_base.name,
            domain.org.slug,
            domain.slug,
        )

    @admin.display(description=_("embedding"))
    def embedding_summary(self, obj: MemoryRecord) -> str:
        vector = obj.embedding
        if vector is None:
            return "—"
        norm = math.sqrt(sum(float(x) * float(x) for x in vector))
        return f"{obj.embedding_model or '?'} · {len(vector)} dimensions · norm {norm:.4f}"

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryRecord]:
        return super().get_queryset(request).defer("search_vector")

    def save_model(self, request: HttpRequest, obj: MemoryRecord, form: Any, change: bool) -> None:
        """Through the write service for the admin's user: logged; the policy lets a curator
        change a read-only knowledge base."""
        item = item_from(form.cleaned_data)
        knowledge_base = obj.knowledge_base
        scope = Scope(knowledge_base.org_id, knowledge_base.domain_id)
        if change:
            item.pop("namespace", None)
            updates.update_record(scope, obj.pk, item, partial=True, principal=principal(request))
        else:
            result = write_service.write(
                scope, [item], sources=[knowledge_base.name], principal=principal(request)
            )
            obj.pk = result.records[0].id
        obj.refresh_from_db()

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        return None

    def delete_model(self, request: HttpRequest, obj: MemoryRecord) -> None:
        forget_service.forget_record(
            Scope(obj.org_id, obj.domain_id), obj.pk, principal=principal(request)
        )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[MemoryRecord]) -> None:
        for record in queryset.select_related(None).only("pk", "org_id", "domain_id"):
            self.delete_model(request, record)

    def history_rows(self, obj: MemoryRecord) -> list[dict[str, Any]]:
        """The record's states, newest first, each with what changed from the one before."""
        states = history_service.history(Scope(obj.org_id, obj.domain_id), obj.pk)["versions"]
        return [
            {**state, "changes": _changes(states[i + 1] if i + 1 < len(states) else None, state)}
            for i, state in enumerate(states)
        ]

    def restore_view(self, request: HttpRequest, object_id: str, version: int) -> HttpResponse:
        """POST only: make a previous version current again (through the write service)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        record = self.get_object(request, object_id)
        if record is None:
            raise Http404(_("No such record."))
        self.require(request, Action.CURATE, record)
        try:
            updates.restore_version(
                Scope(record.org_id, record.domain_id),
                record.pk,
                version,
                principal=principal(request),
            )
        except RecordNotFound:
            raise Http404(_("No such version.")) from None
        except ValidationFailed as exc:
            # The version no longer fits (its key is another record's now): said, not a 500.
            self.message_user(
                request,
                _("Version %(v)d cannot be restored: %(why)s") % {"v": version, "why": exc},
                messages.ERROR,
            )
        else:
            self.message_user(
                request,
                _("Version %(v)d restored as a new version.") % {"v": version},
                messages.SUCCESS,
            )
        return HttpResponseRedirect(
            reverse("admin:memoryhub_memoryrecord_change", args=[record.pk])
        )

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: Any = None
    ) -> HttpResponse:
        """The HISTORY button: a record's versions (with their changes and a restore) are
        on its page; Django's own log of admin edits would say it has no history."""
        if self.get_object(request, object_id) is None:
            raise Http404
        change = reverse("admin:memoryhub_memoryrecord_change", args=[object_id])
        return HttpResponseRedirect(f"{change}#mh-history")

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        obj = self.get_object(request, object_id)
        if obj is not None:
            scope = Scope(obj.org_id, obj.domain_id)
            with tenant_scope(scope):
                sources = list(
                    MemoryRecord.objects.filter(pk__in=obj.derived_from[:PROVENANCE_SHOWN])
                    .select_related(None)
                    .only("pk", "content", "created_at")
                    .order_by("created_at")
                )
            extra_context = {
                **(extra_context or {}),
                "history": self.history_rows(obj),
                "can_restore": self.allows(request, Action.CURATE, obj),
                # Consolidation's provenance, both ways (bounded).
                "derived_from": sources,
                "derived_from_total": len(obj.derived_from),
                "facts": consolidation_service.facts_citing(scope, obj.pk, PROVENANCE_SHOWN),
                # Supersession: the chain the record is in (bounded each way).
                "timeline": _timeline(scope, obj),
            }
        return super().change_view(request, object_id, form_url, extra_context)

    def has_reembed_permission(self, request: HttpRequest) -> bool:
        return self.allows(request, Action.REEMBED)

    #: A selection larger than this is a job for ``manage.py memoryhub_reembed``: the
    #: action reads every selected id in the request.
    REEMBED_MAX = 10_000

    @admin.action(description=_("Re-embed selected records"), permissions=["reembed"])
    def reembed(self, request: HttpRequest, queryset: QuerySet[MemoryRecord]) -> None:
        queryset = self.allowed_rows(request, queryset, Action.REEMBED)
        if queryset[: self.REEMBED_MAX + 1].count() > self.REEMBED_MAX:
            self.message_user(
                request,
                _(
                    "More than %(max)d records selected: re-embed a domain or knowledge base "
                    "with manage.py memoryhub_reembed --org … --domain … [--source …]."
                )
                % {"max": self.REEMBED_MAX},
                messages.ERROR,
            )
            return
        # Forced (the operator asked for these), and never hidden meanwhile: each record
        # serves queries with its current vector until the new one is stored.
        count = indexing_service.reembed(queryset, force=True)
        self.message_user(
            request,
            ngettext("Re-embedding %(n)d record.", "Re-embedding %(n)d records.", count)
            % {"n": count},
            messages.SUCCESS,
        )

    # --- custom pages ----------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = lambda view: self.admin_site.admin_view(operator_view(view))  # noqa: E731
        custom = [
            path("erase-subject/", wrap(self.erase_subject_view), name="memoryhub_erase_subject"),
            path(
                "export-subject/", wrap(self.export_subject_view), name="memoryhub_export_subject"
            ),
            path(
                "<path:object_id>/restore/<int:version>/",
                wrap(self.restore_view),
                name="memoryhub_memoryrecord_restore",
            ),
            path(
                "playground/",
                wrap(lambda request: playground_view(self, request)),
                name="memoryhub_playground",
            ),
        ]
        return custom + super().get_urls()

    def erase_subject_view(self, request: HttpRequest) -> HttpResponse:
        """Erase a data subject: form, then counts per KB, then erase, then the receipt."""
        self.require(request, Action.ERASE_SUBJECT)
        form = SubjectForm(
            request.POST or None, domains=self.domains_for(request, Action.ERASE_SUBJECT)
        )
        context = admin_context(self, request, title=_("Erase a data subject"), form=form)
        if request.method == "POST" and form.is_valid():
            domains = form.selected_domains()
            namespace = form.cleaned_data["namespace"]
            context["by_user"] = form.cleaned_data.get("by_user")
            if namespace is None:  # no such user: nothing to erase, said as for any user
                context.update(rows=[], total=0, confirm=True)
                return TemplateResponse(request, "admin/memoryhub/erase_subject.html", context)
            selector = forget_service.ForgetRequest(namespace=namespace)
            if request.POST.get("post") != "yes":
                rows = [
                    (domain, name, count)
                    for domain in domains
                    for name, count in forget_service.preview(
                        Scope.for_domain(domain), selector
                    ).items()
                ]
                context.update(rows=rows, total=sum(count for *_, count in rows), confirm=True)
                return TemplateResponse(request, "admin/memoryhub/erase_subject.html", context)
            receipt: list[tuple[Domain, str, int]] = []
            for domain in domains:
                result = forget_service.forget(
                    Scope.for_domain(domain),
                    selector,
                    principal=principal(request),
                    batch=erasure_batch(request),
                )
                receipt.extend((domain, name, count) for name, count in result.by_source.items())
            return show_receipt(self, request, receipt)
        return TemplateResponse(request, "admin/memoryhub/erase_subject.html", context)

    def export_subject_view(self, request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
        """A data subject's access export: the form, then the JSON document as a
        download (logged by the service)."""
        self.require(request, Action.EXPORT)
        form = SubjectForm(request.POST or None, domains=self.domains_for(request, Action.EXPORT))
        context = admin_context(self, request, title=_("Export a data subject"), form=form)
        if request.method == "POST" and form.is_valid():
            namespace = form.cleaned_data["namespace"]
            if namespace is None:  # no such user: said as for a user with no memory
                context.update(nothing=True, by_user=form.cleaned_data.get("by_user"))
            else:
                domains = list(form.selected_domains())
                try:
                    pieces = subjects.access_export(
                        domains, namespace, principal=principal(request)
                    )
                except ValidationFailed as exc:
                    for messages_ in exc.errors.values():
                        form.add_error("namespace", " ".join(map(str, messages_)))
                    return TemplateResponse(request, "admin/memoryhub/export_subject.html", context)
                response = StreamingHttpResponse(pieces, content_type="application/json")
                name = f"subject-export-{domains[0].org.slug}.json" if domains else "export.json"
                response["Content-Disposition"] = f'attachment; filename="{name}"'
                return response
        return TemplateResponse(request, "admin/memoryhub/export_subject.html", context)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        extra_context = {
            "can_erase_subject": self.allows(request, Action.ERASE_SUBJECT),
            "can_export_subject": self.allows(request, Action.EXPORT),
        }
        return super().changelist_view(request, extra_context)


def _user_namespace(username: str) -> str | None:
    """The namespace of the site's user ``username`` (None: no such user)."""
    model = get_user_model()
    user = model._default_manager.filter(**{model.USERNAME_FIELD: username}).first()
    return for_user(user) if user is not None else None


class SubjectForm(forms.Form):
    """Whose memory (a namespace, or a user of the site) in which org and domains: the
    erase and export pages'."""

    org: forms.ModelChoiceField = forms.ModelChoiceField(
        queryset=Org.objects.none(), help_text=_("The org the person's memory is in.")
    )
    domain: forms.ModelChoiceField = forms.ModelChoiceField(
        queryset=Domain.objects.none(),
        required=False,
        help_text=_("Empty: every domain of the org."),
    )
    namespace = forms.CharField(
        max_length=200,
        required=False,
        help_text=_("The data subject's namespace, e.g. user:alice."),
    )
    user = forms.CharField(
        max_length=150,
        required=False,
        label=_("Or a user"),
        help_text=_(
            "Or the username of a person who signs in to this site: their memory is found for you."
        ),
    )

    def __init__(self, *args: Any, domains: QuerySet[Domain], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.domains = domains
        self.fields["org"].queryset = Org.objects.filter(  # type: ignore[attr-defined]
            pk__in=domains.values("org_id")
        )
        self.fields["domain"].queryset = domains  # type: ignore[attr-defined]
        preselect_single_choice(self.fields["org"])

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        org, domain = cleaned.get("org"), cleaned.get("domain")
        if org is not None and domain is not None and domain.org_id != org.pk:
            self.add_error("domain", _("This domain belongs to another org."))
        namespace = (cleaned.get("namespace") or "").strip()
        username = (cleaned.get("user") or "").strip()
        if namespace and username:
            self.add_error("user", _("Give a namespace or a user, not both."))
        elif username:
            # Unknown users and users with no memory read the same ("nothing to erase"):
            # the page is not a way to learn who has an account.
            cleaned["namespace"] = _user_namespace(username)
            cleaned["by_user"] = username
        elif not namespace:
            self.add_error("namespace", _("Name the data subject's namespace, or a user."))
        return cleaned

    def selected_domains(self) -> list[Domain]:
        domain = self.cleaned_data.get("domain")
        if domain is not None:
            return [domain]
        return list(self.domains.filter(org=self.cleaned_data["org"]))


def _words_diff(old: str, new: str) -> str:
    """``old`` → ``new`` word by word: removed words in <del>, added in <ins>."""
    before, after = old.split(), new.split()
    parts: list[str] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            parts.append(escape(" ".join(before[i1:i2])))
            continue
        if i2 > i1:
            parts.append(format_html("<del>{}</del>", " ".join(before[i1:i2])))
        if j2 > j1:
            parts.append(format_html("<ins>{}</ins>", " ".join(after[j1:j2])))
    return " ".join(parts)


def _changes(older: dict[str, Any] | None, state: dict[str, Any]) -> str:
    """What ``state`` changed from ``older`` (None: it is the first state)."""
    if older is None:
        return format_html("<em>{}</em>", _("first state"))
    items = []
    for name in STORED_FIELDS:
        if older[name] == state[name]:
            continue
        if name == "content":
            detail = mark_safe(_words_diff(older[name], state[name]))  # each word escaped
        else:
            detail = format_html("{} → {}", _short(older[name]), _short(state[name]))
        items.append(format_html("<div><strong>{}</strong>: {}</div>", name, detail))
    if not items:
        return format_html("<em>{}</em>", _("no change"))
    return mark_safe("".join(items))  # each part escaped


def _timeline(scope: Scope, record: MemoryRecord) -> list[dict[str, Any]]:
    """The record's supersession chain, oldest first; empty when it is in none."""
    links = supersession.timeline(scope, record.pk)
    return links if len(links) > 1 else []


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"
