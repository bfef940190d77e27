"""OpenAPI (drf-spectacular): the description of memoryhub's authentication, and the
request and response examples of the document."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiExample


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
