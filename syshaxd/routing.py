"""The routing vocabulary: what a policy is asked (RequestFeatures, Limits) and answers (Decision).

Policies are pure functions ``(Snapshot, RequestFeatures, Limits) -> Decision`` of immutable
inputs, so the live conductor and the virtual-time simulator run exactly the same code.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from syshaxd.snapshot import Device, Snapshot

#: How a pd_split hands a request from the GPU to the CPU (``services.*.handoff``).
Handoff = Literal["syshax", "kv-transfer", "llamacpp-slots", "recompute"]


@dataclass(frozen=True)
class ServiceLevel:
    """A request's service class, as the core and the policies see it.

    Targets are seconds; None takes the decider's (``ttft_target``, ``tpot_target``). A class
    with a ``deadline`` and no TPOT target asks only that the whole answer be done in time.
    ``priority`` is vLLM's convention: lower first. ``cpu`` False keeps the class on the GPU
    (:mod:`syshaxd.policy.cpu_classes`).
    """

    name: str = "interactive"
    ttft: float | None = None  # to the first token
    tpot: float | None = None  # per output token after the first
    deadline: float | None = None  # for the whole answer (instead of a TPOT target)
    priority: int = 0
    sheddable: bool = False  # refused first when the box is saturated
    #: What happens to a waiting request that can no longer meet its TTFT target:
    #: ``serve`` (late, when there is room) or ``refuse`` (at once, with a reason).
    late: Literal["serve", "refuse"] = "serve"
    #: Whether the policy may place it on the CPU (whole, or its decode after a GPU prefill).
    cpu: bool = True


#: The class of a request that names none and matches no rule, when no table is configured.
DEFAULT_LEVEL = ServiceLevel()


class Mode(str, enum.Enum):
    """How a request runs."""

    WHOLE = "whole"  # prefill and decode on one device
    PD_SPLIT = "pd_split"  # prefill on the GPU, decode on the CPU


@dataclass(frozen=True)
class RequestFeatures:
    """What a policy may know about a request before it runs."""

    prompt_tokens: int  # estimate
    max_tokens: int
    stream: bool = True
    forced_mode: Mode | None = None  # /v1/chat/pd_disagg forces PD_SPLIT
    has_num_decode_tokens: bool = False  # sysHAX: such a request goes to the CPU
    generated_tokens: int = 0  # > 0 when the policy is asked again mid-request
    request_id: str = ""
    #: Seconds the request has waited for a route so far (the conductor's queue); a request
    #: that waited past the TTFT target can no longer meet it anywhere.
    waited: float = 0.0
    #: Its service class (targets, priority, whether it may be shed).
    level: ServiceLevel = DEFAULT_LEVEL
    #: Choices asked for (the body's ``n``): the engine runs that many sequences, each up to
    #: ``max_tokens``, over one prompt (vLLM shares it through its prefix cache).
    n: int = 1


@dataclass(frozen=True)
class Limits:
    """The decider's runtime settings, as a policy sees them."""

    max_num_seqs: int = 16
    gpu_max_batch_size: int | None = None
    cpu_max_batch_size: int = 20
    gpu_cache_threshold: float = 90.0  # percent
    cpu_throughput_threshold: float = 2.0  # tokens/s
    token_limit_multiplier: float = 10.0
    token_limit_min: int = 50
    token_limit_max: int = 1000
    auto_pd_offload: bool = False
    ttft_target: float = 5.0  # seconds
    tpot_target: float = 0.2  # seconds
    # How a pd_split hands the request over (services.*.handoff): with "recompute" the CPU
    # pays its own prefill of the prompt, which the adaptive policy must count.
    handoff: Handoff = "recompute"


@dataclass(frozen=True)
class Decision:
    """Where a request runs, and why.

    ``device is None`` means no capacity: the request waits in the admission queue.
    ``token_limit`` (CPU decisions) is how many tokens the CPU generates before the
    policy is asked again; None means to the end.
    """

    device: Device | None
    mode: Mode
    token_limit: int | None
    reason: str
    engine: str | None = None  # a specific engine of the device; None = least loaded
    est_ttft: float | None = None  # seconds, when the policy estimated it
    est_e2e: float | None = None


Policy = Callable[[Snapshot, RequestFeatures, Limits], Decision]


def limits_for(limits: Limits, request: RequestFeatures) -> Limits:
    """The limits a policy applies to one request: the decider's, with its class's targets.

    A class with a whole-answer deadline and no TPOT target gets the TPOT that spreads what
    the deadline leaves after the first token over the answer's tokens.
    """
    level = request.level
    if level is DEFAULT_LEVEL or (level.ttft is None and level.tpot is None and level.deadline is None):
        return limits
    ttft = level.ttft if level.ttft is not None else limits.ttft_target
    tpot = level.tpot
    if tpot is None:
        tpot = ((level.deadline - ttft) / max(1, request.max_tokens - 1) if level.deadline is not None
                else limits.tpot_target)
    return replace(limits, ttft_target=ttft, tpot_target=max(tpot, 1e-6))
