"""The control API on the Unix socket: state, events, runtime config (a new control verb goes here).

``create_control_app`` serves ``/v1/state`` and ``/v1/events`` (:mod:`.watch`) and the config
changes (:mod:`.configure`); :mod:`.listen` makes the socket safely and holds the
single-instance lock; :mod:`.peercred` says who may do what; :mod:`.bus` fans events out.
"""

from __future__ import annotations

from syshaxd.control.app import create_control_app
from syshaxd.control.bus import EventBus
from syshaxd.control.context import ControlContext
from syshaxd.control.listen import ControlSocket, ControlSocketError, create_control_socket
from syshaxd.control.peercred import AccessPolicy, peercred_protocol_class
from syshaxd.control.state import build_state
from syshaxd.control.watch import publish_config_changes, publish_states

__all__ = [
    "AccessPolicy", "ControlContext", "ControlSocket", "ControlSocketError", "EventBus", "build_state",
    "create_control_app", "create_control_socket", "peercred_protocol_class", "publish_config_changes",
    "publish_states",
]  # fmt: skip
