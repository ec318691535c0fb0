"""advise with service classes: each recorded request replayed in its class at its own targets,
figures per option and class, and one sentence on which class the CPU should serve.

The two boxes of docs/benchmarks.md's "Mixed traffic": an L4 with a Xeon on the Qwen3 MoE (the
Xeon serves batch work within a minute to the first token and a second per token) and two
A100s with a Kunpeng 920 on a dense 32B (the Kunpeng adds nothing the GPU alone cannot do).
The windows are recorded by the runner (tests/advise/mixed.py) under adaptive.
"""

from __future__ import annotations

import pytest

from sim.advise import levels
from sim.advise.choose import Choice, choose
from sim.advise.options import GPU_ALONE, Setting
from sim.advise.predict import Prediction
from sim.advise.verdict import verdict
from sim.advise.window import Measured, Outcome, measure, measure_classes, window_of
from syshaxd.routing import Limits
from syshaxd.schema import (
    AdviceClass,
    AdviceClassTargets,
    AdviceModel,
    DecisionModel,
    RequestRecordModel,
)
from tests.advise.mixed import Box, advised, mixed, recorded

XEON = Box("gpu-l4-qwen3moe", "cpu-xeon-amx-qwen3moe")
KUNPENG = Box("gpu-a100", "cpu-kunpeng920-q4")
LIMITS = Limits(handoff="syshax")
TABLE = levels.class_table({})  # the shipped table: interactive (5 s, 200 ms), batch (60 s, 1 s, priority 1)


def _advice(box: Box, rate: float, count: int, batch_share: float, seed: int) -> AdviceModel:
    records = recorded(mixed(rate, count, batch_share, TABLE.levels, seed), box, "adaptive", LIMITS)
    return advised(records, box, TABLE, LIMITS).advice


@pytest.fixture(scope="module")
def xeon() -> AdviceModel:
    """200 requests at 0.8/s, 30% batch: past what the L4 alone serves within the targets."""
    return _advice(XEON, rate=0.8, count=200, batch_share=0.3, seed=2)


@pytest.fixture(scope="module")
def kunpeng() -> AdviceModel:
    """200 requests at 2/s, 30% batch: the A100s' capacity, the Kunpeng beside them."""
    return _advice(KUNPENG, rate=2.0, count=200, batch_share=0.3, seed=1)


def test_on_the_xeon_box_the_cpu_should_serve_batch_and_the_sentence_gives_its_figures(xeon: AdviceModel) -> None:
    assert xeon.cpu_classes == ["batch"]
    # Here the CPU adds as much taking interactive work instead: batch is named as the class that can wait.
    assert xeon.cpu_verdict.startswith("Serve batch on the CPU (it adds as much serving interactive instead, and "
                                       "batch is the class that can wait): ")
    assert xeon.cpu_verdict.count(". ") == 0 and xeon.cpu_verdict.endswith(".")  # one sentence
    pick = xeon.options[xeon.recommended or 0]
    batch, chat = pick.classes["batch"], pick.classes["interactive"]
    assert batch.cpu_share + batch.split_share >= 0.5  # most of batch ran on the CPU, whole or split
    assert batch.met == batch.requests and batch.ttft_p99 is not None and batch.ttft_p99 <= 60.0
    assert chat.gpu_share >= 0.9 and chat.met >= 0.95 * chat.requests  # the GPU kept interactive
    assert f"meets its targets on {batch.met} of {batch.requests} requests" in xeon.cpu_verdict
    assert "the GPU is left to interactive" in xeon.cpu_verdict and "of 60 s" in xeon.cpu_verdict
    gpu = max((o for o in xeon.options if o.settings["decider.policy"] in GPU_ALONE), key=lambda o: o.goodput)
    assert pick.goodput > 1.2 * gpu.goodput  # far past noise and advise's own error
    assert f"{(pick.goodput - gpu.goodput) / gpu.goodput:+.0%} over {gpu.label}" in xeon.cpu_verdict


def test_per_option_and_per_class_figures_add_up_and_say_where_each_class_ran(xeon: AdviceModel) -> None:
    assert set(xeon.classes) == {"interactive", "batch"}
    assert xeon.classes["batch"] == AdviceClassTargets(ttft=60.0, tpot=1.0, priority=1, cpu=True)
    assert xeon.classes["interactive"].ttft == 5.0 and xeon.classes["interactive"].priority == 0
    assert sum(c.requests for c in xeon.actual_classes.values()) == xeon.requests == 200
    for option in xeon.options:
        assert sum(c.requests for c in option.classes.values()) == 200, option.label
        assert sum(c.goodput for c in option.classes.values()) == pytest.approx(option.goodput), option.label
        for c in option.classes.values():
            assert c.met <= c.completed <= c.requests
            if c.completed:
                assert c.gpu_share + c.cpu_share + c.split_share == pytest.approx(1.0)
        if option.settings["decider.policy"] in GPU_ALONE:
            assert all(c.gpu_share == 1.0 for c in option.classes.values() if c.completed), option.label


