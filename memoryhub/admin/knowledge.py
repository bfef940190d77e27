"""Knowledge bases and their records: curation, import, export, re-embedding."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import IntegerField, QuerySet
from django.db.models.expressions import RawSQL
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.formats import number_format
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from tenants.admin import preselect_single_choice

from ..conf import memoryhub_settings
from ..exceptions import ValidationFailed
from ..items import STORED_FIELDS
from ..models import ImportJob, KnowledgeBase, MemoryRecord
from ..policy import Action
from ..scope import Scope
from ..services import forget as forget_service
from ..services import imports, knowledge_bases, supersession
from ..services import records as record_service
from ..vocabulary import items_of
from .base import OperatorAdmin, admin_context, deletion_summary, operator_view, principal
from .list_filters import knowledge_base_label

#: What the record form edits: a record's stored fields and its namespace.
RECORD_FIELDS = (*STORED_FIELDS, "namespace")


def item_from(data: dict[str, Any]) -> dict[str, Any]:
    """A record form's cleaned data as the write service's item (the record forms of
    knowledge bases and of records share it)."""
    item = {name: data.get(name) for name in RECORD_FIELDS if name in data}
    if not item.get("key"):
        item["key"] = None
    item["tags"] = list(item.get("tags") or [])
    item["metadata"] = item.get("metadata") or {}
    item["namespace"] = item.get("namespace") or ""
    if data.get("supersede"):
        item["supersede"] = True
    return item


class RecordForm(forms.ModelForm):
    """Validated by the write service's own rules, so admin and API agree.

    The knowledge base choices start empty (fail closed); the admin fills them with the
    operator's visible knowledge bases.
    """

    knowledge_base = forms.ModelChoiceField(queryset=KnowledgeBase.unscoped.none())
    supersede = forms.BooleanField(
        label=_("Supersede"),
        required=False,
        help_text=_(
            "With a key: the record holding it now is closed at this one's valid from "
            "(else now) and kept in its timeline, instead of being overwritten."
        ),
    )

    class Meta:
        model = MemoryRecord
        fields = ["knowledge_base", "namespace", *STORED_FIELDS]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        try:
            [item] = items_of([item_from(cleaned)])
            if cleaned.get("knowledge_base") is not None:
                supersession.check_item(cleaned["knowledge_base"], item, "items[0].valid_from")
            if self.instance.pk is not None:
                supersession.check_closed(self.instance, item)
        except ValidationFailed as exc:
            for path_, messages_ in exc.errors.items():
                field = path_.removeprefix("items[0].").split(".")[0].split("[")[0]
                self.add_error(field if field in self.fields else None, messages_)
        return cleaned


class KnowledgeBaseForm(forms.ModelForm):
    class Meta:
        model = KnowledgeBase
        fields = ["domain", "name", "description", "read_only", "on_write", "consolidate"]


class ImportForm(forms.Form):
    file = forms.FileField(
        help_text=_(
            "JSON Lines (one item per line), CSV with a content column, or Markdown. "
            "The file is checked and imported by a worker; progress shows on the "
            "knowledge base's page."
        )
    )
    format = forms.ChoiceField(
        choices=[("", _("From the file name"))] + list(ImportJob.Format.choices), required=False
    )
    namespace = forms.CharField(
        required=False, max_length=200, help_text=_("Optional, for every item.")
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        upload = cleaned.get("file")
        if upload is None:
            return cleaned
        limit = memoryhub_settings.IMPORT_MAX_BYTES
        if upload.size > limit:
            raise forms.ValidationError(
                _("The file is larger than %(mb)d MB.") % {"mb": limit // 1024**2}
            )
        name = upload.name.lower()
        format_ = cleaned.get("format") or (
            "jsonl"
            if name.endswith((".jsonl", ".ndjson"))
            else "csv"
            if name.endswith(".csv")
            else "markdown"
            if name.endswith((".md", ".markdown"))
            else ""
        )
        if not format_:
            self.add_error("format", _("Choose a format: the file name does not tell."))
        cleaned["format"] = format_
        return cleaned


class ImportAnywhereForm(ImportForm):
    """The import form reached from the operator home: the knowledge base first (only
    those the user may import into; preselected when there is one), then the file."""

    knowledge_base = forms.ModelChoiceField(
        queryset=KnowledgeBase.unscoped.none(),
        label=_("Knowledge base"),
        help_text=_("Where the file's items go."),
    )
    field_order = ["knowledge_base", "file", "format", "namespace"]

    def __init__(self, *args: Any, knowledge_bases: QuerySet[KnowledgeBase], **kwargs: Any):
        super().__init__(*args, **kwargs)
        field = self.fields["knowledge_base"]
        field.queryset = knowledge_bases  # type: ignore[attr-defined]
        field.label_from_instance = knowledge_base_label  # type: ignore[attr-defined]
        preselect_single_choice(field)


def _n(count: int) -> str:
    return number_format(count)  # as the admin shows every other count


def import_summary(job: dict[str, Any]) -> str:
    """What became of an import's items, in plain words (under its row on the KB page)."""
    status, imported, created = job["status"], job["imported"], job["created"]
    if status == ImportJob.Status.QUEUED:
        return str(_("Waiting for a worker."))
    if job["total"] is None:
        if status == ImportJob.Status.RUNNING:
            return str(_("Checking the file: %(n)s items so far.") % {"n": _n(job["parsed"])})
        return str(_("Nothing was written."))
    if status in (ImportJob.Status.UNDOING, ImportJob.Status.UNDONE):
        return str(_("The records this import created are erased (undo)."))
    parts = [
        ngettext("%(n)s item in the file", "%(n)s items in the file", job["total"])
        % {"n": _n(job["total"])},
        ngettext("%(n)s new record", "%(n)s new records", created) % {"n": _n(created)},
    ]
    outcome = job.get("outcome")
    if outcome is not None:
        if outcome["deduplicated"]:
            parts.append(
                ngettext(
                    "%(n)s was a duplicate of a record already in this knowledge base (or "
                    "earlier in the file) and was skipped",
                    "%(n)s were duplicates of records already in this knowledge base (or "
                    "earlier in the file) and were skipped",
                    outcome["deduplicated"],
                )
                % {"n": _n(outcome["deduplicated"])}
            )
        if outcome["updated"]:
            parts.append(
                ngettext(
                    "%(n)s updated the record with the same key",
                    "%(n)s updated the records with the same keys",
                    outcome["updated"],
                )
                % {"n": _n(outcome["updated"])}
            )
    elif imported > created:
        parts.append(
            ngettext(
                "%(n)s so far did not create a record (a duplicate, or an update by key)",
                "%(n)s so far did not create a record (duplicates, or updates by key)",
                imported - created,
            )
            % {"n": _n(imported - created)}
        )
    if imported < job["total"] and status != ImportJob.Status.RUNNING:
        parts.append(
            _("%(n)s not written (the import stopped)") % {"n": _n(job["total"] - imported)}
        )
    return "; ".join(str(part) for part in parts) + "."


