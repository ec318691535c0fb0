"""Describing config keys to people: type names, allowed values, suggestions, text conversion.

Works on any pydantic model and its field annotations; the config model itself lives in
:mod:`syshaxd.config.model`.
"""

from __future__ import annotations

import difflib
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from syshaxd.config.files import parse_value

_NULL_WORDS = ("null", "none", "~", "")
_TRUE_WORDS = ("true", "yes", "on", "1")
_FALSE_WORDS = ("false", "no", "off", "0")


@dataclass(frozen=True)
class KeyInfo:
    """One leaf key of the configuration."""

    key: str
    type_name: str
    default: Any
    description: str
    annotation: Any
    #: What values are accepted, for people: "an integer from 1 to 65535".
    allowed: str = ""


def is_model(tp: Any) -> bool:
    """Whether ``tp`` is a pydantic model class (a config section)."""
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (tp, False)."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _fields(model: Any) -> str:
    return ", ".join(f.alias or name for name, f in model.model_fields.items())


def _label(model: Any) -> str:
    """A section model's name in a type: ``EngineEndpoint`` -> ``endpoint``, ``ClassRule`` -> ``rule``."""
    name: str = model.__name__
    for word in ("Engine", "Class", "Service"):
        name = name.removeprefix(word) or name
    return name.lower()


def type_name(tp: Any) -> str:
    """A short readable name of a field type: ``int``, ``int | null``, ``'a' | 'b'``."""
    inner, nullable = _optional(tp)
    if nullable:
        return f"{type_name(inner)} | null"
    origin = get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in get_args(tp))
    if origin is list:
        (item,) = get_args(tp) or (Any,)
        return f"list[{_label(item) if is_model(item) else type_name(item)}]"
    if origin is dict:
        _, item = get_args(tp) or (Any, Any)
        return f"map of {_label(item) if is_model(item) else type_name(item)}"
    if tp is type(None):
        return "null"
    if tp is SecretStr:
        return "secret"
    return getattr(tp, "__name__", str(tp))


def _bounds(info: FieldInfo | None) -> str:
    if info is None:
        return ""
    limits: dict[str, Any] = {}
    for meta in info.metadata:  # annotated_types.Ge(ge=1), Le(le=5), ...
        for name in ("ge", "gt", "le", "lt"):
            if getattr(meta, name, None) is not None:
                limits[name] = getattr(meta, name)
    if "ge" in limits and "le" in limits:
        return f" from {limits['ge']} to {limits['le']}"
    words = {"ge": "at least", "gt": "above", "le": "at most", "lt": "below"}
    return "".join(f"{',' if i else ''} {words[k]} {v}" for i, (k, v) in enumerate(limits.items()))


def allowed_text(tp: Any, info: FieldInfo | None = None) -> str:
    """What a field accepts, for an error message or ``syshax config --help``."""
    inner, nullable = _optional(tp)
    if nullable:
        return f"{allowed_text(inner, info)}, or null"
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in get_args(tp))
    if origin is list:
        (item,) = get_args(tp) or (Any,)
        if is_model(item):
            return f"a list of mappings {{{_fields(item)}}}, e.g. [{getattr(item, 'EXAMPLE', '{...}')}]"
        return "a list"
    if origin is dict:
        _, item = get_args(tp) or (Any, Any)
        if is_model(item):
            return (f"a mapping of names to {{{_fields(item)}}}, e.g. "
                    f"{{{getattr(item, 'EXAMPLE', 'name: {...}')}}}")
        return "a mapping" if item is Any else f"a mapping of names to {allowed_text(item)}"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer" + _bounds(info)
    if tp is float:
        return "a number" + _bounds(info)
    if tp is SecretStr:
        return "text (kept secret)"
    if tp is Path:
        return "a file path"
    if tp is str:
        return "text"
    return type_name(tp)


def from_text(tp: Any, raw: str) -> Any:
    """Convert command-line or environment text to a field's type.

    Text that does not convert comes back unchanged so validation can say what is allowed.
    Text fields keep the text exactly (``007`` stays ``"007"``).
    """
    inner, nullable = _optional(tp)
    if nullable:
        return None if raw.strip().lower() in _NULL_WORDS else from_text(inner, raw)
    word = raw.strip().lower()
    if tp is bool:
        return True if word in _TRUE_WORDS else False if word in _FALSE_WORDS else raw
    if tp is int:
        try:
            return int(word)
        except ValueError:
            return raw
    if tp is float:
        try:
            return float(word)
        except ValueError:
            return raw
    if get_origin(tp) in (list, dict):
        return parse_value(raw)
    return raw


def fields_at(root: type[BaseModel], loc: tuple[str | int, ...]) -> dict[str, FieldInfo]:
    """The fields of the section at a nested location of ``root`` (empty if it is no section).

    List indices in ``loc`` are skipped: ``services.gpu.endpoints.0`` is an endpoint.
    """
    model: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        field_info = model.model_fields.get(part) if is_model(model) else None
        if field_info is None:
            return {}
        tp, _ = _optional(field_info.annotation)
        if get_origin(tp) is list:
            tp = get_args(tp)[0]
        model = tp
    return dict(model.model_fields) if is_model(model) else {}


def section_fields(root: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """Field names allowed at a nested location of ``root`` (for "did you mean")."""
    return list(fields_at(root, loc))


def suggest(word: str, choices: list[str]) -> str | None:
    """The closest choice to ``word``, if any is close."""
    found = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return found[0] if found else None
