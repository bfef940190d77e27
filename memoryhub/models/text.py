"""How a record's text is searched and compared: the full-text configuration and the
generated search vector (compound words kept whole), the normalised content and its
hash."""

from __future__ import annotations

import hashlib
import unicodedata

from django.contrib.postgres.search import SearchVector
from django.db import models
from django.db.models import Case, F, Func, Value, When
from django.db.models.expressions import CombinedExpression

#: The full-text search configuration of the generated ``search_vector`` column.
SEARCH_CONFIG = "english"


#: The characters that join words into one token of PostgreSQL's parser.
JOINERS = "./:@"


#: A tag ("<unk>", "</s>"): PostgreSQL's parser drops it.
TAG = r"</?\w+>"


#: Words joined by dots, slashes, colons or at signs ("enum.IntEnum", "pytest.main",
#: "a/b/c", "https://docs.python.org/3/library", "bob@example.com"): PostgreSQL's parser
#: reads each as one token (a host name, a file path, a URL, an e-mail address) whose
#: only lexeme is the whole of it, or drops it (a URL's "https://"), so a question
#: asking for "IntEnum" would never match it; and tags.
COMPOUND = rf"\w+(?:[{JOINERS}]+\w+)+|{TAG}"


#: Content holding a compound (:data:`COMPOUND`), as a cheaper test.
HOLDS_COMPOUND = rf"\w[{JOINERS}]+\w|{TAG}"


#: What the second part of the search vector turns into spaces in its compounds.
_SPLIT_AT = JOINERS + "<>"


def search_vector() -> CombinedExpression:
    """The generated ``search_vector``: the content's lexemes, then the words of its
    compounds (:data:`COMPOUND`) as lexemes of their own.

    The second part is the content with everything but its compounds replaced by
    spaces, then their dots, slashes, colons, at signs and angle brackets (PostgreSQL's
    regular expressions take the longest alternative: a compound rather than a word,
    and the run of other characters stops before a tag's ``<``); the regular
    expressions run only on content holding one. Splitting every token instead
    (``translate`` of the whole content) costs as much and counts every word twice."""
    compounds = Func(
        F("content"),
        Value(f"({COMPOUND})|\\w+|[^\\w<]+|<"),
        Value(r"\1 "),
        Value("g"),
        function="regexp_replace",
        output_field=models.TextField(),
    )
    parts = Case(
        When(
            content__regex=HOLDS_COMPOUND,
            then=Func(
                compounds,
                Value(_SPLIT_AT),
                Value(" " * len(_SPLIT_AT)),
                function="translate",
            ),
        ),
        default=Value(""),
        output_field=models.TextField(),
    )
    return SearchVector("content", config=SEARCH_CONFIG) + SearchVector(parts, config=SEARCH_CONFIG)


def normalize_content(content: str) -> str:
    """Content as compared for dedupe: NFKC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", content).casefold().split())


def content_hash(content: str) -> str:
    """SHA-256 of the normalised content."""
    return hashlib.sha256(normalize_content(content).encode("utf-8")).hexdigest()
