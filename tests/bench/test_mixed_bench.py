"""The mixed-traffic benchmark: the workloads, the overload rule, the CLI and its docs section."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import _mixed, _workloads
from bench._mixed_plan import overload, reported
from tests.shared import shared

ROOT = Path(__file__).resolve().parents[2]
PLAN = {"ttft_target": 5.0}


def test_a_mixed_workload_carries_each_stream_in_its_class_at_its_share_of_the_rate() -> None:
    traces = shared("traces")
    azure, arxiv = _workloads.load("azure-conv", traces), _workloads.load("arxiv", traces)
    reqs = _mixed.mixed_requests("mixed-20", azure, arxiv, rate=4.0, count=500, seed=2)
    batch = [r for r in reqs if r.level.name == "batch"]
    interactive = [r for r in reqs if r.level.name == "interactive"]
    assert (len(batch), len(interactive)) == (100, 400)
    assert all(b.arrival >= a.arrival for a, b in zip(reqs, reqs[1:], strict=False))
    assert batch[0].level.ttft == 60.0 and batch[0].level.tpot == 1.0 and batch[0].level.priority == 1
    assert interactive[0].level.ttft is None and interactive[0].level.priority == 0  # the decider's targets
    # both streams span about the same window: each arrives at its share of the rate
    assert 0.7 < batch[-1].arrival / interactive[-1].arrival < 1.4
    # arXiv prompts are long: the batch stream is not the conversation trace
    assert sum(r.prompt_tokens for r in batch) / len(batch) > 2 * sum(r.prompt_tokens for r in interactive) / len(interactive)
    alone = _mixed.mixed_requests("mixed-20/batch", azure, arxiv, rate=1.0, count=50, seed=2)
    assert len(alone) == 50 and {r.level.name for r in alone} == {"batch"}


def _gpu_only(factor: float, requests: int, interactive: float, batch: float) -> dict[str, object]:
    return {"policy": "gpu-only", "rate_factor": factor, "offered_rate": factor, "requests": requests,
            "by_class": {"interactive": {"goodput": interactive}, "batch": {"goodput": batch}}}


def test_points_past_capacity_are_refused_for_a_class_whose_overload_the_runs_cannot_show() -> None:
    # windows of 100 s: at 2x the backlog reaches 50 s, past interactive's 5 s, short of batch's 60 s
    runs = [_gpu_only(f, int(100 * f), i, b) for f, i, b in ((0.5, 0.5, 0.5), (1.0, 1.0, 1.0), (2.0, 0.4, 2.0))]
    seen = overload(PLAN, runs)
    assert seen["interactive"]["seen"] and not seen["batch"]["seen"]
    assert reported(seen, 2.0, "interactive") and not reported(seen, 2.0, "batch") and not reported(seen, 2.0)
    assert reported(seen, 1.0)  # up to capacity every point is reported


def test_a_falling_goodput_in_a_window_too_short_for_the_target_is_still_refused() -> None:
    runs = [_gpu_only(f, int(100 * f), 1.0, b) for f, b in ((1.0, 1.0), (1.5, 0.5), (2.0, 0.4))]
    seen = overload(PLAN, runs)
    assert seen["batch"]["seen"]  # it falls ...
    assert not reported(seen, 1.5, "batch") and not reported(seen, 2.0, "batch")  # ... but 100 s cannot show 60 s
    long = overload(PLAN, [_gpu_only(f, int(400 * f), 1.0, b) for f, b in ((1.0, 1.0), (1.5, 0.5), (2.0, 0.4))])
    assert reported(long, 1.5, "batch") and reported(long, 2.0, "batch")


@pytest.mark.timeout(300)
def test_mixed_quick_run_reports_goodput_per_class_and_writes_its_section(tmp_path: Path) -> None:
    doc = tmp_path / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    doc.write_text("# Benchmarks\n\nprose stays\n")
    out = tmp_path / "m.json"
    done = subprocess.run([sys.executable, "bench/policies.py", "--mixed", "--quick", "--traces", str(shared("traces")),
                           "--requests", "40", "--jobs", "1", "--out", str(out), "--docs", str(doc)],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    block = report["workloads"]["mixed-50"]["scenarios"]["a100-80g+q4"]
    assert {r["policy"] for r in block["runs"]} == {"adaptive", "gpu-priority", "gpu-held", "gpu-only", "classic"}
    for r in block["runs"]:
        assert set(r["by_class"]) == {"interactive", "batch"}
        assert sum(c["requests"] for c in r["by_class"].values()) == r["requests"]
        assert abs(sum(c["goodput"] for c in r["by_class"].values()) - r["goodput"]) < 1e-9
    assert set(block["by_class"]) == {"interactive", "batch"} and block["ceiling"] >= block["gpu_alone_goodput"] > 0
    assert [c["name"].split(":")[0] for c in block["checks"]] == ["interactive goodput", "total goodput >= 90% of the "
                                                                 "ceiling where gpu-only saturates"]
    text = doc.read_text()
    assert "prose stays" in text and "## Mixed traffic" in text and "| a100-80g+q4 |" in text
    assert (doc.parent / "bench-mixed-mixed-50.png").stat().st_size > 1000
    # 40 requests at 2x last seconds: no point past capacity can show batch's 60 s target missed
    assert "not shown" in text
