"""OpenAPI (drf-spectacular): the description of memoryhub's authentication and of its
requests (``memoryhub.vocabulary``), and the request and response examples of the
document."""

from typing import Any

from drf_spectacular.extensions import (
    OpenApiAuthenticationExtension,
    OpenApiSerializerExtension,
)
from drf_spectacular.plumbing import (
    ResolvedComponent,
    build_choice_description_list,
    list_hash,
)
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.utils import OpenApiExample, OpenApiParameter

from .. import vocabulary
from ..vocabulary.base import reshape
from ..vocabulary.rules import X_CHOICES


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "memoryhub.api.authentication.ApiKeyAuthentication"
    name = "ApiKeyAuth"

    def get_security_definition(self, auto_schema: object) -> dict[str, str]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Api-Key <key>`: create keys in the admin or with "
            "`manage.py create_api_key`.",
        }


class RequestScheme(OpenApiSerializerExtension):
    """A request of ``memoryhub.vocabulary`` as its component: the JSON Schema its rules
    state, said the OpenAPI 3.0 way; a PATCH's is ``Patched<name>``, nothing required."""

    target_class = "memoryhub.vocabulary.base.Request"
    match_subclasses = True
    priority = 1  # before drf-spectacular's own, for any Pydantic model

    def _partial(self, auto_schema: Any) -> bool:
        return getattr(auto_schema, "method", "").upper() == "PATCH"

    def get_name(self, auto_schema: Any, direction: str) -> str:
        name: str = self.target.schema_name
        return f"Patched{name}" if self._partial(auto_schema) else name

    def map_serializer(self, auto_schema: Any, direction: str) -> dict[str, Any]:
        schema, nested = vocabulary.openapi_schema(self.target, partial=self._partial(auto_schema))
        schema = _choice_sets(schema)
        for name, component in _choice_sets(nested).items():
            auto_schema.registry.register_on_missing(
                ResolvedComponent(
                    name=name, type=ResolvedComponent.SCHEMA, object=name, schema=component
                )
            )
        return schema


def _choice_set(schema: dict[str, Any]) -> dict[str, Any]:
    """An enum's labelled values (``x-choices``) as drf-spectacular names a choice set,
    so that a request's ``kind`` is the ``RecordKindEnum`` a record's is."""
    if X_CHOICES not in schema:
        return schema
    labels = [tuple(pair) for pair in schema.pop(X_CHOICES)]
    schema["x-spec-enum-id"] = list_hash(labels)
    if spectacular_settings.ENUM_GENERATE_CHOICE_DESCRIPTION:
        schema["description"] = build_choice_description_list(labels)
    return schema


def _choice_sets(schema: Any) -> Any:
    return reshape(schema, _choice_set)


def query_parameters(request: type[vocabulary.Request]) -> list[OpenApiParameter]:
    """A request's fields as the query parameters of a GET."""
    schema, _ = vocabulary.openapi_schema(request)
    schema = _choice_sets(schema)
    return [
        OpenApiParameter(
            name,
            type=field,
            location=OpenApiParameter.QUERY,
            required=name in schema.get("required", ()),
            description=field.get("description", ""),
        )
        for name, field in schema["properties"].items()
    ]


#: Examples of the OpenAPI document (the views stay about behaviour).
WRITE_EXAMPLES = [
    OpenApiExample(
        "Remember a preference",
        value={
            "source": "memory",
            "items": [
                {
                    "content": "Alice prefers EUR.",
                    "key": "currency",
                    "namespace": "user:alice",
                    "tags": ["preference"],
                    "metadata": {"channel": "chat"},
                }
            ],
        },
        request_only=True,
    ),
    OpenApiExample(
        "Remember a conversation turn",
        value={
            "items": [
                {
                    "content": "Alice: my order 1042 arrived broken.",
                    "kind": "episodic",
                    "namespace": "user:alice",
                    "occurred_at": "2026-11-28T09:14:00Z",
                    "metadata": {"session": "chat-7f3a", "role": "user"},
                }
            ],
        },
        request_only=True,
    ),
    OpenApiExample(
        "Accepted",
        value={
            "accepted": ["memory"],
            "refused": [],
            "failed": {},
            "records": [
                {
                    "id": "8d0f3c1e-8a55-4f0e-9a55-2f6e43c2f0a1",
                    "key": "currency",
                    "status": "pending",
                    "deduplicated": False,
                    "source": "memory",
                }
            ],
        },
        response_only=True,
        status_codes=["202"],
    ),
]

QUERY_EXAMPLES = [
    OpenApiExample(
        "Ground an answer",
        value={
            "query": "how long do refunds take",
            "k": 3,
            "namespaces": ["", "user:alice"],
            "where": {"team": {"$in": ["support", "billing"]}},
        },
        request_only=True,
    ),
    OpenApiExample(
        "Recall a conversation",
        value={
            "query": "broken order",
            "namespaces": ["user:alice"],
            "occurred_after": "2026-11-01",
            "recency_half_life": 604800,
            "context_turns": 1,
        },
        request_only=True,
    ),
    OpenApiExample(
        "Results",
        value={
            "items": [
                {
                    "id": "8d0f3c1e-8a55-4f0e-9a55-2f6e43c2f0a1",
                    "content": "Refunds are issued within 5 business days.",
                    "source": "handbook",
                    "score": 0.94,
                    "metadata": {"team": "support"},
                    "key": "refunds",
                    "kind": "semantic",
                    "namespace": "",
                    "tags": [],
                    "created_at": "2026-11-29T12:00:00Z",
                    "occurred_at": "2026-11-29T12:00:00Z",
                }
            ],
            "grounding": "Relevant context:\n[handbook] Refunds are issued within 5 business days.",
            "reranked": False,
        },
        response_only=True,
    ),
]

FORGET_EXAMPLES = [
    OpenApiExample("Erase a data subject", value={"namespace": "user:alice"}, request_only=True),
    OpenApiExample(
        "Erased",
        value={"deleted": 3, "by_source": {"memory": 2, "notes": 1}},
        response_only=True,
    ),
]
