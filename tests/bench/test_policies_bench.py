"""The scheduling benchmark: workloads, metrics, the virtual-time conductor, the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench import _workloads
from bench._docs import file_slug
from bench._measure import Outcome, quantile, summarise
from bench._run import RunSpec, execute
from bench._workloads import Request, Source, WorkloadError, requests_at
from tests.shared import shared

ROOT = Path(__file__).resolve().parents[2]


def _source(n: int = 50, gaps: bool = True) -> Source:
    return Source("t", tuple(float(1 + i % 3) for i in range(n - 1)) if gaps else (),
                  tuple((100 + i, 10 + i) for i in range(n)), "test")


# -- workloads ---------------------------------------------------------------------------

def test_trace_window_is_rescaled_to_the_requested_mean_rate() -> None:
    reqs = requests_at(_source(), rate=4.0, count=21, seed=3)
    assert len(reqs) == 21
    assert math.isclose((len(reqs) - 1) / reqs[-1].arrival, 4.0)
    assert all(b.arrival >= a.arrival for a, b in zip(reqs, reqs[1:], strict=False))


def test_same_seed_same_requests_other_rate_same_lengths() -> None:
    a, b = requests_at(_source(), 2.0, 10, 7), requests_at(_source(), 2.0, 10, 7)
    c = requests_at(_source(), 5.0, 10, 7)
    assert a == b
    assert [(r.prompt_tokens, r.output_tokens) for r in a] == [(r.prompt_tokens, r.output_tokens) for r in c]
    assert c[-1].arrival < a[-1].arrival


def test_poisson_arrivals_without_timestamps() -> None:
    reqs = requests_at(_source(gaps=False), rate=10.0, count=2000, seed=1)
    assert 8.5 < (len(reqs) - 1) / reqs[-1].arrival < 11.5


def test_lengths_are_cut_to_the_context_keeping_the_output() -> None:
    src = _workloads.reasoning(Source("t", (1.0,), ((8000, 500), (10, 20)), "x"), scale=10)
    (p1, o1), (p2, o2) = src.lengths
    assert o1 == 5000 and p1 + o1 <= _workloads.CONTEXT_LIMIT
    assert (p2, o2) == (10, 200)


def test_missing_trace_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="--traces"):
        _workloads.load("azure-conv", tmp_path / "nowhere")


def test_malformed_trace_names_file_and_line(tmp_path: Path) -> None:
    target = tmp_path / _workloads.AZURE_FILE
    target.parent.mkdir(parents=True)
    target.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,10,5\n2023-11-16 18:15:47.1,ten,5\n")
    with pytest.raises(WorkloadError, match=r"Trace_conv.csv:3: column 'ContextTokens'"):
        _workloads.load("azure-conv", tmp_path)


# -- metrics -----------------------------------------------------------------------------

def test_goodput_counts_only_requests_within_both_targets() -> None:
    outcomes = [
        Outcome(0.0, 10, 11, ttft=1.0, e2e=2.0),  # tpot 0.1: meets
        Outcome(1.0, 10, 11, ttft=6.0, e2e=7.0),  # ttft too long
        Outcome(2.0, 10, 11, ttft=1.0, e2e=4.0),  # tpot 0.3: too slow
        Outcome(3.0, 10, 0, ttft=None, e2e=None),  # never finished
    ]
    s = summarise(outcomes, offered_rate=2.0, ttft_target=5.0, tpot_target=0.2, gpu_busy=1.0, cpu_busy=0.0)
    assert s.attainment == 0.25
    assert s.goodput == 0.5
    assert s.completed == 3
    assert s.ttft_p99 is None  # one request never got a token: the tail is infinite


def test_quantile_nearest_rank() -> None:
    assert quantile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0
    assert quantile(list(range(1, 101)), 0.99) == 99
    assert quantile([1.0, math.inf], 0.99) == math.inf


# -- the virtual-time conductor ----------------------------------------------------------

def _burst(n: int, prompt: int = 64, out: int = 16, gap: float = 0.01) -> list[Request]:
    return [Request(i * gap, prompt, out) for i in range(n)]


@pytest.mark.parametrize("policy", ["gpu-only", "classic", "adaptive", "round-robin"])
def test_every_request_ends_and_tokens_add_up(policy: str) -> None:
    spec = RunSpec("tiny", "tiny", policy, ttft_target=5.0, tpot_target=0.2, handoff="syshax")
    reqs = _burst(40)
    result = execute(spec, reqs)
    assert len(result.outcomes) == len(reqs)
    for o, r in zip(result.outcomes, reqs, strict=True):
        if o.e2e is not None:
            assert o.output_tokens == r.output_tokens
            assert o.ttft is not None and 0 < o.ttft <= o.e2e
    assert sum(result.decisions.get(k, 0) for k in ("gpu", "cpu", "pd_split")) >= sum(
        o.e2e is not None for o in result.outcomes)


def test_gpu_only_never_touches_the_cpu() -> None:
    result = execute(RunSpec("tiny", "tiny", "gpu-only", 5.0, 0.2, "syshax"), _burst(20))
    assert result.cpu_busy == 0.0
    assert all(o.cpu_tokens == 0 and o.route == "gpu" for o in result.outcomes)


def test_round_robin_alternates_devices() -> None:
    result = execute(RunSpec("tiny", "tiny", "round-robin", 5.0, 0.2, "syshax"), _burst(10, gap=1.0))
    assert [o.route for o in result.outcomes] == ["gpu", "cpu"] * 5
    assert all(o.cpu_tokens == o.output_tokens for o in result.outcomes if o.route == "cpu")


# -- the script --------------------------------------------------------------------------

def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "bench" / "policies.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.timeout(300)
def test_same_seed_gives_identical_json(tmp_path: Path) -> None:
    outs = []
    for name in ("a.json", "b.json"):
        done = _run("--quick", "--traces", str(shared("traces")), "--workloads", "azure-conv",
                    "--requests", "30", "--jobs", "1", "--out", str(tmp_path / name))
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        outs.append((tmp_path / name).read_text())
    assert outs[0] == outs[1]
    report = json.loads(outs[0])
    block = report["workloads"]["azure-conv"]["scenarios"]["a100-80g+q4"]
    assert {r["policy"] for r in block["runs"]} == {"gpu-only", "gpu-held", "round-robin", "classic", "adaptive"}
    held = [r for r in block["runs"] if r["policy"] == "gpu-held"]
    assert all(r["cpu_request_share"] == 0 and r["cpu_util"] == 0 for r in held)  # the CPU switched off
    assert block["ceiling"] >= block["gpu_alone_goodput"] > 0
    assert len(block["targets"]) == 4


@pytest.mark.timeout(300)
def test_docs_are_written_with_plots(tmp_path: Path) -> None:
    doc = tmp_path / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    doc.write_text("# Benchmarks\n\nprose stays\n\n<!-- BEGIN GENERATED by bench/policies.py: do not edit by hand -->\nold\n"
                   "<!-- END GENERATED -->\n\ntail stays\n")
    done = _run("--quick", "--traces", str(shared("traces")), "--workloads", "azure-conv",
                "--requests", "20", "--out", str(tmp_path / "r.json"), "--docs", str(doc))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    text = doc.read_text()
    assert "prose stays" in text and "tail stays" in text and "\nold\n" not in text
    assert "| adaptive goodput >= classic at every rate |" in text
    assert "### What holding back adds, and what the CPU adds" in text and "inf s vs inf s" not in text
    assert (doc.parent / "bench-goodput-azure-conv.png").stat().st_size > 1000

    again = tmp_path / "again" / "benchmarks.md"
    done = _run("--render", str(tmp_path / "r.json"), "--docs", str(again))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    def generated(md: str) -> str:
        return md.split("by hand -->", 1)[1].split("<!-- END GENERATED -->", 1)[0]

    assert generated(again.read_text()) == generated(text)


def test_missing_traces_is_a_message_not_a_traceback(tmp_path: Path) -> None:
    done = _run("--quick", "--traces", str(tmp_path / "nope"), "--out", str(tmp_path / "r.json"))
    assert done.returncode == 2
    assert "--traces" in done.stdout and "Traceback" not in done.stdout + done.stderr


def test_render_of_a_broken_report_is_a_message(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    done = _run("--render", str(bad))
    assert done.returncode == 2
    assert "cannot use" in done.stdout and "Traceback" not in done.stderr


def test_unknown_scenario_is_refused_with_the_choices(tmp_path: Path) -> None:
    done = _run("--quick", "--scenarios", "h100", "--out", str(tmp_path / "r.json"))
    assert done.returncode == 2
    assert "a100-80g+q4" in done.stdout and "Traceback" not in done.stderr


# -- target checks -------------------------------------------------------------------------

def _report(goodput: dict[str, list[float]], ttft_top: dict[str, float | None], attain_gpu: list[float],
            lost_top: dict[str, int] | None = None) -> dict[str, object]:
    factors = [0.5, 1.0, 2.0]
    runs = []
    for policy, values in goodput.items():
        for i, (f, g) in enumerate(zip(factors, values, strict=True)):
            lost = (lost_top or {}).get(policy, 0) if f == 2.0 else 0
            runs.append({"policy": policy, "rate_factor": f, "offered_rate": f, "goodput": g, "ceiling_fraction": g / 2.0,
                         "attainment": attain_gpu[i] if policy == "gpu-only" else 1.0,
                         "ttft_p99": None if lost else 1.0, "ttft_p99_finished": ttft_top.get(policy) if f == 2.0 else 1.0,
                         "requests": 100, "completed": 100 - lost, "rejected": lost, "timed_out": 0})
    return {"config": {"policies": list(goodput), "sweep": factors},
            "workloads": {"azure-conv": {"scenarios": {"s": {"runs": runs, "ceiling": 2.0, "capacity": 1.0}}}}}


def test_targets_met_and_missed_are_told_apart() -> None:
    from bench._report import check_targets

    good = _report({"gpu-only": [0.5, 0.9, 0.3], "classic": [0.5, 0.8, 0.2], "adaptive": [0.5, 1.9, 0.4]},
                   {"classic": 20.0, "adaptive": 10.0}, [1.0, 0.95, 0.2])
    assert [c.met for c in check_targets(good, "azure-conv", "s")] == [True, True, True, True]

    bad = _report({"gpu-only": [0.5, 0.9, 0.3], "classic": [0.5, 1.0, 0.2], "adaptive": [0.5, 0.95, 0.25]},
                  {"classic": 10.0, "adaptive": 8.0}, [1.0, 0.95, 0.2])
    checks = check_targets(bad, "azure-conv", "s")
    assert [c.met for c in checks] == [False, False, False, False]
    assert "1x" in checks[0].measured and "2x" in checks[1].measured  # where the worst gap is
    assert "20% lower" in checks[3].measured


def test_the_tail_target_is_decided_when_both_policies_leave_requests_unfinished() -> None:
    from bench._report import check_targets

    # both lose requests at the top of the sweep (a P99 over every request is inf for both)
    cut = _report({"gpu-only": [1, 1, 1], "classic": [1, 1, 1], "adaptive": [1, 1, 1]},
                  {"classic": 50.0, "adaptive": 20.0}, [1.0, 1.0, 1.0], {"classic": 12, "adaptive": 7})
    tail = check_targets(cut, "azure-conv", "s")[3]
    assert tail.met and "inf" not in tail.measured
    assert tail.measured == "20.0 s vs 50.0 s: 60% lower (never finished: adaptive 7, classic 12 of 100)"

    # the same cut bought by leaving more requests unfinished is no cut
    shed = _report({"gpu-only": [1, 1, 1], "classic": [1, 1, 1], "adaptive": [1, 1, 1]},
                   {"classic": 50.0, "adaptive": 20.0}, [1.0, 1.0, 1.0], {"classic": 7, "adaptive": 12})
    assert not check_targets(shed, "azure-conv", "s")[3].met


def test_holding_back_and_the_cpu_are_told_apart_in_words() -> None:
    from bench._findings import split_sentences, split_table

    report = _report({"gpu-only": [0.5, 0.9, 0.3], "gpu-held": [0.5, 1.0, 1.2], "classic": [0.5, 0.8, 0.2],
                      "adaptive": [0.5, 1.1, 1.26]}, {}, [1.0, 0.95, 0.2])
    table = split_table(report)
    assert "| azure-conv | s | 0.9 at 1x | 1.2 at 2x | 1.26 at 2x | +33% | +5% |" in table
    words = "\n".join(split_sentences(report))
    assert "holding back adds 33%" in words and "the CPU adds 5%" in words
    assert "(gpu-held, at 2x, the top of the sweep)" in words  # a peak that may lie beyond the sweep
    assert "At 2x the three serve 0.3/1.2/1.26 req/s" in words


def test_reasoning_runs_replay_half_the_requests() -> None:
    assert _workloads.run_size("azure-reasoning", 1000) == 500
    assert _workloads.run_size("azure-conv", 1000) == 1000


def test_a_trace_file_workload_gets_plot_names_without_its_path() -> None:
    assert file_slug("mooncake:traces/tool agent.jsonl") == "mooncake-tool-agent"
    assert file_slug("azure-conv") == "azure-conv"