def with_summary(job: dict[str, Any]) -> dict[str, Any]:
    return {**job, "summary": import_summary(job)}


@admin.register(KnowledgeBase)
class KnowledgeBaseAdmin(OperatorAdmin):
    form = KnowledgeBaseForm
    list_display = [
        "name_and_state",
        "domain",
        "write_policy",
        "record_count",
        "refused_writes",
    ]
    list_filter = ["read_only", "on_write", ("org", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["domain__org"]
    search_fields = ["name", "description", "domain__slug", "org__slug"]
    readonly_fields = ["refused_writes", "deleting_since", "created_at", "updated_at"]
    change_form_template = "admin/memoryhub/knowledgebase/change_form.html"

    #: The list counts each knowledge base's records up to this many ("10000+" past
    #: it): a page of knowledge bases of a million records each stays a bounded read.
    RECORDS_COUNTED_UP_TO = 10_000

    def get_queryset(self, request: HttpRequest) -> QuerySet[KnowledgeBase]:
        table = MemoryRecord._meta.db_table
        kb_table = KnowledgeBase._meta.db_table
        capped = RawSQL(
            f'SELECT count(*) FROM (SELECT 1 FROM "{table}" r'
            f' WHERE r.knowledge_base_id = "{kb_table}"."id" AND r.org_id = "{kb_table}"."org_id"'
            " LIMIT %s) capped",
            [self.RECORDS_COUNTED_UP_TO + 1],
            output_field=IntegerField(),
        )
        return super().get_queryset(request).annotate(record_count=capped)

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> KnowledgeBase | None:
        """One knowledge base, without the change list's record count (a count over a
        million records on every page view; the page shows its own, bounded, stats)."""
        try:
            pk = KnowledgeBase._meta.pk.to_python(object_id)
            return super().get_queryset(request).select_related("domain__org").get(pk=pk)
        except (KnowledgeBase.DoesNotExist, ValidationError, ValueError):
            return None

    @admin.display(description=_("records"), ordering="record_count")
    def record_count(self, obj: KnowledgeBase) -> str:
        count = getattr(obj, "record_count", 0) or 0
        if count > self.RECORDS_COUNTED_UP_TO:
            return f"{self.RECORDS_COUNTED_UP_TO}+"
        return str(count)

    @admin.display(description=_("agents' writes"), ordering="read_only")
    def write_policy(self, obj: KnowledgeBase) -> str:
        if not obj.read_only:
            return str(_("accepted"))
        if obj.on_write == KnowledgeBase.OnWrite.IGNORE:
            return str(_("read-only: ignored"))
        return str(_("read-only: refused"))

    @admin.display(description=_("tools"))
    def tools(self, obj: KnowledgeBase) -> str:
        if obj.pk is None:
            return "—"
        return format_html(
            '<a class="button" href="{}">Import a file</a> '
            '<a class="button" href="{}">Export JSONL</a>',
            reverse("admin:memoryhub_knowledgebase_import", args=[obj.pk]),
            reverse("admin:memoryhub_knowledgebase_export", args=[obj.pk]),
        )

    @admin.display(description=_("tools"))
    def export_tool(self, obj: KnowledgeBase) -> str:
        if obj.pk is None:
            return "—"
        return format_html(
            '<a class="button" href="{}">Export JSONL</a>',
            reverse("admin:memoryhub_knowledgebase_export", args=[obj.pk]),
        )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_fields(request, obj))
        if obj is None or obj.deleting_since is None:
            fields = [name for name in fields if name != "deleting_since"]
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None:
            fields.append("domain")
            # The import button only for those who may import here.
            fields.append("tools" if self.allows(request, Action.IMPORT, obj) else "export_tool")
        return fields

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """What deleting knowledge bases erases, as counts (bounded at any volume)."""
        return deletion_summary(self, objs, request, records_of="knowledge_base")

    def save_model(self, request: HttpRequest, obj: KnowledgeBase, form: Any, change: bool) -> None:
        knowledge_bases.save_knowledge_base(obj)

    def delete_model(self, request: HttpRequest, obj: KnowledgeBase) -> None:
        """A worker erases the records (with a receipt) and then the knowledge base."""
        forget_service.schedule_knowledge_base_deletion(obj, principal=principal(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[KnowledgeBase]) -> None:
        for knowledge_base in queryset:
            self.delete_model(request, knowledge_base)

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> HttpResponse:
        self.message_user(
            request,
            _(
                "%(kb)s is being deleted: a worker erases its records (an erasure receipt "
                "records it), then the knowledge base. It takes no writes meanwhile."
            )
            % {"kb": obj_display},
            messages.SUCCESS,
        )
        return redirect(reverse("admin:memoryhub_knowledgebase_changelist"))

    @admin.display(description=_("name"), ordering="name")
    def name_and_state(self, obj: KnowledgeBase) -> str:
        if obj.deleting_since is None:
            return obj.name
        return format_html("{} <em>({})</em>", obj.name, _("being deleted"))

    # --- import and export ---------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        custom = [
            path(
                "import/",
                self.admin_site.admin_view(operator_view(self.import_anywhere_view)),
                name="memoryhub_knowledgebase_import_any",
            ),
            path(
                "<int:pk>/import/",
                self.admin_site.admin_view(operator_view(self.import_view)),
                name="memoryhub_knowledgebase_import",
            ),
            path(
                "<int:pk>/import/<int:job_id>/progress/",
                self.admin_site.admin_view(operator_view(self.import_progress_view)),
                name="memoryhub_knowledgebase_import_progress",
            ),
            path(
                "<int:pk>/import/<int:job_id>/<slug:what>/",
                self.admin_site.admin_view(operator_view(self.import_action_view)),
                name="memoryhub_knowledgebase_import_action",
            ),
            path(
                "<int:pk>/export/",
                self.admin_site.admin_view(operator_view(self.export_view)),
                name="memoryhub_knowledgebase_export",
            ),
        ]
        return custom + super().get_urls()

    def _knowledge_base(self, request: HttpRequest, pk: int, action: Action) -> KnowledgeBase:
        """A knowledge base the user sees (404 otherwise) and may do ``action`` in (403)."""
        knowledge_base = get_object_or_404(self.get_queryset(request), pk=pk)
        self.require(request, action, knowledge_base)
        return knowledge_base

    def import_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Store the file and queue the job; a worker imports it (never this request)."""
        knowledge_base = self._knowledge_base(request, pk, Action.IMPORT)
        form = ImportForm(request.POST or None, request.FILES or None)
        if request.method == "POST" and form.is_valid():
            queued = self._queue_import(request, knowledge_base, form)
            if queued is not None:
                return queued
        context = admin_context(
            self,
            request,
            title=_("Import into %s") % knowledge_base.name,
            original=knowledge_base,
            form=form,
            knowledge_base=knowledge_base,
        )
        return TemplateResponse(request, "admin/memoryhub/knowledgebase/import.html", context)

    def importable_knowledge_bases(self, request: HttpRequest) -> QuerySet[KnowledgeBase]:
        """The knowledge bases the user may import into (none being deleted)."""
        return (
            KnowledgeBase.unscoped.filter(
                org__in=self.orgs_for(request, Action.IMPORT), deleting_since__isnull=True
            )
            .select_related("domain__org")
            .order_by("domain__org__slug", "domain__slug", "name")
        )

    def import_anywhere_view(self, request: HttpRequest) -> HttpResponse:
        """The operator home's "Import": choose the knowledge base and the file on one page."""
        self.require(request, Action.IMPORT)
        form = ImportAnywhereForm(
            request.POST or None,
            request.FILES or None,
            knowledge_bases=self.importable_knowledge_bases(request),
        )
        if request.method == "POST" and form.is_valid():
            queued = self._queue_import(request, form.cleaned_data["knowledge_base"], form)
            if queued is not None:
                return queued
        context = admin_context(
            self, request, title=_("Import a file"), form=form, knowledge_base=None
        )
        return TemplateResponse(request, "admin/memoryhub/knowledgebase/import.html", context)

    def _queue_import(
        self, request: HttpRequest, knowledge_base: KnowledgeBase, form: forms.Form
    ) -> HttpResponse | None:
        """Store the form's file as a job and answer with the knowledge base's page (its
        progress); None when the file was refused (the form then says why)."""
        data = form.cleaned_data
        try:
            job = imports.create_job(
                Scope(knowledge_base.org_id, knowledge_base.domain_id),
                knowledge_base,
                file=data["file"],
                format=data["format"],
                filename=data["file"].name,
                namespace=data.get("namespace") or "",
                principal=principal(request),
            )
        except ValidationFailed as exc:
            for where, problems in exc.errors.items():
                form.add_error(None, f"{where}: {'; '.join(problems)}")
            return None
        self.message_user(
            request,
            _("The file %(file)s is queued for import; its progress is below.")
            % {"file": job.filename},
            messages.INFO,
        )
        return redirect(
            reverse("admin:memoryhub_knowledgebase_change", args=[knowledge_base.pk])
            + f"#import-{job.pk}"
        )

    def _import_job(self, request: HttpRequest, pk: int, job_id: int, action: Action) -> ImportJob:
        knowledge_base = self._knowledge_base(request, pk, action)
        return get_object_or_404(ImportJob.unscoped, pk=job_id, knowledge_base=knowledge_base)

    def import_progress_view(self, request: HttpRequest, pk: int, job_id: int) -> JsonResponse:
        job = self._import_job(request, pk, job_id, Action.READ)
        return JsonResponse(with_summary(imports.progress(job)))

    #: The buttons of an import: the action they need, and the service that does it.
    JOB_ACTIONS = {"cancel": Action.IMPORT, "rerun": Action.IMPORT, "undo": Action.FORGET}

    def import_action_view(
        self, request: HttpRequest, pk: int, job_id: int, what: str
    ) -> HttpResponse:
        """Cancel, re-run or undo an import (POST; the KB page's buttons)."""
        if what not in self.JOB_ACTIONS:
            raise Http404
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        job = self._import_job(request, pk, job_id, self.JOB_ACTIONS[what])
        if what == "undo":
            self.require(request, Action.IMPORT, job.knowledge_base)
        scope = Scope(job.org_id, job.domain_id)
        try:
            if what == "cancel":
                imports.cancel_job(scope, job.pk, principal=principal(request))
                message = _(
                    "The import of %(file)s is cancelled; what it wrote stays until undone."
                )
            elif what == "rerun":
                imports.rerun_job(scope, job.pk)
                message = _("The import of %(file)s is queued again; it resumes where it stopped.")
            else:
                forget_service.undo_job(scope, job.pk, principal=principal(request))
                message = _(
                    "The records %(file)s created are being erased; the receipt shows below."
                )
            self.message_user(request, message % {"file": job.filename}, messages.SUCCESS)
        except ValidationFailed as exc:
            problems = [m for messages_ in exc.errors.values() for m in messages_]
            self.message_user(request, "; ".join(problems), messages.ERROR)
        return redirect(
            reverse("admin:memoryhub_knowledgebase_change", args=[pk]) + f"#import-{job.pk}"
        )

    def export_view(self, request: HttpRequest, pk: int) -> StreamingHttpResponse:
        knowledge_base = self._knowledge_base(request, pk, Action.READ)
        response = StreamingHttpResponse(
            record_service.export_lines(knowledge_base), content_type="application/x-ndjson"
        )
        response["Content-Disposition"] = f'attachment; filename="{knowledge_base.name}.jsonl"'
        return response

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        extra_context = extra_context or {}
        knowledge_base = self.get_object(request, object_id)  # None: not found, or not theirs
        jobs = (
            ImportJob.unscoped.filter(knowledge_base=knowledge_base).order_by("-created_at")[:10]
            if knowledge_base is not None
            else []
        )
        extra_context["import_jobs"] = [with_summary(imports.progress(job)) for job in jobs]
        extra_context["importing"] = any(
            not job["finished"] or job["indexed"] < job["created"]
            for job in extra_context["import_jobs"]
        )
        extra_context["can_import"] = knowledge_base is not None and self.allows(
            request, Action.IMPORT, knowledge_base
        )
        extra_context["can_undo"] = extra_context["can_import"] and self.allows(
            request, Action.FORGET, knowledge_base
        )
        if knowledge_base is not None:
            records_url = reverse("admin:memoryhub_memoryrecord_changelist")
            kb_filter = f"knowledge_base__id__exact={knowledge_base.pk}"
            stats = record_service.knowledge_base_stats(knowledge_base)
            extra_context["stats"] = stats
            extra_context["records_url"] = f"{records_url}?{kb_filter}"
            extra_context["status_urls"] = {
                status: f"{records_url}?{kb_filter}&status__exact={status}"
                for status in MemoryRecord.Status.values
            }
            extra_context["namespace_links"] = [
                (ns, n, f"{records_url}?{kb_filter}&{urlencode({'namespace__exact': ns})}")
                for ns, n in stats["namespaces"]
            ]
        return super().change_view(request, object_id, form_url, extra_context)
