"""Key rebinding files and finding the daemon's socket."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from console.keymap import KeymapError, default_keymap_path, load_keymap
from console.locate import choose_socket
from syshaxd.locate import SYSTEM_SOCKET, LocateError, client_socket_candidates

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


def test_socket_flag_wins(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"control:\n  socket: {tmp_path}/ctl.sock\n")
    assert choose_socket("/tmp/a.sock", str(config), env={}).resolve() == Path("/tmp/a.sock")


def test_config_socket_is_used(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"control:\n  socket: {tmp_path}/ctl.sock\n")
    assert choose_socket(None, str(config), env={}).resolve() == tmp_path / "ctl.sock"
    assert choose_socket(None, None, env={"SYSHAX_CONFIG": str(config)}).resolve() == tmp_path / "ctl.sock"
    env = {"SYSHAX_CONTROL__SOCKET": "/srv/env.sock"}
    assert choose_socket(None, str(config), env=env).resolve() == Path("/srv/env.sock")


@pytest.mark.parametrize(("text", "message"), [("control: [\n", "cannot read"), (None, "not found")])
def test_a_broken_or_missing_explicit_config_is_an_error(tmp_path: Path, text: str | None, message: str) -> None:
    config = tmp_path / "config.yaml"
    if text is not None:
        config.write_text(text)
    with pytest.raises(LocateError, match=message):
        choose_socket(None, str(config), env={})


def test_the_console_looks_where_syshax_status_looks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no config/config.yaml here
    for env in ({}, {"XDG_RUNTIME_DIR": str(tmp_path)}, {"RUNTIME_DIRECTORY": str(tmp_path / "svc")}):
        assert list(choose_socket(None, None, env=env).candidates) == client_socket_candidates(None, env)


def test_defaults_prefer_an_existing_socket_and_wait_at_the_users_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    choice = choose_socket(None, None, env={})
    assert choice.candidates == (SYSTEM_SOCKET, Path("/tmp/syshax-1000/control.sock"))
    assert choice.resolve(exists=lambda p: False) == Path("/tmp/syshax-1000/control.sock")

    choice = choose_socket(None, None, env={"XDG_RUNTIME_DIR": str(tmp_path)})
    user = tmp_path / "syshax" / "control.sock"
    assert choice.candidates == (SYSTEM_SOCKET, user)
    assert choice.resolve(exists=lambda p: p == user) == user
    assert choice.resolve(exists=lambda p: True) == SYSTEM_SOCKET
    assert choice.resolve(exists=lambda p: False) == user

    service = tmp_path / "svc" / "control.sock"
    choice = choose_socket(None, None, env={"RUNTIME_DIRECTORY": str(service.parent)})
    assert choice.candidates == (service, SYSTEM_SOCKET, Path("/tmp/syshax-1000/control.sock"))
    assert choice.resolve(exists=lambda p: p == service) == service


def test_root_waits_at_the_system_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    choice = choose_socket(None, None, env={"XDG_RUNTIME_DIR": str(tmp_path)})
    assert choice.candidates == (SYSTEM_SOCKET,)
    assert choice.resolve(exists=lambda p: False) == SYSTEM_SOCKET


def test_a_broken_default_config_is_passed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text("control: [\n")
    monkeypatch.chdir(tmp_path)
    assert choose_socket(None, None, env={}).candidates == tuple(client_socket_candidates(None, {}))
