"""Who is on the other end of the control socket, and what they may do.

Peer credentials come from the kernel (``SO_PEERCRED``, plus ``SO_PEERGROUPS`` for the
supplementary groups) and reach each request through :class:`PeerCredProtocol`, a thin
wrapper around uvicorn's HTTP protocol class. Reading is for members of ``control.group``;
changing the daemon is for root, the daemon's own user and ``control.admin_group``.
"""

from __future__ import annotations

import asyncio
import grp
import logging
import os
import pwd
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from syshaxd.config import Config

log = logging.getLogger("syshaxd.control")

#: Linux's SO_PEERGROUPS (since 4.13); Python's socket module does not export it.
SO_PEERGROUPS = getattr(socket, "SO_PEERGROUPS", 59)
#: The ASGI scope key that carries the connection's :class:`PeerCred`.
PEER_SCOPE_KEY = "syshax.peer"


def resolve_group(name: str) -> int | None:
    """A group's gid, or None if the group does not exist."""
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        return None


def user_name(uid: int) -> str:
    """A user's name, or the number if it has none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def group_name(gid: int) -> str:
    """A group's name, or the number if it has none."""
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


@dataclass(frozen=True)
class PeerCred:
    """Who is on the other end of a Unix socket connection."""

    pid: int
    uid: int
    gid: int
    groups: frozenset[int] = field(default_factory=frozenset)

    def describe(self) -> str:
        """``uid 1000 (alice), groups alice, syshax`` for messages."""
        names = ", ".join(group_name(g) for g in sorted({self.gid, *self.groups}))
        return f"uid {self.uid} ({user_name(self.uid)}), groups {names}"


def peer_credentials(sock: socket.socket) -> PeerCred:
    """The peer's pid/uid/gid (``SO_PEERCRED``) and supplementary groups (``SO_PEERGROUPS``)."""
    size = struct.calcsize("3i")
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, size))
    groups: set[int] = set()
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_PEERGROUPS, 4 * 1024)
        groups.update(struct.unpack(f"{len(raw) // 4}I", raw[: len(raw) // 4 * 4]))
    except OSError:
        # Older kernels: fall back to the group database (may differ from the live process).
        try:
            name = pwd.getpwuid(uid).pw_name
            groups.update(g.gr_gid for g in grp.getgrall() if name in g.gr_mem)
        except KeyError:
            pass
    return PeerCred(pid=pid, uid=uid, gid=gid, groups=frozenset(groups))


@dataclass(frozen=True)
class AccessPolicy:
    """Reading for the control group, writing for root, the daemon's user and the admin group."""

    owner_uid: int
    read_gid: int | None
    admin_gid: int | None = None
    group_name: str = "syshax"
    admin_group_name: str | None = None

    @classmethod
    def from_config(cls, config: Config, socket_gid: int | None = None) -> AccessPolicy:
        """The policy for a daemon running as the current user."""
        admin = config.control.admin_group
        admin_gid = resolve_group(admin) if admin else None
        if admin and admin_gid is None:
            log.warning("control.admin_group %r does not exist: nobody gets write access through it", admin)
        read_gid = resolve_group(config.control.group)
        return cls(
            owner_uid=os.geteuid(),
            read_gid=read_gid if read_gid is not None else socket_gid,
            admin_gid=admin_gid,
            group_name=config.control.group,
            admin_group_name=admin,
        )

    def _privileged(self, peer: PeerCred) -> bool:
        return peer.uid in (0, self.owner_uid)

    def _in(self, peer: PeerCred, gid: int | None) -> bool:
        return gid is not None and (peer.gid == gid or gid in peer.groups)

    def read_denied(self, peer: PeerCred | None) -> str | None:
        """Why ``peer`` may not read, or None if it may."""
        if peer is None:
            return "no peer credentials on this connection (the control API only serves its Unix socket)"
        if self._privileged(peer) or self._in(peer, self.read_gid) or self._in(peer, self.admin_gid):
            return None
        return f"reading needs membership in group {self.group_name!r}; you are {peer.describe()}"

    def write_denied(self, peer: PeerCred | None) -> str | None:
        """Why ``peer`` may not change the daemon, or None if it may."""
        if peer is None:
            return "no peer credentials on this connection (the control API only serves its Unix socket)"
        if self._privileged(peer) or self._in(peer, self.admin_gid):
            return None
        who = f"root, the daemon's user ({user_name(self.owner_uid)})"
        if self.admin_group_name:
            who += f" or members of control.admin_group {self.admin_group_name!r}"
        else:
            who += " (no control.admin_group is configured)"
        return f"changing the daemon is allowed to {who}; you are {peer.describe()}"


class PeerCredProtocol(asyncio.Protocol):
    """Wraps uvicorn's HTTP protocol: reads the peer's credentials once per connection and puts
    them into every request's ASGI scope under ``"syshax.peer"``.

    Composition rather than subclassing keeps it independent of which implementation
    (h11, httptools) uvicorn picked; it only relies on the protocol's ``app`` attribute.
    """

    #: Set by :func:`peercred_protocol_class`.
    inner_class: type[asyncio.Protocol]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._inner = self.inner_class(*args, **kwargs)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102
        self._inner.connection_made(transport)
        sock = transport.get_extra_info("socket")
        peer: PeerCred | None = None
        if sock is not None and sock.family == socket.AF_UNIX:
            try:
                peer = peer_credentials(sock)
            except OSError as exc:
                log.warning("cannot read peer credentials: %s", exc)
        app = getattr(self._inner, "app", None)
        if app is not None:
            self._inner.app = _with_peer(app, peer)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:  # noqa: D102
        self._inner.data_received(data)  # type: ignore[attr-defined]

    def eof_received(self) -> bool | None:  # noqa: D102
        return self._inner.eof_received()  # type: ignore[attr-defined, no-any-return]

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:  # noqa: D102
        self._inner.pause_writing()

    def resume_writing(self) -> None:  # noqa: D102
        self._inner.resume_writing()


def peercred_protocol_class(inner: type[asyncio.Protocol]) -> type[PeerCredProtocol]:
    """A :class:`PeerCredProtocol` wrapping ``inner`` (pass it to uvicorn as ``http=``)."""
    return type("PeerCredProtocol", (PeerCredProtocol,), {"inner_class": inner})


def _with_peer(app: Any, peer: PeerCred | None) -> Any:
    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") in ("http", "websocket"):
            scope = {**scope, PEER_SCOPE_KEY: peer}
        await app(scope, receive, send)

    return asgi
