"""Dependencies flow one way: model and client never import Textual; nothing imports FastAPI;
of the daemon, the console uses only its vocabulary (schema, sse, locate) and the control
API's client it shares with ``syshax`` (control_client)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest

import console

CHECK = """
import sys
import {module}
bad = sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r})
assert not bad, bad
"""

#: The daemon modules any client may import: the wire models, the event-stream reader, the
#: socket locator and the control client. ``syshaxd.config`` is not one: it pulls in the config
#: models and ruamel.
DAEMON_VOCABULARY = {"syshaxd", "syshaxd.schema", "syshaxd.sse", "syshaxd.locate", "syshaxd.control_client"}

# Imports each module in turn and names the daemon modules that appeared with it.
BLAME = """
import importlib, json, sys
pulled = {}
for name in sys.argv[1:]:
    before = set(sys.modules)
    importlib.import_module(name)
    pulled[name] = sorted(m for m in set(sys.modules) - before if m.split('.')[0] == 'syshaxd')
print(json.dumps(pulled))
"""


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("console.model", ("textual", "fastapi", "httpx")),
        ("console.decisionlog", ("textual", "fastapi", "httpx")),
        ("console.client", ("textual", "fastapi")),
        ("console.render", ("textual", "fastapi")),
        ("console.once", ("textual", "fastapi")),
        ("console.cli", ("textual", "fastapi")),
        ("console.locate", ("textual", "fastapi", "httpx", "pydantic", "ruamel")),
        ("console.app", ("fastapi", "uvicorn", "starlette", "ruamel")),
        ("console.keys", ("fastapi", "uvicorn", "starlette")),
    ],
)
def test_module_does_not_pull_in(module: str, forbidden: tuple[str, ...]) -> None:
    done = subprocess.run([sys.executable, "-c", CHECK.format(module=module, forbidden=forbidden)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def console_modules() -> list[str]:
    """Every module of the console package, found on disk (a new module is checked too)."""
    found = pkgutil.walk_packages(console.__path__, prefix="console.")
    return sorted({"console", *(info.name for info in found)})


def test_console_uses_only_the_daemons_vocabulary() -> None:
    modules = console_modules()
    assert {"console.app", "console.cli", "console.widgets.status"} <= set(modules)
    done = subprocess.run([sys.executable, "-c", BLAME, *modules], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    pulled: dict[str, list[str]] = json.loads(done.stdout)
    assert set(pulled) == set(modules)
    bad = {module: sorted(set(daemon) - DAEMON_VOCABULARY) for module, daemon in pulled.items()}
    bad = {module: daemon for module, daemon in bad.items() if daemon}
    assert not bad, f"console modules importing more of the daemon than its vocabulary: {bad}"
