"""One house, one direction: every import in the daemon runs to the left of the layer rule.

    vocabulary <- config <- engines <- monitor, policy <- core <- conductor <- api, control <- service <- cli

(docs/architecture.md). A package imports only packages to its left, and another package only
through its face (its ``__init__``); the daemon never imports the simulator, the demo or the
console; the console takes only the shared wire vocabulary from the daemon; ``policy/`` does
no I/O; the scheduling core (``core/``) does no I/O, reads no clock and knows no engine
client: it imports no asyncio, socket, time or httpx, and nothing of engines/ or monitor/. Two checks: every ``import`` statement in the source, function-local ones included
(a circle hidden inside a function is still a circle), and each layer imported alone in a
fresh interpreter. There are no import circles anywhere.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("syshaxd", "sim", "demo", "console")

#: Modules of syshaxd/ every layer may use: the words the layers speak.
VOCABULARY = ("errors", "schema", "snapshot", "request", "routing", "sse", "locate")
#: syshaxd's layers, left to right; siblings share a rank and may not import each other.
RANKS: dict[str, int] = {
    **{name: 0 for name in VOCABULARY},
    "config": 1,
    "engines": 2,
    "monitor": 3, "policy": 3,
    "core": 4,
    "conductor": 5,
    "api": 6, "control": 6,
    "service": 7,
    "cli": 8, "__main__": 8,
}
#: Layers to its left a layer still may not import (the core drives no engine and reads no scrape).
NOT_FROM: dict[str, set[str]] = {"core": {"config", "engines", "monitor"}}
#: What the console may take from the daemon (no config model, no server stack).
CONSOLE_MAY_USE = {"syshaxd", "syshaxd.schema", "syshaxd.sse", "syshaxd.locate"}
#: Third-party and standard modules that mean I/O: policies are pure functions.
IO_MODULES = {"httpx", "httpcore", "asyncio", "socket", "fastapi", "starlette", "uvicorn", "psutil",
              "subprocess", "urllib", "http", "prometheus_client", "yaml", "ruamel", "requests", "aiohttp"}
#: Per layer, third-party packages its own modules must not import.
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "policy": IO_MODULES,
    "core": IO_MODULES | {"time"},
    **{name: {"httpx", "fastapi", "starlette", "uvicorn", "textual", "psutil", "ruamel", "prometheus_client"}
       for name in VOCABULARY},
}
_SERVER_STACK = {"fastapi", "starlette", "uvicorn", "textual"}
#: Per layer, what must not be loaded at all, even by what it imports.
NOT_LOADED: dict[str, set[str]] = {
    "config": _SERVER_STACK | {"httpx"}, "policy": _SERVER_STACK | {"httpx", "psutil"},
    "core": _SERVER_STACK | {"httpx", "psutil", "asyncio", "socket", "pydantic", "yaml"},
    "engines": _SERVER_STACK, "monitor": _SERVER_STACK, "conductor": _SERVER_STACK,
}


@dataclass(frozen=True)
class Import:
    """One import statement: who imports what, and where."""

    source: str  # dotted module that imports
    target: str  # dotted module imported
    line: int
    local: bool  # inside a function

    def __str__(self) -> str:
        where = " (inside a function)" if self.local else ""
        return f"{self.source}:{self.line} imports {self.target}{where}"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of our packages, by dotted name."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def _resolve(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = source.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports(known: dict[str, Path]) -> Iterator[Import]:
    """Every import statement in our modules (names imported from a package that are its modules count
    as imports of those modules)."""
    for source, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        local_lines = {n.lineno for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield Import(source, alias.name, node.lineno, node.lineno in local_lines)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(source, path.name == "__init__.py", node)
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    yield Import(source, sub if sub in known else target, node.lineno, node.lineno in local_lines)


def layer(module: str) -> str | None:
    """syshaxd's layer of a module (its package, or the vocabulary module's own name)."""
    parts = module.split(".")
    if parts[0] != "syshaxd":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def violations(found: list[Import], known: dict[str, Path]) -> list[str]:
    """Every import against the rules, as a sentence naming file and line."""
    bad = []
    for imp in found:
        top = imp.target.split(".")[0]
        src_layer, dst_layer = layer(imp.source), layer(imp.target)
        if imp.source.startswith("syshaxd") and top in ("sim", "demo", "console", "textual"):
            bad.append(f"{imp}: the daemon never imports the simulator, the demo or the console")
        if imp.source.startswith("console") and imp.target.startswith("syshaxd") and imp.target not in CONSOLE_MAY_USE:
            bad.append(f"{imp}: the console takes only {sorted(CONSOLE_MAY_USE)} from the daemon")
        if src_layer in FORBIDDEN_THIRD_PARTY and top in FORBIDDEN_THIRD_PARTY[src_layer]:
            bad.append(f"{imp}: {src_layer} must not use {top}")
        if src_layer is None or dst_layer is None or dst_layer == "__init__" or src_layer == dst_layer:
            continue
        if src_layer in VOCABULARY and dst_layer in VOCABULARY:
            continue  # the vocabulary's words may use each other (circles are checked on their own)
        if dst_layer in NOT_FROM.get(src_layer, ()):
            bad.append(f"{imp}: {src_layer} must not import {dst_layer}")
        if RANKS[dst_layer] >= RANKS[src_layer]:
            bad.append(f"{imp}: {src_layer} (rank {RANKS[src_layer]}) may import only layers to its left, "
                       f"not {dst_layer} (rank {RANKS[dst_layer]})")
        elif dst_layer not in VOCABULARY and imp.target != f"syshaxd.{dst_layer}":
            bad.append(f"{imp}: another package is imported through its face, syshaxd.{dst_layer}")
    return bad


def circles(found: list[Import], known: dict[str, Path]) -> list[list[str]]:
    """Strongly connected groups of modules (Tarjan), each a circle of imports."""
    graph: dict[str, set[str]] = {name: set() for name in known}
    for imp in found:
        if imp.target in known and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_every_import_runs_to_the_left() -> None:
    known = modules()
    bad = violations(list(imports(known)), known)
    assert not bad, "imports against the layer rule:\n  " + "\n  ".join(bad)


def test_there_are_no_import_circles() -> None:
    known = modules()
    found = circles(list(imports(known)), known)
    assert not found, "import circles:\n  " + "\n  ".join(" <-> ".join(group) for group in found)


@pytest.mark.parametrize(("bad_import", "into", "says"), [
    ("import httpx\n", "syshaxd/policy/planted.py", "policy must not use httpx"),
    ("import time\n", "syshaxd/core/planted.py", "core must not use time"),
    ("import asyncio\n", "syshaxd/core/planted.py", "core must not use asyncio"),
    ("from syshaxd.engines import EngineClient\n", "syshaxd/core/planted.py", "core must not import engines"),
    ("from syshaxd.conductor import Conductor\n", "syshaxd/core/planted.py", "may import only layers to its left"),
    ("from syshaxd.conductor import Conductor\n", "syshaxd/engines/planted.py", "may import only layers to its left"),
    ("def f():\n    from syshaxd.service import daemon\n", "syshaxd/api/planted.py", "inside a function"),
    ("from syshaxd.conductor.flight import Flight\n", "syshaxd/api/planted.py", "through its face"),
    ("import sim\n", "syshaxd/service/planted.py", "never imports the simulator"),
    ("from syshaxd.config import Config\n", "console/planted.py", "the console takes only"),
])
def test_the_check_catches_a_planted_import(tmp_path: Path, bad_import: str, into: str, says: str) -> None:
    # The same check over a copy of the tree with one bad import added: it must name it.
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            copy = tmp_path / path.relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / into).write_text(bad_import, encoding="utf-8")
    known = modules(tmp_path)
    bad = violations(list(imports(known)), known)
    assert any(says in line and "planted" in line for line in bad), bad


def test_a_planted_circle_is_found() -> None:
    known = {"pkg.a": Path("a.py"), "pkg.b": Path("b.py"), "pkg.c": Path("c.py")}
    found = [Import("pkg.a", "pkg.b", 1, False), Import("pkg.b", "pkg.c", 1, False), Import("pkg.c", "pkg.a", 3, True)]
    assert circles(found, known) == [["pkg.a", "pkg.b", "pkg.c"]]


ALONE = """
import sys
import {module}
loaded = sorted(m for m in sys.modules if m.split('.')[0] in {ours!r})
bad = [m for m in loaded if m not in {allowed!r} and not m.startswith({prefixes!r})]
third = sorted(m for m in {forbidden!r} if m in sys.modules)
assert not bad and not third, (bad, third)
"""


def _left_of(name: str) -> tuple[str, ...]:
    return tuple(f"syshaxd.{other}" for other, rank in RANKS.items() if rank < RANKS[name] or other == name)


@pytest.mark.parametrize("name", ["config", "engines", "monitor", "policy", "core", "conductor", "api", "control",
                                  "service"])
def test_each_layer_imported_alone_loads_only_layers_to_its_left(name: str) -> None:
    code = ALONE.format(module=f"syshaxd.{name}", ours=("syshaxd", "sim", "demo", "console"),
                        allowed=("syshaxd",), prefixes=_left_of(name),
                        forbidden=sorted(NOT_LOADED.get(name, ())))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
