"""The whole measurement plan, run through the simulator's engine core in virtual time.

The calibration's own path from probes to constants (the plan, the decode windows, the
medians, the fit and the folding of per-request cost) on timings no machine's speed can
bend: each probe's requests go to an ``EngineCore`` of the profile, and their tokens are
timed on its virtual clock as a client would time the stream. What the profile holds must
come back. (Against a live engine over HTTP the same figure is a measurement, judged on a
quiet machine by ``python bench/accuracy.py``'s baseline.)
"""

from __future__ import annotations

import pytest

from bench._accuracy_recovery import VISIBLE, terms
from sim.calibrate.calibrate import fold_api_overhead
from sim.calibrate.engine_info import EngineFacts
from sim.calibrate.fit import constants_of, fit
from sim.calibrate.measure import Measurements, Probe, make_plan
from sim.calibrate.probe import Timing
from sim.core import EngineCore, SimRequest
from sim.profile import Profile, load_profile


def _facts(p: Profile) -> EngineFacts:
    """What the engine's API would say about itself."""
    return EngineFacts(url="virtual://", dialect="vllm-v1", model=p.name, max_model_len=p.max_model_len,
                       max_num_seqs=p.max_num_seqs, kv_capacity_tokens=p.kv_capacity_tokens)


def _run(p: Profile, probe: Probe, round_: int) -> list[Timing]:
    """One probe's batch, sent together to an idle engine; each stream timed token by token."""
    core = EngineCore(p)
    seqs = [core.submit(SimRequest(f"r{round_}-{i}", probe.prompt, probe.tokens), at=0.0) for i in range(probe.batch)]
    times: dict[str, list[float]] = {s.rid: [] for s in seqs}
    while core.has_work():
        step = core.step()
        assert step is not None
        for seq, n in step.tokens:
            times[seq.rid] += [step.end] * n
    return [Timing(prompt_tokens=probe.prompt, output_tokens=len(t), ttft=t[0], end=t[-1], sent_at=0.0,
                   token_times=tuple(t)) for t in times.values()]


@pytest.mark.parametrize("profile", ["tiny", str(VISIBLE)], ids=["tiny", "visible"])
def test_the_plan_measured_in_virtual_time_gives_back_the_profiles_constants(profile: str) -> None:
    p = load_profile(profile)
    plan = make_plan(_facts(p), max_prompt=min(2048, p.max_num_batched_tokens), max_batch=min(16, p.max_num_seqs),
                     decode_tokens=32, rounds=2)
    measured = Measurements(started_at=0.0)
    for round_ in range(plan.rounds):
        for probe in (*plan.prefill, *plan.decode):
            measured.samples.setdefault(probe, []).append(_run(p, probe, round_))
    result = fold_api_overhead(fit(measured.prefill_points(), measured.decode_points()))
    found = terms(result.constants, constants_of(p), all_terms=True)
    report = ", ".join(f"{k} {g:.4g} (profile {w:.4g}, {g / w - 1:+.2%})" for k, (g, w) in found.items())
    for got, want in found.values():
        assert got == pytest.approx(want, rel=0.01), report
