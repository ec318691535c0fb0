"""Where the console finds the daemon: ``--socket``, else the config's, else the defaults.

The places are ``syshax status``'s (:mod:`syshaxd.locate`), read without the daemon's
config models: the console needs one key of the config file, not its whole stack.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from syshaxd.locate import client_socket_candidates, configured_socket, default_socket_path


@dataclass(frozen=True)
class SocketChoice:
    """How the console picks its socket; ``resolve()`` is asked again on every reconnect."""

    candidates: tuple[Path, ...]
    """Where to look, in order (one path when ``--socket`` or the config names it)."""
    fallback: Path
    """The socket tried while none of them exists yet."""

    def resolve(self, exists: Callable[[Path], bool] = Path.exists) -> Path:
        """The socket to try now: the first candidate that exists, else the fallback."""
        return next((path for path in self.candidates if exists(path)), self.fallback)


def choose_socket(
    socket: str | None, config_path: str | None, env: Mapping[str, str] | None = None
) -> SocketChoice:
    """The socket choice from the command line, the config, and the environment.

    While no daemon is up, the console waits where a daemon this user starts would
    listen (root's for root, the user's own for anyone else).

    Raises:
        LocateError: an explicitly given config file (``config_path``, ``$SYSHAX_CONFIG``)
            is missing or not YAML; a broken default file is not the console's business.
    """
    env = os.environ if env is None else env
    if socket:
        return SocketChoice((Path(socket),), Path(socket))
    configured = configured_socket(config_path, env)
    return SocketChoice(tuple(client_socket_candidates(configured, env)), default_socket_path(configured, env))