def test_the_cpu_is_replayed_for_each_class_alone_and_a_class_kept_off_it_never_runs_there(
        xeon: AdviceModel) -> None:
    policies = {o.settings["decider.policy"] for o in xeon.options}
    assert {"gpu-only", "gpu-priority", "classic", "adaptive"} <= policies
    only = {o.label.rsplit("CPU for ", 1)[1]: o for o in xeon.options if "CPU for " in o.label}
    assert {"batch only", "interactive only"} <= set(only)
    batch_only, chat_only = only["batch only"], only["interactive only"]
    assert batch_only.classes["interactive"].cpu_share + batch_only.classes["interactive"].split_share == 0.0
    assert chat_only.classes["batch"].cpu_share + chat_only.classes["batch"].split_share == 0.0
    # What --apply would send: the whole class table, each class's cpu flag set.
    table = batch_only.settings["service.classes"]
    assert table["batch"]["cpu"] is True and table["interactive"]["cpu"] is False
    assert table["sheddable"] == {**TABLE.raw["sheddable"], "cpu": True}  # outside the window: as it was
    assert table["batch"]["ttft_ms"] == 60000


def test_on_the_kunpeng_box_the_cpu_should_serve_no_class_and_says_why(kunpeng: AdviceModel) -> None:
    assert kunpeng.cpu_classes == []
    assert kunpeng.cpu_verdict.startswith("The CPU should serve no class here: ")
    assert kunpeng.options[kunpeng.recommended or 0].settings["decider.policy"] in GPU_ALONE
    assert "on the GPU alone serves" in kunpeng.cpu_verdict
    assert "with batch on it" in kunpeng.cpu_verdict or "no replayed setting put batch on it" in kunpeng.cpu_verdict


def test_one_class_only_is_said_plainly() -> None:
    advice = _advice(XEON, rate=0.9, count=100, batch_share=0.0, seed=2)
    assert list(advice.classes) == ["interactive"]
    assert advice.cpu_verdict.startswith("All recorded traffic is interactive")
    assert advice.cpu_classes in (["interactive"], [])
    assert "gpu-priority" not in {o.settings["decider.policy"] for o in advice.options}


def _record(i: int, klass: str | None, ttft_target: float | None, tpot_target: float | None,
            outcome: str = "ok", device: str = "gpu", mode: str = "whole") -> RequestRecordModel:
    decision = None if outcome == "rejected" else DecisionModel(
        time=1000.0 + i, request_id=str(i), device=device, mode=mode, reason="r",  # type: ignore[arg-type]
        policy="adaptive")
    return RequestRecordModel(request_id=str(i), arrival=1000.0 + i, kind="chat", stream=True, prompt_tokens=100,
                              max_tokens=50, output_tokens=50, outcome=outcome, decision=decision,
                              limits={"ttft_target": ttft_target or 5.0, "tpot_target": tpot_target or 0.2,
                                      "cpu_max_batch_size": 20}, ttft=2.0, tpot=0.5, e2e=30.0,
                              service_class=klass, ttft_target=ttft_target, tpot_target=tpot_target)


def test_a_record_runs_in_its_class_of_the_live_table_at_the_targets_it_carries() -> None:
    table = levels.class_table({"service.classes": {"interactive": {}, "batch": {"ttft_ms": 60000, "tpot_ms": 1000,
                                                                                  "priority": 3, "cpu": False}},
                                "service.default_class": "interactive"})
    win = window_of([_record(0, "batch", 60.0, 1.0), _record(1, "batch", 30.0, 1.0),  # x-slo-ttft-ms: 30000
                     _record(2, None, None, None), _record(3, "gold", 10.0, 0.5)], table)
    batch, header, unnamed, gone = (r.level for r in win.trace)
    assert (batch.name, batch.priority, batch.cpu, batch.ttft, batch.tpot) == ("batch", 3, False, 60.0, 1.0)
    assert header.ttft == 30.0 and header.priority == 3  # the record's own target, the class's rules
    assert unnamed.name == "interactive" and unnamed.ttft is None  # an older daemon's record: the default
    assert (gone.name, gone.priority, gone.ttft) == ("gold", 0, 10.0) and win.unknown_classes == ("gold",)
    assert win.classes["batch"] == AdviceClassTargets(ttft=60.0, tpot=1.0, priority=3, cpu=False)
    # The classes' own targets in the records' limits are no change of setting.
    assert win.settings_seen == 1


