"""``manage.py create_api_key ORG [--domain D] --name N [--read] [--write] [--forget] [--export]``.

The plaintext key is the last line of output, printed once; only its hash is stored.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from tenants.models import ApiKey, Domain, Org


class Command(BaseCommand):
    help = (
        "Create an API key for an org (optionally bound to one domain). With no permission "
        "flag the key can read only. The key is printed once, as the last line."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("org", help="slug of the org")
        parser.add_argument("--domain", default=None, help="bind the key to this domain")
        parser.add_argument("--name", required=True, help="what the key is for")
        parser.add_argument("--read", action="store_true")
        parser.add_argument("--write", action="store_true")
        parser.add_argument("--forget", action="store_true")
        parser.add_argument(
            "--export",
            action="store_true",
            help="a data subject's access export (POST .../export)",
        )
        parser.add_argument(
            "--expires-in-days", type=int, default=None, help="expire the key after N days"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            org = Org.objects.get(slug=options["org"])
        except Org.DoesNotExist:
            raise CommandError(f"Unknown org {options['org']!r}.") from None
        domain = None
        if options["domain"] is not None:
            try:
                domain = Domain.objects.get(org=org, slug=options["domain"])
            except Domain.DoesNotExist:
                raise CommandError(
                    f"Unknown domain {options['domain']!r} in org {org.slug!r}."
                ) from None
        flags = ("read", "write", "forget", "export")
        granted = [flag for flag in flags if options[flag]] or ["read"]
        expiry = None
        if options["expires_in_days"] is not None:
            if options["expires_in_days"] < 1:
                raise CommandError("--expires-in-days must be at least 1.")
            expiry = timezone.now() + timedelta(days=options["expires_in_days"])
        api_key, key = ApiKey.objects.create_key(
            name=options["name"],
            org=org,
            domain=domain,
            can_read="read" in granted,
            can_write="write" in granted,
            can_forget="forget" in granted,
            can_export="export" in granted,
            expiry_date=expiry,
        )
        bound = f"{org.slug}/{domain.slug}" if domain is not None else f"{org.slug} (all domains)"
        self.stdout.write(
            f"Created API key {api_key.prefix} for {bound} with {', '.join(granted)}. "
            "Store it now; it is not shown again:"
        )
        self.stdout.write(key)
