"""The accuracy benchmark's second stage: a calibrated profile against the real llama-server.

Calibrate the tiny model's llama-server (``-np 4 -c 4096 -t 1``, as the tests run it), then
send one workload live and through the simulator's engine core in virtual time with the
fitted profile (:mod:`sim.calibrate.workload`): TTFT p50, TPOT p50 and output tokens/s of
both sides. Each pair sees whatever load the machine had then; the medians over pairs are
what is judged.
"""

from __future__ import annotations

import asyncio
import random
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from demo.llama import find_build, start_server
from demo.procs import Supervisor
from sim.calibrate.calibrate import Options, calibrate
from sim.calibrate.workload import WorkloadSummary, run_live, simulate, summarise
from sim.traces import TraceRequest, poisson_arrivals

#: Every median error within this.
TOLERANCE = 0.20
N_CTX = 4096  # -c: with demo's -np 4, 1,024 tokens a slot, as the tests run it
MODEL_NAME = "tiny"
SETTLE = 2.0
Progress = Callable[[str, int, int], None]
Pair = tuple[WorkloadSummary, WorkloadSummary]  # (live, simulated)


def workload(seed: int, n: int = 24, rate: float = 8.0) -> list[TraceRequest]:
    """Poisson arrivals at ``rate``/s, prompts of 128-768 tokens, 32-96 output tokens."""
    rng = random.Random(seed)
    return [TraceRequest(t, rng.randint(128, 768), rng.randint(32, 96)) for t in poisson_arrivals(n, rate, seed=seed)]


def errors(live: WorkloadSummary, sim: WorkloadSummary) -> dict[str, float]:
    """The simulator's relative error on each figure (negative: the simulator is faster)."""
    return {"TTFT p50": sim.ttft_p50 / live.ttft_p50 - 1, "TPOT p50": sim.tpot_p50 / live.tpot_p50 - 1,
            "output tok/s": sim.output_tps / live.output_tps - 1}


def median_errors(pairs: Sequence[Pair]) -> dict[str, float]:
    """The median over pairs of each figure's error."""
    each = [errors(live, sim) for live, sim in pairs]
    return {name: statistics.median(e[name] for e in each) for name in each[0]}


def pair_line(k: int, live: WorkloadSummary, sim: WorkloadSummary) -> str:
    """One pair's figures, live and simulated, for people."""
    return (f"pair {k}: live TTFT {live.ttft_p50 * 1e3:.1f} ms, TPOT {live.tpot_p50 * 1e3:.2f} ms, "
            f"{live.output_tps:.0f} tok/s | sim {sim.ttft_p50 * 1e3:.1f} ms, {sim.tpot_p50 * 1e3:.2f} ms, "
            f"{sim.output_tps:.0f} tok/s")


def run_pair(url: str, out: Path, seed: int, progress: Progress | None = None) -> Pair:
    """Calibrate the engine at ``url`` into ``out``, then run workload ``seed`` live and simulated."""
    cal = calibrate(Options(url=url, out=out, settle=SETTLE), progress)
    work = workload(seed=seed)
    live = summarise(asyncio.run(run_live(url, cal.facts.model, work)))
    return live, summarise(simulate(cal.profile, work))


@contextmanager
def llama_server(root: Path) -> Iterator[str]:
    """One llama-server on a free loopback port, its log and slots under ``root``; yields its URL.

    Raises:
        StartError: no build (the message says how to make one), or it did not come up.
    """
    build = find_build()
    for sub in ("slots", "logs"):
        (root / sub).mkdir(exist_ok=True)
    sup = Supervisor()
    try:
        _, url = start_server(sup, build, "accuracy", root, MODEL_NAME, n_ctx=N_CTX)
        yield url
    finally:
        sup.stop_all()
