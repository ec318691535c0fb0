"""What the conductor needs from the parts around it: the monitor's snapshots, the runtime
config, and somewhere to send decision events (the service wires in the real ones)."""

from __future__ import annotations

from typing import Any, Protocol

from syshaxd.config import ServiceLevels
from syshaxd.routing import Limits
from syshaxd.snapshot import Snapshot


class SnapshotSource(Protocol):
    """What the conductor needs from the monitor."""

    def snapshot(self) -> Snapshot:
        """The latest immutable snapshot."""
        ...


class RuntimeSource(Protocol):
    """What the conductor needs from the runtime config holder."""

    @property
    def policy_name(self) -> str:
        """The active policy's name."""
        ...

    def limits(self) -> Limits:
        """The decider's current limits."""
        ...

    def engine_flags(self, name: str) -> tuple[bool, bool]:
        """(enabled, draining) of an engine."""
        ...

    def service(self) -> ServiceLevels:
        """The service classes and rules now."""
        ...


class EventSink(Protocol):
    """Where decision events go (the control API's event bus)."""

    def publish(self, event: str, data: Any) -> None:
        """Send one event to every subscriber without blocking."""
        ...
