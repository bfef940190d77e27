"""MCP resources: the knowledge bases a key can read, and records by id.

``memoryhub://<domain>/<knowledge base>`` is a knowledge base (its summary: description,
read-only flag, record count); ``memoryhub://<domain>/<knowledge base>/<record id>`` is a
record, as ``memory_get`` returns it. Reading needs the read permission in the domain,
which ``resolve_domain`` checks as for every REST read.
"""

from __future__ import annotations

import json
from urllib.parse import quote, unquote, urlsplit

from mcp_types import Resource, ResourceTemplate, TextResourceContents
from rest_framework.request import Request

from tenants.models import Domain

from .. import boundary, policy
from ..api import serializers as s
from ..api.permissions import resolve_domain
from ..exceptions import RecordNotFound, UnknownSource, ValidationFailed
from ..services import records as records_service
from .tools import calling_key, jsonable

__all__ = ["SCHEME", "list_resources", "read", "templates"]

SCHEME = "memoryhub"
JSON = "application/json"


def _uri(*parts: str) -> str:
    return f"{SCHEME}://" + "/".join(quote(part, safe="") for part in parts)


def _domains(request: Request) -> list[str]:
    """The slugs of the domains the key covers (its own, or its org's)."""
    api_key = calling_key(request)
    if api_key.domain is not None:
        return [api_key.domain.slug]
    return list(
        Domain.objects.filter(org_id=api_key.org_id).order_by("slug").values_list("slug", flat=True)
    )


def list_resources(request: Request) -> list[Resource]:
    """The knowledge bases of every domain the key may read."""
    resources = []
    for slug in _domains(request):
        scope = resolve_domain(request, slug, policy.Action.READ)
        for source in records_service.summarize_sources(scope):
            resources.append(
                Resource(
                    uri=_uri(slug, source["name"]),
                    name=f"{slug}/{source['name']}",
                    description=source["description"]
                    or ("Read-only knowledge base." if source["read_only"] else None),
                    mime_type=JSON,
                )
            )
    return resources


def templates() -> list[ResourceTemplate]:
    return [
        ResourceTemplate(
            uri_template=f"{SCHEME}://{{domain}}/{{source}}/{{record_id}}",
            name="record",
            description="A record of a knowledge base, by id.",
            mime_type=JSON,
        )
    ]


def read(request: Request, uri: str) -> list[TextResourceContents]:
    """The resource at ``uri``: a knowledge base's summary, or a record."""
    parts = urlsplit(uri)
    path = [unquote(part) for part in parts.path.split("/") if part]
    if parts.scheme != SCHEME or not parts.netloc or len(path) not in (1, 2):
        raise ValidationFailed(
            {"uri": [f"must be {SCHEME}://<domain>/<knowledge base>[/<record id>]."]}
        )
    domain = unquote(parts.netloc)
    errors: boundary.Errors = {}
    for part in (domain, *path):
        boundary.check_name(part, "uri", errors)
    boundary.raise_if(errors)
    scope = resolve_domain(request, boundary.check_slug(domain, "uri"), policy.Action.READ)
    if len(path) == 1:
        found = [row for row in records_service.summarize_sources(scope) if row["name"] == path[0]]
        if not found:
            raise UnknownSource(path[0])
        body = found[0]
    else:
        record = records_service.get_record(scope, path[1])
        if record.knowledge_base.name != path[0]:
            raise RecordNotFound(uri)
        body = s.RecordSerializer(record).data
    return [TextResourceContents(uri=uri, mime_type=JSON, text=json.dumps(jsonable(body)))]
