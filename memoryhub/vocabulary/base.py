"""A request: a Pydantic model whose fields are :class:`~.rules.Rule` s, frozen once
valid, refused as :class:`ValidationFailed` with a message per path (``items[2].tags``),
and stated as JSON Schema for the MCP tools and the OpenAPI document."""

from __future__ import annotations

import typing
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.json_schema import GenerateJsonSchema

from ..exceptions import ValidationFailed
from .bounds import fixed
from .rules import REFUSED, X_CHOICES

__all__ = ["Request", "field_names", "json_schema", "openapi_schema", "reshape"]

if TYPE_CHECKING:
    from pydantic._internal._model_construction import ModelMetaclass
else:
    ModelMetaclass = type(BaseModel)  # not exported by Pydantic: the class it is

#: What an error of Pydantic's own (not of a rule) says, by its type.
MESSAGES = {
    "missing": "This field is required.",
    "model_type": "must be an object.",
    "model_attributes_type": "must be an object.",
    "dict_type": "must be an object.",
    "list_type": "must be a list.",
    "tuple_type": "must be a list.",
}


class _Checked(ModelMetaclass):
    """Constructing a request from Python (``ForgetRequest(namespace=...)``) is refused
    as a door's request is (Pydantic's own validation of nested requests never calls
    the class, so it is not refused twice)."""

    def __setattr__(cls, name: str, value: Any) -> None:
        # drf-spectacular marks a PATCH's request ``partial`` on what it is given, here
        # the class itself, for every later document of the process: the OpenAPI
        # extension (``memoryhub.api.schema``) names a PATCH's request instead.
        if name != "partial":
            super().__setattr__(name, value)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            with fixed():
                return super().__call__(*args, **kwargs)
        except ValidationError as exc:
            request: type[Request] = cls  # type: ignore[assignment]
            raise request.refusal(errors_of(exc, request)) from None


class Request(BaseModel, metaclass=_Checked):
    """A request as a door receives it, checked as a whole: every field's rule, each
    refusal collected, then, when the fields are valid, the rules across them
    (``model_validator``); one :attr:`refusal` says them all. Constructing one from
    Python is checked the same way."""

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    #: What a field this request does not have is told.
    unknown: ClassVar[str] = "is not a field of this request."
    #: What a refusal raises.
    refusal: ClassVar[type[ValidationFailed]] = ValidationFailed
    #: Its name in the OpenAPI document's components (default: the class's name).
    schema_name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("schema_name"):
            cls.schema_name = cls.__name__

    @classmethod
    def parse(cls, raw: Any) -> Self:
        """``raw`` (a REST body, an MCP tool's arguments) as this request."""
        try:
            with fixed():
                return cls.model_validate(raw)
        except ValidationError as exc:
            raise cls.refusal(errors_of(exc, cls)) from None


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _join(path: str, below: str) -> str:
    if not path:
        return below.removeprefix(".") or "non_field_errors"
    return path + below


def errors_of(exc: ValidationError, request: type[BaseModel] | None = None) -> dict[str, list[str]]:
    """A Pydantic refusal as the error contract's messages by path."""
    errors: dict[str, list[str]] = {}
    for error in exc.errors(include_url=False):
        path = _path(error["loc"])
        if error["type"] == REFUSED:
            for below, messages in error["ctx"]["at"].items():
                errors.setdefault(_join(path, below), []).extend(messages)
        elif error["type"] == "extra_forbidden":
            owner = _owner(request, error["loc"][:-1])
            message = owner.unknown if owner is not None else "is not a field."
            errors.setdefault(path, []).append(message)
        else:
            errors.setdefault(_join(path, ""), []).append(MESSAGES.get(error["type"], error["msg"]))
    return errors


def _owner(request: type[BaseModel] | None, loc: tuple[int | str, ...]) -> Any:
    """The request whose field ``loc`` names (a write's item, say)."""
    model: Any = request
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        model = _model_in(field.annotation) if field is not None else None
    return model


