"""The API keys clients authenticate with: each a name and a secret.

``services.conductor.api_keys`` maps names to secrets; the single ``services.conductor.api_key``
is the key named ``default``. Past the guard a request's key is known by its name only (the
class rules match it, its record carries it); the secret stays in the config and the guard, and
no message here ever quotes one.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from pydantic import SecretStr

from syshaxd.config.classes import ServiceLevels

#: The name ``services.conductor.api_key`` goes by.
DEFAULT_KEY = "default"
#: A key's name, as a class's: it shows in records, rules and logs.
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_KEYS = "services.conductor.api_keys"


def secret_text(value: Any, where: str) -> Any:
    """``value`` unchanged when it can be a secret (text, a SecretStr, null); else the reason,
    which never quotes the value (a mistyped secret is still a secret).

    Raises:
        ValueError: for a number, a list, a mapping... or empty text.
    """
    if value is None or isinstance(value, SecretStr):
        plain = value.get_secret_value() if isinstance(value, SecretStr) else None
    elif isinstance(value, str):
        plain = value
    else:
        raise ValueError(f"{where} must be text (quote it in YAML), not {_kind(value)}")
    if plain is not None and not plain.strip():
        raise ValueError(f"{where} is empty: give a secret, or leave the key out for none")
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return "a mapping" if isinstance(value, Mapping) else "a list" if isinstance(value, list) else "that"


def keys_shape(value: Any) -> Any:
    """``services.conductor.api_keys`` checked before pydantic sees it: a mapping of valid names
    to secrets (so a type error cannot echo a secret back).

    Raises:
        ValueError: naming the key, never its secret.
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"{_KEYS} must be a mapping of key names to secrets, e.g. {{nightly-evals: <secret>}}")
    for name, secret in value.items():
        if not isinstance(name, str) or not _NAME.match(name):
            shown = name if isinstance(name, str) else str(name)
            raise ValueError(f"{_KEYS}: key name {shown[:64]!r}: letters, digits, '-', '_' and '.' only, "
                             "at most 64")
        secret_text(secret, f"{_KEYS}.{name}")
        if secret is None:
            raise ValueError(f"{_KEYS}.{name} has no secret: give one, or remove the key")
    return value


def named_keys(single: SecretStr | None, named: Mapping[str, SecretStr]) -> dict[str, SecretStr]:
    """Every key by name: ``single`` (``api_key``) is ``default``.

    Raises:
        ValueError: ``api_key`` beside a key named ``default``, or two names with one secret.
    """
    keys = dict(named)
    if single is not None:
        if DEFAULT_KEY in keys:
            raise ValueError(f"services.conductor.api_key is the key named {DEFAULT_KEY!r}: set it or "
                             f"{_KEYS}.{DEFAULT_KEY}, not both")
        keys = {DEFAULT_KEY: single, **keys}
    owner: dict[str, str] = {}
    for name, secret in keys.items():
        first = owner.setdefault(secret.get_secret_value(), name)
        if first != name:
            raise ValueError(f"API keys {_shown(first)} and {_shown(name)} have the same secret: each name "
                             "needs its own, or the name a request came with would be a guess")
    return keys


def _shown(name: str) -> str:
    return f"{_KEYS}.{name}" if name != DEFAULT_KEY else "services.conductor.api_key (named 'default')"


def unknown_key_rule(levels: ServiceLevels, names: Collection[str]) -> str | None:
    """Why a class rule can never match (it names an API key that is not configured), or None."""
    for i, rule in enumerate(levels.rules):
        if rule.api_key is not None and rule.api_key not in names:
            known = ", ".join(sorted(names)) if names else f"none (set {_KEYS})"
            return (f"service.rules[{i}] names API key {rule.api_key!r}, which is not configured; "
                    f"the keys are: {known}")
    return None
