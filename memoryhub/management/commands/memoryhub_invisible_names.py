"""``manage.py memoryhub_invisible_names``: the namespaces, keys, tags and knowledge base
names stored before every door refused control and invisible format characters (a
newline, ESC, a zero-width space, a bidi control), one line each with its org, domain
and record count, the value escaped. Exit status 1 when there are any.

Such a name looks like another (``user:alice`` and ``user:alice`` with a zero-width
space are two namespaces; forgetting one leaves the other), so each is worth a look: a
subject's records under a look-alike namespace are erased by forgetting that namespace
as listed here (its escapes decoded), or by key.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memoryhub.services.records import invisible_names


class Command(BaseCommand):
    help = "List stored names holding control or invisible format characters."

    def handle(self, *args: Any, **options: Any) -> None:
        found = 0
        for name in invisible_names():
            found += 1
            value = name.value.encode("unicode_escape").decode("ascii")
            self.stdout.write(
                f"{name.org}/{name.domain} {name.field} {value!r}: {name.records} record(s)"
            )
        if found:
            self.stderr.write(f"{found} name(s) hold control or invisible format characters")
            raise SystemExit(1)
        self.stdout.write("no stored name holds a control or invisible format character")