def _model_in(annotation: Any) -> type[Request] | None:
    if isinstance(annotation, type) and issubclass(annotation, Request):
        return annotation
    for argument in typing.get_args(annotation):
        found = _model_in(argument)
        if found is not None:
            return found
    return None


class _Schema(GenerateJsonSchema):
    """JSON Schema as the rules state it: no titles, no null defaults (absent is null),
    a request described by its docstring's first paragraph."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: Any) -> dict[str, Any]:
        stated = super().default_schema(schema)
        if stated.get("default", ...) is None:
            del stated["default"]
        return stated

    def model_schema(self, schema: Any) -> dict[str, Any]:
        stated = super().model_schema(schema)
        stated.pop("title", None)
        if "description" in stated:
            stated["description"] = stated["description"].split("\n\n")[0]
        return stated


def json_schema(request: type[Request], *, without: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``request`` as a JSON Schema (2020-12) object, nested requests inline: its fields
    but ``without``, the bounds the settings give now, none other allowed."""
    stated = request.model_json_schema(schema_generator=_Schema, mode="validation")
    stated = reshape(stated, _inlined(stated.pop("$defs", {})))
    stated = reshape(stated, _without_choices)
    properties = {
        name: schema for name, schema in stated["properties"].items() if name not in without
    }
    shaped: dict[str, Any] = {"type": "object", "properties": properties}
    required = [name for name in stated.get("required", ()) if name not in without]
    if required:
        shaped["required"] = required
    shaped["additionalProperties"] = False
    return shaped


def reshape(schema: Any, node: Callable[[dict[str, Any]], Any]) -> Any:
    """``schema`` rebuilt from the leaves up, each object (its members reshaped first)
    replaced by what ``node`` makes of it."""
    if isinstance(schema, list):
        return [reshape(value, node) for value in schema]
    if isinstance(schema, dict):
        return node({key: reshape(value, node) for key, value in schema.items()})
    return schema


def _without_choices(schema: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in schema.items() if key != X_CHOICES}


def _inlined(definitions: dict[str, Any]) -> Callable[[dict[str, Any]], Any]:
    def node(schema: dict[str, Any]) -> Any:
        if "$ref" not in schema:
            return schema
        inner = dict(definitions[schema["$ref"].rsplit("/", 1)[-1]])
        inner.pop("description", None)
        return reshape(inner, node)

    return node


def openapi_schema(
    request: type[Request], *, partial: bool = False
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``request`` as an OpenAPI 3.0 schema object (null said the 3.0 way, ``nullable``;
    ``partial``: no field required), and the components of the requests it nests, by
    their :attr:`Request.schema_name` (``$ref`` ``#/components/schemas/<name>``)."""
    names = {model.__name__: model.schema_name for model in _requests(Request)}
    stated = request.model_json_schema(
        schema_generator=_Schema,
        mode="validation",
        ref_template="#/components/schemas/{model}",
    )
    stated = reshape(stated, _said_by_openapi(names))
    components = {names.get(name, name): schema for name, schema in stated.pop("$defs", {}).items()}
    if partial:
        stated.pop("required", None)
    return stated, components


def _requests(model: type[Request]) -> list[type[Request]]:
    found = [model]
    for subclass in model.__subclasses__():
        found += _requests(subclass)
    return found


def _said_by_openapi(names: dict[str, str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A null type said the OpenAPI 3.0 way (``nullable``), a nested request by its
    component's name."""

    def node(schema: dict[str, Any]) -> dict[str, Any]:
        kind = schema.get("type")
        if isinstance(kind, list) and "null" in kind:
            [schema["type"]] = [each for each in kind if each != "null"]
            schema["nullable"] = True
        reference = schema.get("$ref")
        if isinstance(reference, str):
            base, _, name = reference.rpartition("/")
            schema["$ref"] = f"{base}/{names.get(name, name)}"
        return schema

    return node


@cache
def field_names(request: type[BaseModel]) -> frozenset[str]:
    """The fields ``request`` names."""
    return frozenset(request.model_fields)
