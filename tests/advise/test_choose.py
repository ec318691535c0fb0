"""Pure parts of advise: records to a trace, the grid, the engines' profiles, the recommendation."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from sim.advise.check import errors
from sim.advise.choose import choose
from sim.advise.daemon import EngineFacts, box_of
from sim.advise.options import Setting, base_limits, current_setting, grid
from sim.advise.predict import Prediction
from sim.advise.window import Measured, window_of
from syshaxd.cli import UsageError
from syshaxd.schema import DecisionModel, RequestRecordModel

CLASSIC = Setting("classic", None, 20, False)


def _measured(goodput: float) -> Measured:
    return Measured(requests=100, completed=100, span=50.0, goodput=goodput, throughput=goodput, output_tps=0.0,
                    ttft_p50=0.1, ttft_p99=0.5, tpot_p99=0.05, cpu_share=0.0)


def _predictions(*pairs: tuple[Setting, float]) -> list[Prediction]:
    return [Prediction(s, _measured(g), {}) for s, g in pairs]


def test_the_cpu_cannot_help_when_no_cpu_setting_beats_gpu_only_by_more_than_noise() -> None:
    # 5% of 4.0 is 0.2: classic at 4.15 is noise.
    preds = _predictions((Setting("gpu-only"), 4.0), (CLASSIC, 4.15), (Setting("adaptive", None, 20, True), 3.0))
    choice = choose(preds, CLASSIC, span=50.0)
    assert choice.index == 0 and not choice.cpu_helps
    assert choice.summary.startswith("The CPU cannot help this traffic")


def test_a_tie_goes_to_the_current_setting_then_to_the_simplest() -> None:
    adaptive = Setting("adaptive", None, 20, False)
    preds = _predictions((Setting("gpu-only"), 2.0), (Setting("classic", None, 10, True), 6.0), (CLASSIC, 5.9),
                         (adaptive, 6.1))
    assert choose(preds, adaptive, span=50.0).index == 3  # current, within noise of the best
    assert choose(preds, Setting("gpu-only"), span=50.0).index == 2  # simplest of the tied: classic, auto-PD off
    clear = _predictions((Setting("gpu-only"), 2.0), (CLASSIC, 3.0), (adaptive, 6.0))
    choice = choose(clear, CLASSIC, span=50.0)
    assert choice.index == 2 and choice.cpu_helps


def test_errors_are_relative_to_what_happened() -> None:
    got = errors(_measured(4.4), _measured(4.0))
    assert abs(got["throughput"] - 0.1) < 1e-9 and got["ttft_p50"] == 0.0


def _record(i: int, arrival: float, output: int | None, outcome: str = "ok") -> RequestRecordModel:
    decision = DecisionModel(time=arrival, request_id=str(i), device="cpu" if i % 2 else "gpu", mode="whole",
                             reason="r", policy="classic")
    return RequestRecordModel(request_id=str(i), arrival=arrival, kind="completion", stream=True, prompt_tokens=100 + i,
                              max_tokens=30, output_tokens=output, outcome=outcome, decision=decision,
                              limits={"cpu_max_batch_size": 12, "handoff": "recompute"}, ttft=0.2, e2e=1.0)


def test_records_become_a_trace_in_arrival_order_with_the_tokens_really_produced() -> None:
    win = window_of([_record(2, 1002.5, None, "error"), _record(1, 1000.0, 17)])
    assert [(r.arrival, r.prompt_tokens, r.output_tokens) for r in win.trace] == [(0.0, 101, 17), (2.5, 102, 30)]
    assert win.policy == "classic" and win.limits["cpu_max_batch_size"] == 12
    assert [o.ok for o in win.outcomes] == [True, False] and win.outcomes[0].cpu


def test_the_grid_is_small_and_holds_the_current_setting() -> None:
    limits = base_limits({"cpu_max_batch_size": 12, "auto_pd_offload": True, "unknown": 1})
    current = current_setting("round-robin", limits)
    options = grid(current, limits, gpu_slots=8)
    assert options[0] == Setting("gpu-only") and options[-1] == current
    assert len(options) == 16 and len(set(options)) == 16
    assert {o.gpu_max_batch_size for o in options if o.policy == "adaptive"} == {None, 8}
    assert {o.cpu_max_batch_size for o in options if o.policy == "classic"} == {6, 12, 24}


def test_profiles_come_from_the_simulators_or_from_files_and_a_real_engine_needs_one(tmp_path: Path) -> None:
    sims = [EngineFacts("gpu0", "gpu", "tiny", 0.25), EngineFacts("cpu0", "cpu", "tiny", 0.25)]
    box, used = box_of(sims, None, None, None)
    assert box.speed == 0.25 and used == {"gpu": "tiny", "cpu": "tiny"} and box.gpu_slots() == 8
    # A calibrated file: the loader ignores its calibration section.
    text = resources.files("sim").joinpath("profiles/tiny.yaml").read_text(encoding="utf-8")
    calibrated = tmp_path / "fitted.yaml"
    calibrated.write_text(text + "calibration:\n  measured_at: now\n", encoding="utf-8")
    real = [EngineFacts("gpu0", "gpu", None, None), EngineFacts("cpu0", "cpu", "tiny", 1.0)]
    box, used = box_of(real, str(calibrated), None, None)
    assert used == {"gpu": str(calibrated), "cpu": "tiny"} and box.speed == 1.0
    with pytest.raises(UsageError, match="--gpu-profile"):
        box_of(real, None, None, None)
