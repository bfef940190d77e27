"""A forget: what to erase."""

from typing import Annotated, Any, ClassVar, Self

from pydantic import model_validator

from . import rules
from .base import Request
from .rules import Refused, Rule

__all__ = [
    "MAX_SOURCE_NAME_LENGTH",
    "ForgetBody",
]

#: The longest knowledge base name a forget may name.
MAX_SOURCE_NAME_LENGTH = 64


# --- a forget --------------------------------------------------------------------------


def _selector(*, empty: bool, help: str = "") -> Rule:
    def check(value: Any) -> str:
        if not isinstance(value, str) or "\x00" in value:
            raise Refused("must be a string without NUL characters.")
        if not empty and not value:
            raise Refused("may not be empty.")
        return value

    return Rule(
        check,
        lambda: {"type": "string"} if empty else {"type": "string", "minLength": 1},
        help,
        nullable=True,
        states_null=False,
    )


def _source_names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise Refused("must be a list of knowledge base names.")
    if not value:
        raise Refused("name at least one knowledge base.")
    for name in value:
        if (
            not isinstance(name, str)
            or not name
            or "\x00" in name
            or len(name) > MAX_SOURCE_NAME_LENGTH
        ):
            raise Refused("must be knowledge base names.")
    return tuple(dict.fromkeys(value))


class ForgetBody(Request):
    """A forget: a data subject's namespace, a key, knowledge bases, or the whole
    domain."""

    schema_name: ClassVar[str] = "ForgetRequest"

    unknown: ClassVar[str] = "is not a field of a forget."

    namespace: Annotated[
        str | None,
        _selector(
            empty=True,
            help='A data subject ("user:alice"): erases their memory in every knowledge '
            "base of this domain, read-only ones included (another domain's is erased by a "
            'request there). The shared namespace "" needs sources.',
        ),
    ] = None
    key: Annotated[str | None, _selector(empty=False)] = None
    source: Annotated[str | None, _selector(empty=False, help="One knowledge base.")] = None
    sources: Annotated[
        tuple[str, ...] | None,
        Rule(
            _source_names,
            lambda: {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": MAX_SOURCE_NAME_LENGTH},
            },
            "Several knowledge bases (instead of source).",
            nullable=True,
            states_null=False,
        ),
    ] = None
    all: Annotated[bool, rules.flag(help="Erase the whole domain.")] = False

    @model_validator(mode="after")
    def _something_named(self) -> Self:
        if {"source", "sources"} <= self.model_fields_set:
            raise Refused({".sources": ["give source or sources, not both."]}).pydantic()
        if self.source is not None:
            self.__dict__["sources"] = (self.source,)
        selectors = (self.namespace, self.key, self.sources, getattr(self, "import_job", None))
        if not self.all and all(selector is None for selector in selectors):
            raise Refused("Name a namespace, key or source, or set all=true.").pydantic()
        if self.namespace == "" and self.key is None and self.sources is None:
            raise Refused(
                {
                    ".sources": [
                        'forgetting the shared namespace ("") erases the common memory of'
                        " every knowledge base of the domain: name them in sources."
                    ]
                }
            ).pydantic()
        return self
