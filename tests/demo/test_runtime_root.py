"""The demo's runtime directory: in $TMPDIR, unless a control socket there could not be bound."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.stack import control_socket, runtime_root
from syshaxd.config.model import SUN_PATH_MAX


@pytest.fixture
def made() -> Iterator[list[Path]]:
    roots: list[Path] = []
    yield roots
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


def _bind(path: Path) -> None:
    path.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))


def test_short_tmpdir_is_used_as_is(monkeypatch: pytest.MonkeyPatch, short_tmp: Path, made: list[Path]) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    root = runtime_root()
    made.append(root)
    assert root.parent == short_tmp
    _bind(control_socket(root))


def test_deep_tmpdir_falls_back_to_tmp_and_leaves_nothing_behind(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, made: list[Path]
) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 40)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with pytest.raises(OSError, match="path too long"):  # what the daemon would have met
        _bind(deep / "syshax-demo-xxxxxxxx" / "run" / "control.sock")
    shutil.rmtree(deep / "syshax-demo-xxxxxxxx")
    root = runtime_root()
    made.append(root)
    assert root.parent == Path("/tmp") and root.name.startswith("syshax-demo-")
    assert len(bytes(control_socket(root))) <= SUN_PATH_MAX
    _bind(control_socket(root))
    assert list(deep.iterdir()) == []  # the too-deep directory it tried first is gone
