"""adaptive under KV pressure: past ``kv_pressure`` of the GPU's cache, what the CPU serves clearly goes there."""

from __future__ import annotations

from dataclasses import replace

from syshaxd.policy import adaptive
from syshaxd.policy.adaptive import decide
from syshaxd.policy.estimates import DEFAULT_TUNING
from syshaxd.routing import Limits, Mode, RequestFeatures
from syshaxd.snapshot import EngineView
from tests.policy.helpers import engine, snap, with_capacity

SHORT = RequestFeatures(prompt_tokens=50, max_tokens=100)
CAPACITY = 20_000


def _gpu(kv: float, running: int = 10, tpot: float = 0.04) -> EngineView:
    """A GPU of ``running`` requests with 200 output tokens each to go and a known KV capacity."""
    view = engine("gpu0", "gpu", running=running, kv=kv, tpot=tpot, tpot_batch=running, decode_tokens=running * 200)
    return with_capacity(view, CAPACITY)


def _cpu(tpot: float | None = 0.06) -> EngineView:
    """A CPU decoding one request; ``tpot`` None: nothing measured yet (the defaults stand)."""
    return engine("cpu0", "cpu", running=1, tpot=tpot, tpot_batch=1 if tpot else None, prefill_tps=2000.0)


def test_under_kv_pressure_a_request_the_cpu_serves_clearly_moves_there() -> None:
    # 75% of the cache is in use: past the 70% pressure line, below the 95% guard, so the
    # GPU would still take the request and meet its targets.
    assert adaptive(snap(_gpu(0.75)), SHORT, Limits()).device == "gpu"
    d = adaptive(snap(_gpu(0.75), _cpu()), SHORT, Limits())
    assert (d.device, d.mode) == ("cpu", Mode.WHOLE), d.reason
    assert "gpu KV cache would hold 15050 of 20000 tokens, kept for what only the gpu serves" in d.reason


def test_without_pressure_the_gpu_keeps_what_it_serves() -> None:
    d = adaptive(snap(_gpu(0.5), _cpu()), SHORT, Limits())
    assert d.device == "gpu", d.reason
    # The line is a tuning knob: raised above the usage, the same request stays.
    high = replace(DEFAULT_TUNING, kv_pressure=0.8)
    assert decide(snap(_gpu(0.75), _cpu()), SHORT, Limits(), high).device == "gpu"


def test_pressure_moves_nothing_to_a_cpu_it_has_not_measured() -> None:
    # The CPU defaults are one CPU's guess (a Kunpeng 920 q8 decodes at twice their TPOT).
    d = adaptive(snap(_gpu(0.75), _cpu(tpot=None)), SHORT, Limits())
    assert d.device == "gpu", d.reason


def test_pressure_moves_only_what_meets_the_targets_by_the_margin() -> None:
    # ~175 ms per token on the CPU meets the 200 ms target, but not by the 20% margin.
    d = adaptive(snap(_gpu(0.75), _cpu(tpot=0.17)), SHORT, Limits())
    assert d.device == "gpu", d.reason
    assert adaptive(snap(_gpu(0.75), _cpu(tpot=0.17)), SHORT, Limits(tpot_target=0.3)).device == "cpu"


def test_a_late_request_takes_the_gpu_only_below_the_pressure_line() -> None:
    # Two decoding, fast: the batch has TPOT slack. What decides is the KV cache: the late
    # request's whole answer (1,000 + 200 tokens) beside the in-flight ones must stay under
    # 70% of the cache, not just under the 95% guard an on-time request is held to.
    late = RequestFeatures(prompt_tokens=1000, max_tokens=200, waited=6.0)

    def gpu(kv: float) -> EngineView:
        return _gpu(kv, running=2, tpot=0.03)

    assert adaptive(snap(gpu(0.5)), late, Limits()).device == "gpu"  # 11,400 of 20,000
    held = adaptive(snap(gpu(0.7)), late, Limits())  # 15,400: under 95%, over 70%
    assert held.device is None
    assert held.reason.startswith("hold: waited 6.0s, past the TTFT target") and "15400 of 20000 KV tokens" in held.reason
    # An on-time request with the same cache is admitted: the line is for late work only.
    assert adaptive(snap(gpu(0.7)), replace(late, waited=0.0), Limits()).device == "gpu"
