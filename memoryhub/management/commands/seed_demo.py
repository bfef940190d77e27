"""``manage.py seed_demo``: a demo org to try memoryhub with. Safe to re-run.

Creates org ``demo``, domain ``support``, a writable knowledge base ``memory``, a
read-only knowledge base ``handbook`` with a few records, a superuser ``admin`` and an
API key. Secrets are printed only when they are created.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from memoryhub import policy
from memoryhub.models import KnowledgeBase
from memoryhub.scope import Scope
from memoryhub.services import knowledge_bases, write
from tenants.models import ApiKey, Domain, Membership, Org

HANDBOOK = [
    ("refunds", "Refunds are issued to the original payment method within 5 business days."),
    ("approvals", "Orders over $500 need a manager's approval before they ship."),
    ("credit", "Store credit never expires."),
    ("region", "eu-west-1 is the GDPR-resident region."),
]

DEMO_KEY_NAME = "demo key"


class Command(BaseCommand):
    help = "Create (once) a demo org, domain, knowledge bases, superuser and API key."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin")
        parser.add_argument(
            "--base-url",
            default="http://127.0.0.1:8000",
            help="where the site is served, for the printed links (make run passes its own)",
        )

    def handle(self, *args: Any, username: str, base_url: str, **options: Any) -> None:
        base_url = base_url.rstrip("/")
        with transaction.atomic():
            org, _ = Org.objects.get_or_create(slug="demo", defaults={"name": "Demo Inc."})
            domain, _ = Domain.objects.get_or_create(
                org=org, slug="support", defaults={"name": "Customer support"}
            )
            scope = Scope.for_domain(domain)
            knowledge_bases.ensure_knowledge_base(scope, KnowledgeBase.DEFAULT_NAME)
            handbook = knowledge_bases.ensure_knowledge_base(
                scope,
                "handbook",
                read_only=True,
                description="Curated support handbook (read-only for agents).",
            )
            write.write(
                scope,
                [
                    {"key": key, "content": content, "tags": ["handbook"]}
                    for key, content in HANDBOOK
                ],
                sources=[handbook.name],
                principal=policy.SystemPrincipal(label="seed_demo"),
            )
            password = self._ensure_superuser(username, org)
            key = self._ensure_api_key(org)

        self.stdout.write(self.style.SUCCESS("Demo ready: org 'demo', domain 'support'."))
        if password is not None:
            self.stdout.write(f"  Admin:   {base_url}/admin/  {username} / {password}")
        else:
            self.stdout.write(
                f"  Admin:   user {username!r} exists; password unchanged "
                f"(reset: python manage.py changepassword {username})"
            )
        if key is not None:
            self.stdout.write(f"  API key (read, write, forget; shown once): {key}")
        else:
            self.stdout.write(
                "  API key: the demo key exists; make another with "
                "python manage.py create_api_key demo --name me --read --write --forget"
            )
        self.stdout.write(f"  API docs: {base_url}/api/docs/")

    def _ensure_superuser(self, username: str, org: Org) -> str | None:
        user_model = get_user_model()
        user = user_model.objects.filter(username=username).first()
        password = None
        if user is None:
            password = secrets.token_urlsafe(12)
            user = user_model.objects.create_superuser(
                username=username, email=f"{username}@example.com", password=password
            )
        Membership.objects.get_or_create(
            user=user, org=org, defaults={"role": Membership.Role.OWNER}
        )
        return password

    def _ensure_api_key(self, org: Org) -> str | None:
        if ApiKey.objects.filter(org=org, name=DEMO_KEY_NAME, revoked=False).exists():
            return None
        _, key = ApiKey.objects.create_key(
            name=DEMO_KEY_NAME, org=org, can_read=True, can_write=True, can_forget=True
        )
        return key
