"""What every control route needs: the daemon's parts (a :class:`ControlContext`), the error
every route may answer with, and who the peer is and what it may do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Depends, Request

from syshaxd.config import RuntimeConfig
from syshaxd.control.bus import EventBus
from syshaxd.control.peercred import PEER_SCOPE_KEY, AccessPolicy, PeerCred
from syshaxd.schema import AdviceModel, ConfigChangeModel, RequestRecordModel, StateModel


@dataclass
class ControlContext:
    """What the control API needs from the daemon (constructed there, passed in)."""

    runtime: RuntimeConfig
    bus: EventBus
    access: AccessPolicy
    state: Callable[[], StateModel]
    reload: Callable[[], Awaitable[ConfigChangeModel]]
    #: Drain the whole box and stop (``POST /v1/drain``); returns what it will do, for people.
    drain: Callable[[str], str] | None = None
    #: The last finished requests, oldest first (``GET /v1/requests``; at most ``limit``).
    requests: Callable[[int | None], list[RequestRecordModel]] | None = None
    #: The latest advice ``syshax advise`` posted (kept in memory, lost on restart).
    advice: AdviceModel | None = None
    events_queue_size: int = 256


class ControlError(Exception):
    """An error answer with a status code, a message and maybe the offending key."""

    def __init__(self, status: int, message: str, key: str | None = None) -> None:
        self.status = status
        self.message = message
        self.key = key
        super().__init__(message)


def peer_of(request: Request) -> PeerCred | None:
    """The connecting process's credentials (None when the socket could not tell)."""
    peer = request.scope.get(PEER_SCOPE_KEY)
    return peer if isinstance(peer, PeerCred) else None


def who(request: Request) -> str:
    """The peer, for the log."""
    peer = peer_of(request)
    return peer.describe() if peer else "unknown peer"


def _guard(denied: Callable[[PeerCred | None], str | None]) -> list[Any]:
    """Route dependencies that answer 403 with ``denied(peer)``'s reason when it gives one."""

    def check(request: Request) -> PeerCred | None:
        peer = peer_of(request)
        reason = denied(peer)
        if reason:
            raise ControlError(403, reason)
        return peer

    return [Depends(check)]


def may_read(ctx: ControlContext) -> list[Any]:
    """Route dependencies that answer 403 unless the peer may read (``control.group``)."""
    return _guard(lambda peer: ctx.access.read_denied(peer))


def may_write(ctx: ControlContext) -> list[Any]:
    """Route dependencies that answer 403 unless the peer may change the daemon."""
    return _guard(lambda peer: ctx.access.write_denied(peer))
