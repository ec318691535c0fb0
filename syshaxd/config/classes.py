"""Service classes: the table of classes a request may run in, and the rules that pick one.

A class has its own targets (time to first token; time per output token, or instead a
deadline for the whole answer), a priority (vLLM's convention: lower first), whether it may
be shed under saturation, and what happens when it can no longer meet its TTFT target while
waiting (served late, or refused at once). The shipped table: ``interactive`` (the default:
the decider's targets, so nothing changes for who sets nothing), ``batch`` (first token
within a minute, a token a second) and ``sheddable`` (refused first, and when late).

A request names its class with the ``x-syshax-class`` header; otherwise the first rule
whose every condition holds picks it (model, max_tokens, stream, number of messages,
temperature, the API key that authenticated it); otherwise ``default_class``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from syshaxd.routing import ServiceLevel

#: Targets no engine reaches (a decode step is milliseconds on the fastest GPU, a first token
#: tens of them): a class asking for less is a mistake, refused at load and at ``syshax set``.
MIN_TTFT_MS = 10
MIN_TPOT_MS = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)


class ServiceClass(_Strict):
    """One class of service."""

    EXAMPLE: ClassVar[str] = "batch: {ttft_ms: 60000, tpot_ms: 1000, priority: 1}"

    ttft_ms: int | None = Field(default=None, ge=MIN_TTFT_MS, description="Time to the first token, ms "
                                "(null: decider.ttft_target)")
    tpot_ms: int | None = Field(default=None, ge=MIN_TPOT_MS, description="Time per output token after the "
                                "first, ms (null: decider.tpot_target, or the deadline's)")
    deadline_s: float | None = Field(default=None, gt=0, description="Seconds for the whole answer, for a class "
                                     "with no TPOT target")
    priority: int = Field(default=0, ge=-1000, le=1000, description="Lower first (vLLM's convention)")
    sheddable: bool = Field(default=False, description="Refused first when the box is saturated")
    late: Literal["serve", "refuse"] = Field(default="serve", description="A waiting request that can no longer "
                                             "meet its TTFT target: served late, or refused at once")

    @model_validator(mode="after")
    def _one_way_to_pace(self) -> ServiceClass:
        if self.tpot_ms is not None and self.deadline_s is not None:
            raise ValueError("give tpot_ms or deadline_s, not both: a deadline is for a class without a TPOT target")
        if self.deadline_s is not None and self.ttft_ms is not None and self.deadline_s * 1000 <= self.ttft_ms:
            raise ValueError(f"deadline_s {self.deadline_s:g} leaves no time after the first token "
                             f"(ttft_ms {self.ttft_ms})")
        return self

    def level(self, name: str) -> ServiceLevel:
        """The class as the core and the policies see it (seconds)."""
        return ServiceLevel(name, ttft=None if self.ttft_ms is None else self.ttft_ms / 1000,
                            tpot=None if self.tpot_ms is None else self.tpot_ms / 1000, deadline=self.deadline_s,
                            priority=self.priority, sheddable=self.sheddable, late=self.late)


class ClassRule(_Strict):
    """Requests that match every condition given run in ``class``."""

    EXAMPLE: ClassVar[str] = "{class: batch, max_tokens_at_least: 2000}"

    class_: str = Field(alias="class", description="The class these requests run in")
    model: str | None = Field(default=None, description="Model name, a glob (e.g. 'eval-*')")
    max_tokens_at_least: int | None = Field(default=None, ge=0)
    max_tokens_below: int | None = Field(default=None, ge=1)
    stream: bool | None = None
    messages_at_least: int | None = Field(default=None, ge=0, description="Chat messages in the request")
    temperature_at_least: float | None = Field(default=None, ge=0)
    api_key: str | None = Field(default=None, description="The name of the API key that authenticated it "
                                "(services.conductor.api_keys; 'default' is services.conductor.api_key)")

    def matches(self, request: RequestFields) -> bool:
        """Whether every condition given holds for ``request``."""
        checks = (
            self.model is None or (request.model is not None and fnmatchcase(request.model, self.model)),
            self.max_tokens_at_least is None or request.max_tokens >= self.max_tokens_at_least,
            self.max_tokens_below is None or request.max_tokens < self.max_tokens_below,
            self.stream is None or request.stream == self.stream,
            self.messages_at_least is None or request.messages >= self.messages_at_least,
            self.temperature_at_least is None or (request.temperature is not None
                                                  and request.temperature >= self.temperature_at_least),
            self.api_key is None or request.api_key == self.api_key,
        )
        return all(checks)


def default_classes() -> dict[str, ServiceClass]:
    """The shipped table."""
    return {
        "interactive": ServiceClass(),
        "batch": ServiceClass(ttft_ms=60_000, tpot_ms=1_000, priority=1),
        "sheddable": ServiceClass(priority=2, sheddable=True, late="refuse"),
    }


class ServiceLevels(_Strict):
    """The ``service`` section: classes, rules, and how waiting work is ordered."""

    default_class: str = Field(default="interactive", description="The class of a request that names none and "
                               "matches no rule")
    classes: dict[str, ServiceClass] = Field(default_factory=default_classes,
                                             description="The classes by name: targets, priority, sheddable, late")
    rules: list[ClassRule] = Field(default_factory=list, description="Pick a class from request fields, first "
                                   "match wins: [{class, model, max_tokens_at_least, ...}]")
    promote_after_s: float = Field(default=60.0, gt=0, description="A request waiting this long is offered room "
                                   "ahead of every class (no starvation)")
    forward_priority: bool = Field(default=False, description="Send the class's priority to the engines as the "
                                   "body's 'priority' (vLLM with --scheduling-policy priority)")

    @model_validator(mode="after")
    def _names_exist(self) -> ServiceLevels:
        if not self.classes:
            raise ValueError("the class table is empty: at least the default class must be there")
        for name in self.classes:
            if not name or not all(c.isalnum() or c in "-_." for c in name):
                raise ValueError(f"class name {name!r}: letters, digits, '-', '_' and '.' only")
        if self.default_class not in self.classes:
            raise ValueError(f"default_class {self.default_class!r} is not in the table "
                             f"({', '.join(sorted(self.classes))})")
        for i, rule in enumerate(self.rules):
            if rule.class_ not in self.classes:
                raise ValueError(f"rule {i} names class {rule.class_!r}, which is not in the table "
                                 f"({', '.join(sorted(self.classes))})")
        return self

    def levels(self) -> dict[str, ServiceLevel]:
        """Every class as the core sees it, by name."""
        return {name: c.level(name) for name, c in self.classes.items()}


@dataclass(frozen=True)
class RequestFields:
    """What the rules may look at in a request."""

    model: str | None
    max_tokens: int
    stream: bool
    messages: int
    temperature: float | None
    api_key: str | None = None


def classify(levels: ServiceLevels, request: RequestFields) -> str:
    """The class of a request that named none: the first matching rule's, else the default."""
    for rule in levels.rules:
        if rule.matches(request):
            return rule.class_
    return levels.default_class


def reachable(levels: ServiceLevels, fastest_tpot: Mapping[str, float]) -> str | None:
    """Why some class asks for a TPOT no engine delivers (``fastest_tpot``: each engine's measured
    seconds per token on its own), or None when every class is within reach."""
    if not fastest_tpot:
        return None
    best_engine, best = min(fastest_tpot.items(), key=lambda kv: kv[1])
    for name, c in levels.classes.items():
        if c.tpot_ms is not None and c.tpot_ms / 1000 < best:
            return (f"class {name!r} asks for {c.tpot_ms} ms per token; the fastest engine ({best_engine}) "
                    f"decodes one request at {best * 1000:.0f} ms per token")
    return None
