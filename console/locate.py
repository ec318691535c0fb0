"""Where the console finds the daemon: ``--socket``, else the config's, else the defaults."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from syshaxd.config import ConfigError, load_config

SYSTEM_SOCKET = Path("/run/syshax/control.sock")


def default_sockets(env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The default socket locations, system daemon first, then the user's own daemon."""
    env = os.environ if env is None else env
    paths = [SYSTEM_SOCKET]
    if env.get("XDG_RUNTIME_DIR"):
        paths.append(Path(env["XDG_RUNTIME_DIR"]) / "syshax" / "control.sock")
    return tuple(paths)


@dataclass(frozen=True)
class SocketChoice:
    """How the console picks its socket; ``resolve()`` is asked again on every reconnect."""

    explicit: Path | None
    candidates: tuple[Path, ...]

    def resolve(self, exists: Callable[[Path], bool] = Path.exists) -> Path:
        """The socket to try now: the fixed one, else the first default that exists.

        When none exists yet, root's daemon is assumed for root and the user's for others.
        """
        if self.explicit is not None:
            return self.explicit
        for path in self.candidates:
            if exists(path):
                return path
        if os.geteuid() != 0 and len(self.candidates) > 1:
            return self.candidates[1]
        return self.candidates[0]

    def describe(self) -> str:
        """Where the console looks, for messages."""
        if self.explicit is not None:
            return str(self.explicit)
        return " or ".join(str(p) for p in self.candidates)


def choose_socket(
    socket: str | None, config_path: str | None, env: Mapping[str, str] | None = None
) -> SocketChoice:
    """The socket choice from the command line, the config, and the environment.

    Raises ConfigError when an explicitly given config file is broken; a broken default
    config file is not the console's business, so the defaults are used then.
    """
    env = os.environ if env is None else env
    if socket:
        return SocketChoice(Path(socket), ())
    try:
        loaded = load_config(config_path, env=env, use_overrides=False)
    except ConfigError:
        if config_path or env.get("SYSHAX_CONFIG"):
            raise
        return SocketChoice(None, default_sockets(env))
    if loaded.config.control.socket is not None:
        return SocketChoice(Path(loaded.config.control.socket), ())
    return SocketChoice(None, default_sockets(env))
