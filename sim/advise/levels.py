"""The service classes a replay runs each recorded request in: the daemon's live class table.

Each record names its class (``service_class``) and the targets it was held to
(``ttft_target``, ``tpot_target``: the class's, or its own ``x-slo-*`` headers'). A replay runs
it in that class as the daemon's ``service.classes`` table gives it now -- priority, whether it
may be shed, what happens when it is late, whether the CPU may serve it -- at the targets the
record carries, which override the class's as they did at the time. A record of a class the
table no longer has runs at priority 0 with its own targets; a record without a class (an
older daemon) runs in the default class.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from syshaxd.cli import CommandError
from syshaxd.config.classes import ServiceLevels
from syshaxd.routing import ServiceLevel
from syshaxd.schema import AdviceClassTargets, RequestRecordModel

__all__ = ["ClassTable", "class_table", "level_of", "replayed", "targets_of"]


@dataclass(frozen=True)
class ClassTable:
    """The daemon's class table: each class as the core sees it, the default, and the table as
    ``service.classes`` shows it (what a PATCH of it starts from)."""

    levels: dict[str, ServiceLevel]
    default: str = "interactive"
    raw: dict[str, dict[str, Any]] = field(default_factory=dict)

    def allowed(self) -> frozenset[str]:
        """The classes the table lets the policy place on the CPU."""
        return frozenset(name for name, level in self.levels.items() if level.cpu)


def class_table(config: Mapping[str, Any]) -> ClassTable:
    """The class table of the daemon's running config (``GET /v1/state``'s runtime keys); the
    shipped table when the daemon shows none (an older daemon).

    Raises:
        CommandError: the daemon's table is not one this syshax reads.
    """
    section: dict[str, Any] = {}
    if isinstance(config.get("service.classes"), dict):
        section["classes"] = config["service.classes"]
    if isinstance(config.get("service.default_class"), str):
        section["default_class"] = config["service.default_class"]
    try:
        levels = ServiceLevels.model_validate(section)
    except ValidationError as exc:
        raise CommandError(f"the daemon's service classes are not ones this syshax reads: "
                           f"{exc.errors()[0]['msg']}") from None
    raw = {name: c.model_dump(mode="json", by_alias=True) for name, c in levels.classes.items()}
    return ClassTable(levels.levels(), levels.default_class, raw)


def level_of(record: RequestRecordModel, table: ClassTable) -> ServiceLevel:
    """The class ``record`` is replayed in: the table's, at the targets the record carries."""
    name = record.service_class or table.default
    level = table.levels.get(name) or ServiceLevel(name)
    if record.ttft_target is not None:
        level = replace(level, ttft=record.ttft_target)
    if record.tpot_target is not None:
        level = replace(level, tpot=record.tpot_target, deadline=None)
    return level


def replayed(level: ServiceLevel, speed: float, cpu: bool | None) -> ServiceLevel:
    """``level`` on the engines' clock (targets times ``speed``), with the CPU allowed or not
    (None: as the table has it)."""
    return replace(level, ttft=None if level.ttft is None else level.ttft * speed,
                   tpot=None if level.tpot is None else level.tpot * speed,
                   deadline=None if level.deadline is None else level.deadline * speed,
                   cpu=level.cpu if cpu is None else cpu)


def targets_of(names: Sequence[str], targets: Sequence[tuple[float | None, float | None]],
               table: ClassTable) -> dict[str, AdviceClassTargets]:
    """Each class of the window with its requests' most common targets, its priority and CPU flag.

    Args:
        names: each request's class; targets: each request's (TTFT, TPOT) targets, seconds.
    """
    out = {}
    for name in sorted(set(names)):
        common = Counter(t for n, t in zip(names, targets, strict=True) if n == name).most_common(1)[0][0]
        level = table.levels.get(name, ServiceLevel(name))
        out[name] = AdviceClassTargets(ttft=common[0], tpot=common[1], priority=level.priority, cpu=level.cpu)
    return out
