"""Soak: many concurrent streaming clients through syshaxd for a fixed time, with engine faults
switched on and off underneath, then a check that nothing was lost and nothing leaked.

Engines are two simulator processes (the ``null`` profile with 4 ms steps: the conductor,
not the engines, is under test, and streams last long enough to be cut). Faults during the
run: a share of GPU answers failing, CPU answering garbage, lying and hanging /metrics, and
(runs of 20 s or more) the GPU process killed while it streams, then restarted.

Reported: requests completed, clean errors (an OpenAI error status or an error event), and
anything else -- hangs, streams cut without an error event, connection resets -- which must
be 0; the daemon's RSS and open file descriptors before the load (cold), after a warm-up
(the baseline), at the peak and after the load stops; and the latency of ``GET /health``
measured by a separate process while the load runs, beside the daemon's own event-loop lag
probe (``syshax_event_loop_lag_seconds``). The clients run in worker processes (one
per 250 clients) on the same cores as the daemon: at 1,000 clients their CPU competes with
the daemon's, and the report gives both.

    python bench/soak.py                      # 1,000 clients for 120 s
    python bench/soak.py --clients 200 --duration 30
    python bench/soak.py --quick              # 20 clients for 5 s, no warm-up (make test)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psutil
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import results_dir  # noqa: E402
from bench._soak_clients import Workers, body, health_probe, worker_main  # noqa: E402
from bench._soak_report import report, show  # noqa: E402
from bench._soak_stack import Chaos, Engines, Sampler, phases, stack  # noqa: E402
from demo.loadgen import stream_chat  # noqa: E402

console = Console()
#: Pooled keep-alive connections to engines expire after httpx's default 5 s.
SETTLE_SECONDS = 6.0
#: Clients per worker process: one Python event loop drives a few hundred streams smoothly.
CLIENTS_PER_PROCESS = 250


def raise_fd_limit(needed: int) -> tuple[int, int]:
    """Raise this process's soft fd limit (children inherit it); returns (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


async def daemon_metrics(client: httpx.AsyncClient, url: str) -> dict[str, float]:
    """The daemon's own unlabelled samples and lag buckets (``le`` -> cumulative count)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = (await client.get(f"{url}/metrics")).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "syshax_event_loop_lag_seconds_bucket":
                out[f"lag_le_{s.labels['le']}"] = s.value
            elif s.name in ("syshax_inflight", "syshax_queue_depth"):
                out[s.name] = out.get(s.name, 0.0) + s.value
            elif not s.labels:
                out[s.name] = s.value
    return out


def lag_quantile(before: dict[str, float], after: dict[str, float], q: float) -> float | None:
    """The q-quantile of the loop lag between two scrapes, as the upper bound of its bucket (s)."""
    bounds = sorted((float(k[7:]), k) for k in after if k.startswith("lag_le_"))
    counts = [(bound, after[k] - before.get(k, 0.0)) for bound, k in bounds]
    total = counts[-1][1] if counts else 0.0
    if total <= 0:
        return None
    return next(bound for bound, count in counts if count >= q * total)


async def conductor_idle(client: httpx.AsyncClient, url: str, timeout: float = 60.0) -> bool:
    """Wait until the conductor has nothing in flight and nothing queued."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = await daemon_metrics(client, url)
        if m.get("syshax_inflight", 0) + m.get("syshax_queue_depth", 0) == 0:
            return True
        await asyncio.sleep(0.2)
    return False


