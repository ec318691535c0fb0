"""Where things are found: the config file, and the daemon's control socket.

One answer for the daemon (where it makes its socket), ``syshax`` and the console (where they
look for it). It needs no config model: a client that only wants the socket reads
``control.socket`` from the YAML file itself, so the console starts without the daemon's
config stack.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "CONFIG_ENV", "CONFIG_LOCATIONS", "SOCKET_ENV", "SOCKET_NAME", "SYSTEM_SOCKET", "LocateError",
    "client_socket_candidates", "configured_socket", "default_socket_path", "find_config_file",
]  # fmt: skip

#: Names the config file when ``--config`` does not.
CONFIG_ENV = "SYSHAX_CONFIG"
#: Where the config file is looked for when neither ``--config`` nor ``$SYSHAX_CONFIG`` names one.
CONFIG_LOCATIONS: tuple[Path, ...] = (Path("/etc/syshax/config.yaml"), Path("config/config.yaml"))
#: The environment override of ``control.socket`` (the config's ``SECTION__KEY`` rule).
SOCKET_ENV = "SYSHAX_CONTROL__SOCKET"
SOCKET_NAME = "control.sock"
SYSTEM_SOCKET = Path("/run/syshax") / SOCKET_NAME


class LocateError(Exception):
    """A file the user named cannot be used: ``path``, and ``reason`` saying why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def find_config_file(
    explicit: str | Path | None, env: Mapping[str, str] | None = None, locations: tuple[Path, ...] | None = None
) -> Path | None:
    """The config file: ``explicit``, else ``$SYSHAX_CONFIG``, else the first default that exists.

    Raises:
        LocateError: a file named by ``explicit`` or ``$SYSHAX_CONFIG`` does not exist.
    """
    env = os.environ if env is None else env
    for given, how in ((explicit, "given with --config"), (env.get(CONFIG_ENV), f"from ${CONFIG_ENV}")):
        if given:
            path = Path(given)
            if not path.exists():
                raise LocateError(path, f"config file not found ({how})")
            return path
    for candidate in CONFIG_LOCATIONS if locations is None else locations:
        if candidate.is_file():
            return candidate
    return None


def default_socket_path(configured: str | Path | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The daemon's control socket: ``control.socket``, else the runtime directory's default.

    Under systemd ``$RUNTIME_DIRECTORY`` (RuntimeDirectory=syshax) wins; root uses
    /run/syshax; another user ``$XDG_RUNTIME_DIR/syshax``, else /tmp/syshax-<uid>.
    """
    env = os.environ if env is None else env
    if configured is not None:
        return Path(configured)
    if env.get("RUNTIME_DIRECTORY"):
        return Path(env["RUNTIME_DIRECTORY"].split(":")[0]) / SOCKET_NAME
    if os.geteuid() == 0:
        return SYSTEM_SOCKET
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]) / "syshax" / SOCKET_NAME
    return Path(f"/tmp/syshax-{os.geteuid()}") / SOCKET_NAME


def client_socket_candidates(configured: str | Path | None = None, env: Mapping[str, str] | None = None) -> list[Path]:
    """Where a client looks for the daemon, in order (the configured socket alone if there is one).

    The system daemon first, then the user's own: a user in ``control.group`` watches the
    system daemon; anyone else finds the daemon they started themselves.
    """
    env = os.environ if env is None else env
    if configured is not None:
        return [Path(configured)]
    found: list[Path] = []
    if env.get("RUNTIME_DIRECTORY"):
        found.append(Path(env["RUNTIME_DIRECTORY"].split(":")[0]) / SOCKET_NAME)
    found.append(SYSTEM_SOCKET)
    if os.geteuid() != 0:
        found.append(default_socket_path(None, {k: v for k, v in env.items() if k != "RUNTIME_DIRECTORY"}))
    return list(dict.fromkeys(found))


def configured_socket(config_path: str | Path | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """``control.socket`` as the config sets it (``$SYSHAX_CONTROL__SOCKET`` first), or None.

    Reads only that key, with plain YAML: a client needs nothing else from the file.

    Raises:
        LocateError: a config file named explicitly (``config_path``, ``$SYSHAX_CONFIG``) is
            missing or is not YAML; a broken default file is the daemon's business, not a
            client's, and is passed over.
    """
    env = os.environ if env is None else env
    if env.get(SOCKET_ENV):
        return Path(env[SOCKET_ENV])
    named = bool(config_path or env.get(CONFIG_ENV))
    path = find_config_file(config_path, env)
    if path is None:
        return None
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        if named:
            raise LocateError(path, f"cannot read the config file: {exc}") from None
        return None
    control = data.get("control") if isinstance(data, dict) else None
    socket = control.get("socket") if isinstance(control, dict) else None
    return Path(socket) if isinstance(socket, str) and socket else None
