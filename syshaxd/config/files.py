"""YAML config files on disk: reading with line numbers, comment-keeping edits, atomic writes.

Everything here is YAML 1.2 (ruamel.yaml), for reading and for writing, so a value written
by ``syshax config`` reads back as the same value (``yes`` stays a string, ``007`` is
quoted). This module knows nothing about the config model.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError


class ConfigError(Exception):
    """A configuration mistake, with a message written for the operator.

    ``source`` is where it was found (a file, ``file:line``, an environment variable);
    ``key`` the dotted key it concerns, when there is one.
    """

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None) -> None:
        self.source = source
        self.key = key
        self.message = message
        super().__init__(f"{source}: {message}" if source else message)


def _round_trip() -> YAML:
    rt = YAML()
    rt.preserve_quotes = True
    rt.width = 4096  # never fold a long value onto a second line
    # ruamel writes None as an empty value; keep the example's explicit "null".
    rt.representer.add_representer(type(None), _represent_null)
    return rt


def _represent_null(representer: Any, _data: None) -> Any:
    return representer.represent_scalar("tag:yaml.org,2002:null", "null")


def parse_text(text: str, source: str) -> Any:
    """Parse YAML text (round-trip nodes), or raise ConfigError naming ``source``, line and column."""
    try:
        return _round_trip().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        problem = exc.problem or exc.context or "not valid YAML"
        ctx = exc.context_mark
        if exc.problem and exc.context and ctx is not None and ctx is not exc.problem_mark:
            # The start of the construct is often where the mistake is (an unclosed "[").
            problem += (
                f" ({exc.context} that started at line {ctx.line + 1}, column {ctx.column + 1})"
            )
        raise ConfigError(f"invalid YAML: {problem}", source=where) from None
    except YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=source) from None


def read_text(path: Path) -> str:
    """A config file's text, or a ConfigError saying why it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise ConfigError("config file not found", source=str(path)) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a config file", source=str(path)) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read config file: {exc.strerror or exc}", source=str(path)
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file is not UTF-8 text ({exc.reason})", source=str(path)
        ) from None


def load_document(path: Path) -> CommentedMap:
    """The file as a comment-keeping mapping (empty when the file is empty or only comments)."""
    doc = parse_text(read_text(path), str(path))
    if doc is None:
        return CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise ConfigError(
            "the top level must be a mapping of sections (services:, models:, decider:, ...), "
            f"not a {_kind(doc)}",
            source=f"{path}:1",
        )
    return doc


def _kind(node: Any) -> str:
    if isinstance(node, list):
        return "list"
    if isinstance(node, str):
        return "string"
    return type(node).__name__


def to_plain(node: Any) -> Any:
    """ruamel's node types as plain dict/list/str/int/float/bool/None (what pydantic expects)."""
    if isinstance(node, Mapping):
        return {to_plain(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def key_lines(node: Any, prefix: str = "") -> dict[str, int]:
    """1-based line of every key in a round-trip document, by dotted key (list items: ``a.0.b``)."""
    lines: dict[str, int] = {}
    if isinstance(node, CommentedMap):
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            lines[dotted] = node.lc.key(key)[0] + 1
            lines.update(key_lines(value, dotted + "."))
    elif isinstance(node, CommentedSeq):
        for index, value in enumerate(node):
            lines[f"{prefix}{index}"] = node.lc.item(index)[0] + 1
            lines.update(key_lines(value, f"{prefix}{index}."))
    return lines


def read_config_file(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """A YAML mapping file as plain data plus the line of each dotted key."""
    doc = load_document(path)
    return to_plain(doc), key_lines(doc)


def parse_value(raw: str) -> Any:
    """Parse a command-line or environment value as YAML 1.2 (``24``, ``true``, ``[...]``).

    Text that is not valid YAML stays the text it was.
    """
    if not raw.strip():
        return raw
    try:
        return to_plain(YAML(typ="safe", pure=True).load(raw))
    except YAMLError:
        return raw


def edited_text(doc: CommentedMap, dotted: str, value: Any) -> str:
    """Set ``a.b.c`` in the document (creating sections) and return the whole file's new text.

    Comments, key order, quoting and blank lines of the rest of the file are kept.
    """
    parts = dotted.split(".")
    node = doc
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, CommentedMap):
            child = CommentedMap()
            node[part] = child
        node = child
    node[parts[-1]] = _flow(value)
    out = io.StringIO()
    _round_trip().dump(doc, out)
    return out.getvalue()


def _flow(value: Any) -> Any:
    """Lists and mappings as one-line flow YAML, so an edit stays on the key's own line."""
    if isinstance(value, list):
        seq = CommentedSeq(_flow(v) for v in value)
        seq.fa.set_flow_style()
        return seq
    if isinstance(value, Mapping):
        mapping = CommentedMap((k, _flow(v)) for k, v in value.items())
        mapping.fa.set_flow_style()
        return mapping
    return value


def dump_mapping(data: Mapping[str, Any], header: str = "") -> str:
    """Plain nested data as block YAML 1.2, keys sorted, after an optional comment header."""
    out = io.StringIO()
    out.write(header)
    dumper = YAML(typ="safe", pure=True)
    dumper.default_flow_style = False
    dumper.dump(_sorted(data), out)
    return out.getvalue()


def _sorted(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _sorted(node[k]) for k in sorted(node)}
    if isinstance(node, list):
        return [_sorted(v) for v in node]
    return node


def atomic_write(path: Path, text: str, mode: int | None = None) -> None:
    """Write ``text`` to ``path`` so that a crash leaves either the old or the new file.

    A temporary file in the same directory is written, flushed and fsynced, then renamed
    over the target; the directory is fsynced so the rename itself is durable. A symlink
    is followed (its target is replaced, the link stays). The old file's mode and, where
    permitted, owner are kept; a new file gets ``mode`` (default 0644).
    """
    path = Path(os.path.realpath(path)) if Path(path).is_symlink() else Path(path)
    directory = path.parent
    directory.mkdir(parents=True, exist_ok=True)
    owner: tuple[int, int] | None = None
    try:
        st = path.stat()
        owner = (st.st_uid, st.st_gid)
        mode = st.st_mode & 0o7777 if mode is None else mode
    except FileNotFoundError:
        mode = 0o644 if mode is None else mode
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp_name, mode)
        if owner is not None:
            _keep_owner(tmp_name, owner)
        os.replace(tmp_name, path)
    except BaseException:
        # Whatever went wrong (disk full, Ctrl-C), the old file is untouched: drop the temp.
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _keep_owner(tmp_name: str, owner: tuple[int, int]) -> None:
    st = os.stat(tmp_name)
    if (st.st_uid, st.st_gid) == owner:
        return
    try:
        os.chown(tmp_name, *owner)
    except PermissionError:
        pass  # an unprivileged editor cannot give files away; the file becomes theirs
