"""How to install what an optional feature needs, said the same way by every message."""

from __future__ import annotations

#: The distribution's name on a package index (``memoryhub`` there is another project).
DISTRIBUTION = "django-memoryhub"


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: from the index, or in a checkout."""
    return f"pip install '{DISTRIBUTION}[{extra}]' (in a checkout: pip install -e '.[{extra}]')"