def test_each_request_is_judged_at_its_own_targets_and_counted_in_its_class() -> None:
    def o(level: str, ttft: float, target: float, route: str = "gpu", ok: bool = True) -> Outcome:
        return Outcome(arrival=0.0, ok=ok, ttft=ttft if ok else None, tpot=0.5 if ok else None, e2e=10.0 if ok else None,
                       output_tokens=10, cpu=route in ("cpu", "split"), level=level, ttft_target=target,
                       tpot_target=1.0, route=route if ok else "", refused=not ok)

    outcomes = [o("interactive", 2.0, 5.0), o("interactive", 6.0, 5.0), o("batch", 20.0, 60.0, "split"),
                o("batch", 50.0, 60.0, "cpu"), o("batch", 0.0, 60.0, ok=False)]
    # At one 5 s target only one request would count; at their own, three do (tpot 0.5 s <= 1 s).
    assert measure(outcomes, 5.0, 0.2).goodput == pytest.approx(3 / 10.0)
    by = measure_classes(outcomes, 5.0, 0.2)
    assert by["interactive"] == AdviceClass(requests=2, completed=2, met=1, goodput=0.1, ttft_p99=6.0, refused=0,
                                            gpu_share=1.0)
    assert (by["batch"].met, by["batch"].refused, by["batch"].cpu_share, by["batch"].split_share) == (2, 1, 0.5, 0.5)


def _prediction(setting: Setting, goodput: float, chat_met: int, batch_met: int) -> Prediction:
    measured = Measured(requests=200, completed=200, span=100.0, goodput=goodput, throughput=2.0, output_tps=0.0,
                        ttft_p50=0.1, ttft_p99=30.0, tpot_p99=0.1, cpu_share=0.2)
    return Prediction(setting, measured, {}, {"interactive": AdviceClass(requests=150, completed=150, met=chat_met),
                                              "batch": AdviceClass(requests=50, completed=50, met=batch_met)})


def test_options_tied_on_goodput_are_told_apart_by_the_class_that_runs_first() -> None:
    adaptive = Setting("adaptive", None, 20, False)
    keeps_chat = Setting("classic", None, 20, True)
    preds = [_prediction(Setting("gpu-only"), 1.0, 100, 50), _prediction(adaptive, 1.80, 130, 50),
             _prediction(keeps_chat, 1.82, 148, 34)]
    targets = {"interactive": AdviceClassTargets(priority=0), "batch": AdviceClassTargets(priority=1)}
    assert choose(preds, adaptive, span=100.0).index == 1  # one class: the current setting wins the tie
    assert choose(preds, adaptive, span=100.0, classes=targets).index == 2  # interactive: 148 against 130


def _placed(setting: Setting, goodput: float, batch_on_cpu: float) -> Prediction:
    """All 150 interactive requests on the GPU within their targets, 50 batch ones of which a
    share ran on the CPU, all within theirs."""
    measured = Measured(requests=200, completed=200, span=100.0, goodput=goodput, throughput=2.0, output_tps=0.0,
                        ttft_p50=0.1, ttft_p99=30.0, tpot_p99=0.1, cpu_share=0.1)
    return Prediction(setting, measured, {}, {
        "interactive": AdviceClass(requests=150, completed=150, met=150, ttft_p99=1.0, gpu_share=1.0),
        "batch": AdviceClass(requests=50, completed=50, met=50, ttft_p99=12.0, gpu_share=1 - batch_on_cpu,
                             split_share=batch_on_cpu)})


@pytest.mark.parametrize(("chat_only", "says"), [
    (1.2, "Serve batch on the CPU: 80% of batch runs there"),  # only batch on the CPU makes the gain
    (1.99, "Serve batch on the CPU (it adds as much serving interactive instead, and batch is the class that can "
           "wait): 80% of batch runs there"),
])
def test_the_verdict_names_the_class_the_setting_cannot_do_without_else_the_one_that_can_wait(
        chat_only: float, says: str) -> None:
    adaptive = Setting("adaptive", None, 20, False)
    targets = {"interactive": AdviceClassTargets(ttft=5.0, tpot=0.2, priority=0),
               "batch": AdviceClassTargets(ttft=60.0, tpot=1.0, priority=1)}
    preds = [_placed(Setting("gpu-only"), 1.0, 0.0), _placed(Setting("gpu-priority"), 1.2, 0.0),
             _placed(adaptive, 2.0, 0.8),
             _placed(Setting("adaptive", None, 20, False, (("batch", True), ("interactive", False))), 2.0, 0.8),
             _placed(Setting("adaptive", None, 20, False, (("batch", False), ("interactive", True))), chat_only, 0.0)]
    served, sentence = verdict(preds, Choice(2, True, ""), targets, adaptive, span=100.0)
    assert served == ["batch"]
    assert sentence.startswith(says), sentence
    assert sentence.endswith("2.00 requests/s within their targets in all, +67% over gpu-priority, the best setting "
                             "on the GPU alone.")
