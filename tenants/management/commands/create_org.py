"""``manage.py create_org SLUG [--name NAME] [--external-ref REF]``."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import validate_slug

from tenants.models import Org


class Command(BaseCommand):
    help = "Create an org (a tenant). Fails if the slug is taken."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", default="")
        parser.add_argument("--external-ref", default="")

    def handle(self, *args: Any, slug: str, name: str, external_ref: str, **options: Any) -> None:
        try:
            validate_slug(slug)
        except ValidationError as exc:
            raise CommandError(f"Invalid org slug {slug!r}: {exc.messages[0]}") from None
        if Org.objects.filter(slug=slug).exists():
            raise CommandError(f"Org {slug!r} already exists.")
        org = Org.objects.create(slug=slug, name=name or slug, external_ref=external_ref)
        self.stdout.write(f"Created org {org.slug} (id {org.pk}).")
