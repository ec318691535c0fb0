"""Key rebinding files and finding the daemon's socket."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.keymap import KeymapError, default_keymap_path, load_keymap
from console.locate import SYSTEM_SOCKET, SocketChoice, choose_socket, default_sockets
from syshaxd.config import ConfigError

IDS = ["batch_up", "batch_down", "drain", "quit"]


def test_keymap_file_rebinds_known_ids(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text('batch_up: "plus, equals_sign"\ndrain: ctrl+d\n')
    assert load_keymap(path, IDS, required=True) == {"batch_up": "plus,equals_sign", "drain": "ctrl+d"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("drian: x\n", "unknown binding id 'drian' (did you mean 'drain'?)"),
        ("- drain\n", "expected a mapping"),
        ("drain: 5\n", "keys must be a non-empty string"),
        ("drain: [\n", "invalid YAML"),
    ],
)
def test_keymap_mistakes_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    with pytest.raises(KeymapError) as caught:
        load_keymap(path, IDS, required=True)
    assert message in str(caught.value) and str(path) in str(caught.value)


def test_missing_keymap_is_an_error_only_when_asked_for(tmp_path: Path) -> None:
    assert load_keymap(tmp_path / "none.yaml", IDS, required=False) == {}
    with pytest.raises(KeymapError, match="not found"):
        load_keymap(tmp_path / "none.yaml", IDS, required=True)
    assert default_keymap_path({"XDG_CONFIG_HOME": "/x"}) == Path("/x/syshax/console-keys.yaml")


def test_socket_flag_wins() -> None:
    assert choose_socket("/tmp/a.sock", None, env={}).resolve() == Path("/tmp/a.sock")


def test_config_socket_is_used(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"control:\n  socket: {tmp_path}/ctl.sock\n")
    assert choose_socket(None, str(config), env={}).resolve() == tmp_path / "ctl.sock"


def test_broken_explicit_config_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("control: [\n")
    with pytest.raises(ConfigError):
        choose_socket(None, str(config), env={})


def test_defaults_prefer_an_existing_socket(tmp_path: Path) -> None:
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}
    assert default_sockets(env) == (SYSTEM_SOCKET, tmp_path / "syshax" / "control.sock")
    choice = SocketChoice(None, default_sockets(env))
    user = tmp_path / "syshax" / "control.sock"
    assert choice.resolve(exists=lambda p: p == user) == user
    assert choice.resolve(exists=lambda p: True) == SYSTEM_SOCKET
    assert SYSTEM_SOCKET.name in choice.describe()
