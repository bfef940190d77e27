"""``manage.py create_domain ORG DOMAIN [--name NAME]``."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_slug

from tenants.models import Domain, Org


class Command(BaseCommand):
    help = "Create a domain inside an org. Fails if the org is unknown or the slug is taken."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("org", help="slug of the org")
        parser.add_argument("domain", help="slug of the new domain")
        parser.add_argument("--name", default="")

    def handle(self, *args: Any, org: str, domain: str, name: str, **options: Any) -> None:
        try:
            validate_slug(domain)
        except ValidationError as exc:
            raise CommandError(f"Invalid domain slug {domain!r}: {exc.messages[0]}") from None
        try:
            owner = Org.objects.get(slug=org)
        except Org.DoesNotExist:
            raise CommandError(f"Unknown org {org!r}.") from None
        if Domain.objects.filter(org=owner, slug=domain).exists():
            raise CommandError(f"Domain {org}/{domain} already exists.")
        created = Domain.objects.create(org=owner, slug=domain, name=name or domain)
        self.stdout.write(f"Created domain {org}/{created.slug} (id {created.pk}).")
