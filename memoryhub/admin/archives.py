"""Archives in the admin: export an org (or a domain) as an archive, import one, each as
a worker job whose page follows its progress; download an export while it is kept."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.files.storage import default_storage
from django.db.models import QuerySet
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

from tenants.admin import preselect_single_choice
from tenants.models import Domain, Org

from ..exceptions import PolicyDenied, ValidationFailed
from ..models import ArchiveJob
from ..policy import Action
from ..services.archives import jobs
from .base import AuditAdmin, admin_context, operator_view, principal

#: The kinds of line an archive counts, as a sentence names them (one, several).
NOUNS = {
    "org": ("org", "orgs"),
    "domain": ("domain", "domains"),
    "knowledge_base": ("knowledge base", "knowledge bases"),
    "receipt": ("erasure receipt", "erasure receipts"),
    "record": ("record", "records"),
    "version": ("earlier state", "earlier states"),
}


def _counted(counts: dict[str, int]) -> str:
    parts = [
        f"{counts[kind]} {NOUNS[kind][counts[kind] != 1]}"
        for kind in ("record", "version", "knowledge_base", "domain", "receipt", "org")
        if counts.get(kind)
    ]
    return ", ".join(parts) or "—"


class ExportForm(forms.Form):
    org: forms.ModelChoiceField = forms.ModelChoiceField(queryset=Org.objects.none())
    domain: forms.ModelChoiceField = forms.ModelChoiceField(
        queryset=Domain.objects.none(), required=False, help_text=_("Empty: every domain.")
    )
    vectors = forms.BooleanField(
        required=False,
        help_text=_("With each record's vector: an import with the same model embeds nothing."),
    )

    def __init__(self, *args: Any, orgs: QuerySet[Org], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["org"].queryset = orgs  # type: ignore[attr-defined]
        self.fields["domain"].queryset = Domain.objects.filter(org__in=orgs)  # type: ignore[attr-defined]
        preselect_single_choice(self.fields["org"])

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        org, domain = cleaned.get("org"), cleaned.get("domain")
        if org is not None and domain is not None and domain.org_id != org.pk:
            self.add_error("domain", _("This domain belongs to another org."))
        return cleaned


class ImportForm(forms.Form):
    file = forms.FileField(help_text=_("An archive made by an export (.jsonl or .jsonl.gz)."))
    org: forms.ModelChoiceField = forms.ModelChoiceField(
        queryset=Org.objects.none(), help_text=_("The org it goes into.")
    )
    dry_run = forms.BooleanField(
        required=False, help_text=_("Write nothing: say what the import would change.")
    )

    def __init__(self, *args: Any, orgs: QuerySet[Org], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["org"].queryset = orgs  # type: ignore[attr-defined]
        preselect_single_choice(self.fields["org"])


@admin.register(ArchiveJob)
class ArchiveJobAdmin(AuditAdmin):
    """The archive jobs of the orgs a user may export from or import into."""

    view_action = Action.EXPORT
    list_display = ["created_at", "kind", "org", "status", "progress", "actor", "download"]
    list_filter = ["kind", "status"]
    readonly_fields = [
        "kind",
        "org",
        "domain",
        "status",
        "progress",
        "outcome",
        "actor",
        "created_at",
        "finished_at",
        "download",
    ]
    fields = list(readonly_fields)
    change_list_template = "admin/memoryhub/archivejob/change_list.html"
    change_form_template = "admin/memoryhub/archivejob/change_form.html"

    def org_id_of(self, obj: Any) -> int | None:
        return obj.org_id

    def get_urls(self) -> list[URLPattern]:
        wrap = lambda view: self.admin_site.admin_view(operator_view(view))  # noqa: E731
        custom = [
            path("export/", wrap(self.export_view), name="memoryhub_archivejob_export"),
            path("import/", wrap(self.import_view), name="memoryhub_archivejob_import"),
            path(
                "<uuid:pk>/download/",
                wrap(self.download_view),
                name="memoryhub_archivejob_download",
            ),
        ]
        return custom + super().get_urls()

    def _page(
        self, request: HttpRequest, title: str, form: forms.Form, template: str
    ) -> HttpResponse:
        context = admin_context(self, request, title=title, form=form)
        return TemplateResponse(request, f"admin/memoryhub/archivejob/{template}", context)

    def _started(self, request: HttpRequest, job: ArchiveJob) -> HttpResponseRedirect:
        messages.success(request, _("The job is queued; this page follows it."))
        return HttpResponseRedirect(reverse("admin:memoryhub_archivejob_change", args=[job.pk]))

    def export_view(self, request: HttpRequest) -> HttpResponse:
        orgs = self.orgs_for(request, Action.EXPORT)
        if not orgs.exists():
            raise PermissionDenied()
        form = ExportForm(request.POST or None, orgs=orgs)
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                job = jobs.start_export(
                    data["org"],
                    principal=principal(request),
                    domain=data["domain"],
                    vectors=data["vectors"],
                )
            except PolicyDenied:
                raise PermissionDenied() from None
            return self._started(request, job)
        return self._page(request, str(_("Export an org")), form, "export.html")

    def import_view(self, request: HttpRequest) -> HttpResponse:
        orgs = self.orgs_for(request, Action.IMPORT)
        if not orgs.exists():
            raise PermissionDenied()
        form = ImportForm(request.POST or None, request.FILES or None, orgs=orgs)
        if request.method == "POST" and form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                job = jobs.start_import(
                    upload,
                    upload.name,
                    org=form.cleaned_data["org"],
                    principal=principal(request),
                    dry_run=form.cleaned_data["dry_run"],
                )
            except (PolicyDenied, ValidationFailed):
                raise PermissionDenied() from None
            return self._started(request, job)
        return self._page(request, str(_("Import an archive")), form, "import.html")

    def download_view(self, request: HttpRequest, pk: Any) -> FileResponse:
        job = get_object_or_404(self.get_queryset(request), pk=pk, kind=ArchiveJob.Kind.EXPORT)
        if not job.file or job.status != ArchiveJob.Status.DONE:
            raise Http404("This archive is no longer kept.")
        try:
            stream = default_storage.open(job.file, "rb")
        except FileNotFoundError:
            raise Http404("This archive is no longer kept.") from None
        return FileResponse(stream, as_attachment=True, filename=job.filename)

    @admin.display(description=_("progress"))
    def progress(self, obj: ArchiveJob) -> str:
        if obj.kind == ArchiveJob.Kind.EXPORT and obj.total:
            return f"{min(obj.done, obj.total)}/{obj.total}"
        return str(obj.done)

    @admin.display(description=_("outcome"))
    def outcome(self, obj: ArchiveJob) -> str:
        if obj.error:
            return obj.error
        report = obj.report or {}
        if obj.kind == ArchiveJob.Kind.EXPORT:
            return _counted(report.get("counts") or {})
        skipped = ", ".join(f"{n} {why}" for why, n in (report.get("skipped") or {}).items() if n)
        verb = _("would create") if obj.dry_run else _("created")
        created = _counted(report.get("created") or {})
        return f"{verb}: {created}; {_('left out')}: {skipped or '—'}"

    @admin.display(description=_("archive"))
    def download(self, obj: ArchiveJob) -> str:
        if (
            obj.kind != ArchiveJob.Kind.EXPORT
            or not obj.file
            or obj.status != ArchiveJob.Status.DONE
        ):
            return "—"
        url = reverse("admin:memoryhub_archivejob_download", args=[obj.pk])
        return format_html('<a href="{}">{}</a>', url, _("Download"))

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        extra_context = {
            "can_export": self.orgs_for(request, Action.EXPORT).exists(),
            "can_import": self.orgs_for(request, Action.IMPORT).exists(),
        }
        return super().changelist_view(request, extra_context)
