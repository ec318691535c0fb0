"""What the conductor needs from the parts around it: the monitor's snapshots, the runtime
config, and somewhere to send decision events (the service wires in the real ones)."""

from __future__ import annotations

from typing import Any, Protocol

from syshaxd.config import ServiceLevels
from syshaxd.routing import Limits, ServiceLevel
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


class CoreInputs:
    """The core's view of the daemon: the monitor's snapshot, the runtime config (limits cached
    until the conductor hears of a change)."""

    def __init__(self, runtime: RuntimeSource, monitor: SnapshotSource) -> None:
        self.runtime = runtime
        self.monitor = monitor
        self._limits: Limits | None = None
        self._flags: dict[str, tuple[bool, bool]] = {}
        self._service: tuple[ServiceLevels, dict[str, ServiceLevel]] | None = None

    @property
    def policy_name(self) -> str:
        return self.runtime.policy_name

    def observed(self) -> Snapshot:
        return self.monitor.snapshot()

    def engine_flags(self, name: str) -> tuple[bool, bool]:
        flags = self._flags.get(name)
        if flags is None:
            flags = self._flags[name] = self.runtime.engine_flags(name)
        return flags

    def limits(self) -> Limits:
        if self._limits is None:
            self._limits = self.runtime.limits()
        return self._limits

    def service(self) -> tuple[ServiceLevels, dict[str, ServiceLevel]]:
        """The service section and its classes as the core sees them."""
        if self._service is None:
            section = self.runtime.service()
            self._service = (section, section.levels())
        return self._service

    def refresh(self) -> None:
        self._limits = None
        self._flags.clear()
        self._service = None