async def trimmed(client: httpx.AsyncClient, url: str, since: float, timeout: float = 20.0) -> bool:
    """Wait for the daemon's idle memory trim after the last traffic (it trims 5 s after)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (await daemon_metrics(client, url)).get("syshax_memory_trims_total", 0.0) > since:
            return True
        await asyncio.sleep(0.5)
    return False


async def settle(url: str) -> bool:
    """After load: wait for the conductor to go idle, let pooled connections expire, then send a
    little traffic to both engines (httpx closes expired connections when a pool is next used),
    and wait for the daemon's idle trim. Returns whether in-flight work drained.
    """
    async with httpx.AsyncClient(timeout=30) as client:
        idle = await conductor_idle(client, url)
        await asyncio.sleep(SETTLE_SECONDS)
        trims = (await daemon_metrics(client, url)).get("syshax_memory_trims_total", 0.0)
        for i in range(3):
            await stream_chat(client, f"{url}/v1/chat/completions", body(i))
        await client.post(f"{url}/v1/chat/pd_disagg", json={**body(0), "stream": False})
        drained = idle and await conductor_idle(client, url)
        # Sample idle memory as an operator would see it a few seconds after traffic stops.
        await trimmed(client, url, trims)
    return drained


async def drive(workers: Workers, seconds: float, progress: Progress, sampler: Sampler, chaos: Chaos) -> float:
    """Run the workers under a progress bar; returns the wall time."""
    task = progress.add_task("load", total=seconds)
    t0 = time.monotonic()
    running = asyncio.create_task(workers.run())
    while not running.done():
        sample = sampler.last
        mem = f"rss {sample.rss / 2**20:.0f} MB, fds {sample.fds}" if sample else ""
        c = workers.counts()
        progress.update(task, completed=min(seconds, time.monotonic() - t0),
                        description=f"{chaos.current:<34} ok {c['completed']} err {c['clean_errors']} "
                                    f"lost {c['lost']}  {mem}")
        await asyncio.wait({running}, timeout=0.25)
    await running
    return time.monotonic() - t0


_OUTCOME = re.compile(r" outcome=(\S+) ")


def daemon_outcomes(log: str) -> dict[str, int]:
    """How the daemon says requests ended (its access log, one line per request)."""
    return dict(Counter(m.group(1) for m in _OUTCOME.finditer(log)))


async def one_round(args: argparse.Namespace, url: str, engines: Engines, procs: int, sampler: Sampler,
                    log_path: Path, label: str) -> dict[str, Any]:
    """One measured round: the load with its fault schedule, then settle and sample."""
    schedule = [] if args.no_faults else phases(args.duration, kill=args.duration >= 20 and not args.no_kill)
    chaos = Chaos(engines, schedule, label)
    workers = Workers(Path(__file__), url, args.clients, args.duration, procs)
    probe_out = log_path.with_name(f"probe-{label.split()[1].replace('/', '-')}.json")
    probe = await asyncio.create_subprocess_exec(sys.executable, __file__, "--probe", url, "--probe-seconds",
                                                 str(args.duration), "--probe-out", str(probe_out))
    log_start = _size(log_path)
    async with httpx.AsyncClient(timeout=30) as client:
        metrics0 = await daemon_metrics(client, url)
    client_cpu0, daemon_cpu0 = _children_cpu(), sampler.proc.cpu_times()
    chaos_task = asyncio.create_task(chaos.run())
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as progress:
        wall = await drive(workers, args.duration, progress, sampler, chaos)
    log_end = _size(log_path)
    await chaos_task
    try:
        await engines.clear_faults()
    except httpx.HTTPError as exc:
        chaos.failures.append(f"clearing faults after the run: {type(exc).__name__}: {exc}")
    right_after = sampler.sample()
    async with httpx.AsyncClient(timeout=30) as client:
        metrics1 = await daemon_metrics(client, url)
    drained = await settle(url)
    end = sampler.sample()
    await asyncio.wait_for(probe.wait(), 60)
    client_cpu1, daemon_cpu1 = _children_cpu(), sampler.proc.cpu_times()
    outcomes = daemon_outcomes(_read(log_path, log_start, log_end))
    lag = json.loads(_read(probe_out)) if probe_out.exists() else []
    return {"tally": workers.tally, "wall": wall, "lag": lag, "outcomes": outcomes, "drained": drained,
            "right_after": right_after, "end": end, "schedule": schedule, "failures": chaos.failures,
            "loop_lag": {"p50": lag_quantile(metrics0, metrics1, 0.5), "p99": lag_quantile(metrics0, metrics1, 0.99),
                         "max": lag_quantile(metrics0, metrics1, 1.0),
                         "samples": metrics1.get("syshax_event_loop_lag_seconds_count", 0.0)
                         - metrics0.get("syshax_event_loop_lag_seconds_count", 0.0)},
            "daemon_cpu": sum(daemon_cpu1[:2]) - sum(daemon_cpu0[:2]), "client_cpu": client_cpu1 - client_cpu0}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole soak: start, warm up, measured rounds with faults, settle, measure."""
    limits = raise_fd_limit(args.clients * 4 + 1024)
    with tempfile.TemporaryDirectory(prefix="syshax-soak-") as tmp_name, stack(Path(tmp_name), args.clients) as (
            url, engines, daemon):
        log_path = Path(tmp_name) / "syshaxd.log"
        sampler = Sampler(psutil.Process(daemon.pid))
        cold = sampler.sample()
        procs = args.procs or math.ceil(args.clients / CLIENTS_PER_PROCESS)
        if args.no_warmup:
            baseline = cold
        else:
            warm_seconds = min(5.0, max(1.0, args.duration * 0.1))
            # The first burst sizes pools and caches: the baseline is taken after it has settled.
            await Workers(Path(__file__), url, args.clients, warm_seconds, procs).run()
            await settle(url)
            baseline = sampler.sample()
        sampler.start()
        rounds = [await one_round(args, url, engines, procs, sampler, log_path, f"round {i + 1}/{args.rounds}",
                                  ) for i in range(args.rounds)]
        await sampler.stop()
        tracebacks = _read(log_path).count("Traceback")
        if args.logs:
            _keep_logs(Path(tmp_name), args.logs)
    return report(args, limits, procs, cold, baseline, sampler.peak(), rounds, tracebacks)


