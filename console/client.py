"""The console's client of the control API: the daemon's own (:mod:`syshaxd.control_client`).

``syshax`` and the console talk to the daemon through one client, so a call, its parsing and
the operator's message for each failure are written once. It is httpx only (no Textual, no
daemon config): the app and ``--once`` share it, and tests drive it with ``httpx.MockTransport``.
"""

from __future__ import annotations

from syshaxd.control_client import (
    STREAM_SILENCE,
    ControlClient,
    ControlError,
    Event,
    Forbidden,
    ProtocolError,
    Rejected,
    Unreachable,
)

__all__ = ["STREAM_SILENCE", "ControlClient", "ControlError", "Event", "Forbidden", "ProtocolError", "Rejected",
           "Unreachable"]
