"""Operator key rebinding: a YAML file mapping binding ids to keys.

Example ``~/.config/syshax/console-keys.yaml``::

    batch_up: "plus,equals_sign"   # several keys, comma-separated
    drain: "ctrl+d"
    cycle_policy: "o"

Binding ids are listed in the help screen (``?``). Keys use Textual's names
(``plus``, ``minus``, ``space``, ``slash``, ``question_mark``, ``ctrl+x``, ``F5``...).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection, Mapping
from pathlib import Path

import yaml


class KeymapError(Exception):
    """A keymap file the console cannot use; the message names the file and the entry."""


def default_keymap_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/syshax/console-keys.yaml`` (``~/.config`` when unset)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "syshax" / "console-keys.yaml"


def load_keymap(path: Path, binding_ids: Collection[str], *, required: bool) -> dict[str, str]:
    """Read a keymap file into {binding id: keys}.

    Args:
        path: the file.
        binding_ids: the ids the console has (anything else is a mistake).
        required: whether a missing file is an error (given with ``--keymap``) or just none.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise KeymapError(f"{path}: keymap file not found") from None
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise KeymapError(f"{path}: cannot read keymap file: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KeymapError(f"{path}: invalid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise KeymapError(f"{path}: expected a mapping of binding id to keys, got {type(data).__name__}")
    keymap: dict[str, str] = {}
    for binding_id, keys in data.items():
        if binding_id not in binding_ids:
            close = difflib.get_close_matches(str(binding_id), list(binding_ids), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            known = ", ".join(sorted(binding_ids))
            raise KeymapError(f"{path}: unknown binding id {binding_id!r}{hint}; known ids: {known}")
        if not isinstance(keys, str) or not keys.strip():
            raise KeymapError(f"{path}: {binding_id}: keys must be a non-empty string like \"plus,equals_sign\"")
        keymap[str(binding_id)] = ",".join(k.strip() for k in keys.split(",") if k.strip())
    return keymap
