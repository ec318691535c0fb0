"""Finding the config file and the control socket: one answer for the daemon, syshax and the console."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from syshaxd import locate
from syshaxd.locate import (
    SYSTEM_SOCKET,
    LocateError,
    client_socket_candidates,
    configured_socket,
    default_socket_path,
)


def test_socket_location_follows_config_systemd_root_and_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    explicit = tmp_path / "x.sock"
    assert default_socket_path(explicit, {"RUNTIME_DIRECTORY": "/run/other"}) == explicit
    assert client_socket_candidates(explicit, {}) == [explicit]
    assert default_socket_path(None, {"RUNTIME_DIRECTORY": "/run/syshax"}) == Path("/run/syshax/control.sock")
    monkeypatch.setattr(locate.os, "geteuid", lambda: 0)
    assert default_socket_path(None, {"XDG_RUNTIME_DIR": "/run/user/0"}) == SYSTEM_SOCKET
    assert client_socket_candidates(None, {"XDG_RUNTIME_DIR": "/run/user/0"}) == [SYSTEM_SOCKET]
    monkeypatch.setattr(locate.os, "geteuid", lambda: 1000)
    user = Path("/run/user/1000/syshax/control.sock")
    assert default_socket_path(None, {"XDG_RUNTIME_DIR": "/run/user/1000"}) == user
    assert default_socket_path(None, {}) == Path("/tmp/syshax-1000/control.sock")
    assert client_socket_candidates(None, {"XDG_RUNTIME_DIR": "/run/user/1000"}) == [SYSTEM_SOCKET, user]
    assert client_socket_candidates(None, {}) == [SYSTEM_SOCKET, Path("/tmp/syshax-1000/control.sock")]


def test_configured_socket_reads_only_control_socket_and_the_environment_wins(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("control:\n  socket: /srv/sx.sock\nsystem: {max_queue_size: 'not checked here'}\n")
    assert configured_socket(config, {}) == Path("/srv/sx.sock")
    assert configured_socket(None, {"SYSHAX_CONFIG": str(config)}) == Path("/srv/sx.sock")
    assert configured_socket(config, {"SYSHAX_CONTROL__SOCKET": "/e.sock"}) == Path("/e.sock")
    config.write_text("models: {default: x}\n")
    assert configured_socket(config, {}) is None


def test_a_named_config_that_is_missing_or_broken_is_an_error_a_default_one_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(LocateError, match="not found"):
        configured_socket(tmp_path / "nope.yaml", {})
    broken = tmp_path / "broken.yaml"
    broken.write_text("control: [\n")
    with pytest.raises(LocateError, match="cannot read the config file"):
        configured_socket(broken, {})
    monkeypatch.setattr(locate, "CONFIG_LOCATIONS", (broken,))
    assert configured_socket(None, {}) is None


def test_the_locator_needs_no_config_model() -> None:
    code = "import sys, syshaxd.locate; bad = [m for m in sys.modules if m.startswith(('pydantic', 'ruamel', 'syshaxd.config'))]; assert not bad, bad"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