def _size(path: Path) -> int:
    return path.stat().st_size


def _read(path: Path, start: int = 0, end: int | None = None) -> str:
    with path.open("rb") as f:
        f.seek(start)
        return f.read(-1 if end is None else end - start).decode(errors="replace")


def _keep_logs(tmp: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for path in tmp.glob("*.log"):
        shutil.copy(path, dest / path.name)


def _children_cpu() -> float:
    """CPU seconds of this process and its finished children (the client workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=1000, help="concurrent streaming clients (default 1000)")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of load (default 120)")
    parser.add_argument("--quick", action="store_true",
                        help="20 clients for 5 s, one round, no warm-up (what make test runs)")
    parser.add_argument("--no-warmup", action="store_true",
                        help="no warm-up burst: the baseline is the daemon's cold start")
    parser.add_argument("--no-kill", action="store_true", help="do not kill and restart the GPU engine")
    parser.add_argument("--no-faults", action="store_true", help="no faults at all (a baseline run)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default bench/results/soak.json)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="measured rounds of --duration each (default 2: memory that keeps growing from one "
                             "identical round to the next is a leak; a plateau is the allocator's high-water mark)")
    parser.add_argument("--logs", type=Path, default=None, help="copy the daemon's and engines' logs here")
    parser.add_argument("--procs", type=int, default=0,
                        help=f"client worker processes (default: one per {CLIENTS_PER_PROCESS} clients)")
    parser.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--worker-offset", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--probe", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--probe-seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--probe-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        health_probe(args.probe, args.probe_seconds, args.probe_out)
        return 0
    if args.worker:
        worker_main(args.worker, args.clients, args.duration, args.worker_offset)
        return 0
    if args.quick:
        args.clients, args.duration, args.rounds, args.no_warmup = 20, 5.0, 1, True
    if args.clients < 1 or args.duration <= 0 or args.rounds < 1:
        parser.error("--clients and --rounds must be at least 1 and --duration above 0")
    report = asyncio.run(run(args))
    show(report)
    out = args.out or results_dir() / ("soak-quick.json" if args.quick else "soak.json")
    out.write_text(json.dumps(report, indent=2))
    console.print(f"wrote {out}")
    # Lost requests or stuck counters fail the run; memory and fd figures are reported as verdicts.
    return 0 if report["lost"] == 0 and report["drained"] and report["daemon_tracebacks"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
