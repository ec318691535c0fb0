"""What admission costs as the line grows: an arrival, an idle kick, and each admission, at 10 to 10,000 waiting.

The scheduling core (:mod:`syshaxd.core`) asks the policy once per waiting request per change
of state, and a kick costs O(log n) per request it admits. This measures it on the daemon's
own code: a line of N held requests (a real policy function that holds while the box is
full), then

- **arrival**: one more request arrives and waits (asked not at all: someone waits ahead);
- **idle kick**: a kick with nothing changed (no policy call);
- **admission**: room for ``--admit`` requests (at most N) comes back at once; the cost per
  admitted one, and how many times the policy was asked per admission (1: asked once).

Per operation, in microseconds, best of ``--repeat`` runs; the ratio to the 10-waiting
figure says whether it stays flat (target: admission at 10,000 within 3x of 10). Before it
reports, it checks it can see growth: a walk of the whole line (what a kick used to do) must
grow with N, or the clock is too coarse to tell flat from linear and it refuses.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bench._common import results_dir  # noqa: E402
from syshaxd.core import EngineBook, Scheduler  # noqa: E402
from syshaxd.routing import Decision, Limits, Mode, RequestFeatures  # noqa: E402
from syshaxd.snapshot import EngineMetrics, EngineState, EngineView, Snapshot  # noqa: E402

SIZES = (10, 1_000, 10_000)
TARGET_RATIO = 3.0


@dataclass
class Box:
    """The core's inputs: one GPU engine; the policy holds while ``room`` is 0, counting its calls."""

    policy_name: str
    room: int = 0
    calls: int = 0

    def __post_init__(self) -> None:
        view = EngineView("gpu0", "gpu", "bench://gpu0", "vllm-v1", state=EngineState.UP,
                          metrics=EngineMetrics(kv_cache_usage=0.5, running=0, waiting=0))
        self._snapshot = Snapshot(taken_at=0.0, engines=(view,))
        self._limits = Limits()

    def observed(self) -> Snapshot:
        return self._snapshot

    def engine_flags(self, name: str) -> tuple[bool, bool]:
        return True, False

    def limits(self) -> Limits:
        return self._limits

    def policy(self, snap: Snapshot, features: RequestFeatures, limits: Limits) -> Decision:
        self.calls += 1
        if self.room <= 0:
            return Decision(None, Mode.WHOLE, None, "full")
        self.room -= 1
        return Decision("gpu", Mode.WHOLE, None, "room")


def _line(size: int, order: str, admit: int) -> tuple[Scheduler, Box]:
    box = Box("bench")
    core = Scheduler([EngineBook("gpu0", "gpu")], box, queue_limit=size + admit + 10, request_timeout=1e9,
                     policies={"bench": box.policy}, order=order)  # type: ignore[arg-type]
    for i in range(size):
        core.arrive(core.ticket(str(i), RequestFeatures(100, 50, request_id=str(i)), now=i * 1e-3), now=i * 1e-3)
    return core, box


def measure(size: int, order: str, admit: int, repeat: int) -> dict[str, float]:
    """Microseconds per arrival, idle kick and admission with ``size`` waiting; policy calls per admission."""
    best = {"arrival": float("inf"), "idle_kick": float("inf"), "admission": float("inf"), "walk": float("inf")}
    calls = 0.0
    room = min(admit, size)
    for _ in range(repeat):
        core, box = _line(size, order, admit)
        now = size * 1e-3
        gc.collect()  # the line's own garbage is collected outside the timed part
        t0 = time.perf_counter()
        for i in range(admit):  # each newcomer waits, then leaves: the line stays at ``size``
            rid = f"new{i}"
            ticket = core.ticket(rid, RequestFeatures(100, 50, request_id=rid), now=now)
            core.arrive(ticket, now=now)
            core.withdraw(ticket)
        best["arrival"] = min(best["arrival"], (time.perf_counter() - t0) / admit)
        t0 = time.perf_counter()
        for _ in range(admit):
            core.kick(now)
        best["idle_kick"] = min(best["idle_kick"], (time.perf_counter() - t0) / admit)
        box.room, box.calls = room, 0
        core.changed()  # the room came back (as a release would say)
        t0 = time.perf_counter()
        core.kick(now)
        best["admission"] = min(best["admission"], (time.perf_counter() - t0) / room)
        calls = box.calls / room
        core, box = _line(size, order, admit)
        gc.collect()
        t0 = time.perf_counter()
        sum(1 for _ in core.line.drain())  # every waiting request visited once: the old kick's cost
        best["walk"] = min(best["walk"], time.perf_counter() - t0)
    return {**{k: v * 1e6 for k, v in best.items()}, "policy_calls_per_admission": calls, "admitted": float(room)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny run (what make test does)")
    parser.add_argument("--admit", type=int, default=200, help="arrivals and admissions timed per size (200)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per size; the best counts (5)")
    parser.add_argument("--out", type=Path, default=results_dir() / "kick.json")
    args = parser.parse_args()
    if args.quick:
        args.admit, args.repeat = 20, 1
    console = Console()
    results: dict[str, dict[str, dict[str, float]]] = {}
    for order in ("fifo", "deadline"):
        results[order] = {str(n): measure(n, order, args.admit, args.repeat) for n in SIZES}
    table = Table(title=f"admission cost, µs per operation (best of {args.repeat}, {args.admit} each)")
    for col in ("order", "waiting", "arrival", "idle kick", "admission", "x vs 10", "policy calls / admission",
                "walk of the line"):
        table.add_column(col, justify="right")
    verdicts = []
    for order, by_size in results.items():
        base = by_size[str(SIZES[0])]
        walk_growth = by_size[str(SIZES[-1])]["walk"] / max(base["walk"], 1e-9)
        for n in SIZES:
            r = by_size[str(n)]
            ratio = r["admission"] / base["admission"]
            table.add_row(order, f"{n:,}", f"{r['arrival']:.1f}", f"{r['idle_kick']:.2f}", f"{r['admission']:.1f}",
                          f"{ratio:.2f}", f"{r['policy_calls_per_admission']:.2f}", f"{r['walk']:.0f}")
        ratio = by_size[str(SIZES[-1])]["admission"] / base["admission"]
        sees = walk_growth > 50  # 1,000x the requests: a linear walk grows far past 50x
        verdicts.append({"order": order, "admission_ratio": ratio, "walk_growth": walk_growth, "sees_growth": sees,
                         "met": sees and ratio <= TARGET_RATIO})
    console.print(table)
    for v in verdicts:
        if not v["sees_growth"]:
            console.print(f"[red]{v['order']}: refused: a walk of the line grew only {v['walk_growth']:.0f}x from "
                          f"{SIZES[0]} to {SIZES[-1]:,} waiting; the clock cannot tell flat from linear here[/]")
        else:
            mark = "[green]met[/]" if v["met"] else "[red]missed[/]"
            console.print(f"{v['order']}: admission at {SIZES[-1]:,} waiting is {v['admission_ratio']:.2f}x the cost "
                          f"at {SIZES[0]} (target <= {TARGET_RATIO:g}x): {mark}; a walk of the line grew "
                          f"{v['walk_growth']:.0f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"results": results, "verdicts": verdicts, "target_ratio": TARGET_RATIO,
                                    "quick": args.quick}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
