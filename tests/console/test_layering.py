"""Dependencies flow one way: model and client never import Textual; nothing imports FastAPI."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHECK = """
import sys
import {module}
bad = sorted(m for m in sys.modules if m.split('.')[0] in {forbidden!r})
assert not bad, bad
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
        ("console.app", ("fastapi", "uvicorn", "starlette")),
        ("console.keys", ("fastapi", "uvicorn", "starlette")),
    ],
)
def test_module_does_not_pull_in(module: str, forbidden: tuple[str, ...]) -> None:
    done = subprocess.run([sys.executable, "-c", CHECK.format(module=module, forbidden=forbidden)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
