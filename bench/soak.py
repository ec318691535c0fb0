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
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import results_dir  # noqa: E402
from bench._soak_clients import Tally, Workers, body, health_probe, worker_main  # noqa: E402
from bench._soak_stack import Chaos, Engines, Sample, Sampler, phases, stack  # noqa: E402
from demo.loadgen import percentile, stream_chat  # noqa: E402

console = Console()
#: Pooled keep-alive connections to engines expire after httpx's default 5 s.
SETTLE_SECONDS = 6.0
WITHIN = 0.10  # "back within 10 % of the baseline"
#: Round over round the daemon's RSS must not grow: a few per cent is allocator noise.
ROUND_OVER_ROUND = 0.03
#: Idle keep-alive connections to the engines and the monitor come and go: a few fds either way.
FD_SLACK = 8
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


def report(args: argparse.Namespace, limits: tuple[int, int], procs: int, cold: Sample, baseline: Sample,
           peak: Sample, rounds: list[dict[str, Any]], tracebacks: int) -> dict[str, Any]:
    """The JSON report: totals over the rounds, each round, the daemon's samples, the verdicts."""
    tally = Tally()
    for r in rounds:
        tally.merge(r["tally"].to_json())
    wall = sum(r["wall"] for r in rounds)
    lag = [x for r in rounds for x in r["lag"]]
    drained = all(r["drained"] for r in rounds)
    first_end, end = rounds[0]["end"].as_dict(), rounds[-1]["end"].as_dict()
    return {
        "clients": args.clients, "duration_s": args.duration, "rounds": args.rounds, "wall_s": round(wall, 2),
        "warmup": not args.no_warmup,
        "engine_profile": "null with 4 ms steps", "fd_limit": list(limits), "client_processes": procs,
        "requests": tally.total, "completed": tally.completed, "clean_errors": tally.clean_errors,
        "lost": tally.lost, "lost_examples": tally.lost_examples[:10],
        "client_pool_closes": tally.client_pool_closes,
        "client_pool_closes_note": "requests whose connection the client's own httpx pool closed under them "
                                   "before any answer (encode/httpcore#1110, when a client process stalls past "
                                   "the 5 s keep-alive expiry); retried once, as the openai client does",
        "errors_by_kind": dict(tally.kinds.most_common(12)),
        "error_examples": {kind: tally.error_examples.get(kind, "") for kind, _ in tally.kinds.most_common(12)},
        "transport_failures": dict(tally.transport.most_common(12)),
        "requests_per_s": round(tally.completed / wall, 1) if wall else 0.0,
        "ttft_p50_ms": _ms(percentile(tally.ttfts, 0.5)), "ttft_p99_ms": _ms(percentile(tally.ttfts, 0.99)),
        "per_round": [
            {"round": i + 1, "requests": r["tally"].total, "completed": r["tally"].completed,
             "clean_errors": r["tally"].clean_errors, "lost": r["tally"].lost, "drained": r["drained"],
             "right_after": r["right_after"].as_dict(), "end": r["end"].as_dict(),
             "daemon_outcomes": r["outcomes"], "daemon_cpu_s": round(r["daemon_cpu"], 1),
             "client_cpu_s": round(r["client_cpu"], 1), "health_p99_ms": _ms(percentile(r["lag"], 0.99)),
             "loop_lag_ms": {k: (round(v, 1) if k == "samples" else _ms(v)) for k, v in r["loop_lag"].items()},
             "fault_switch_failures": r["failures"]}
            for i, r in enumerate(rounds)
        ],
        "daemon": {"cold": cold.as_dict(), "baseline": baseline.as_dict(), "peak": peak.as_dict(),
                   "after_first_round": first_end, "end": end},
        "daemon_cpu_s": round(sum(r["daemon_cpu"] for r in rounds), 1),
        "client_cpu_s": round(sum(r["client_cpu"] for r in rounds), 1),
        "health_latency_ms": {"samples": len(lag), "p50": _ms(percentile(lag, 0.5)),
                              "p99": _ms(percentile(lag, 0.99)), "max": _ms(max(lag) if lag else None)},
        "loop_lag_ms": {"p50": _worst(rounds, "p50"), "p99": _worst(rounds, "p99"), "max": _worst(rounds, "max")},
        "loop_lag_note": "the daemon's own probe (a 100 ms timer, syshax_event_loop_lag_seconds) over the load: the "
                         "upper bound of the histogram bucket holding the quantile, worst round; /health latency is "
                         "measured from a separate process and includes the request's own cost",
        "drained": drained, "daemon_tracebacks": tracebacks,
        "phases": [{"at_s": round(at, 1), "phase": name} for at, name, _ in rounds[0]["schedule"]],
        "verdicts": verdicts(tally.lost, drained, tracebacks, cold.as_dict(), baseline.as_dict(), first_end, end,
                             len(rounds)) + round_over_round([r["end"].as_dict() for r in rounds]),
    }


def _worst(rounds: list[dict[str, Any]], key: str) -> float | None:
    values = [r["loop_lag"][key] for r in rounds if r["loop_lag"][key] is not None]
    return _ms(max(values)) if values else None


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


def verdicts(lost: int, drained: bool, tracebacks: int, cold: dict[str, Any], base: dict[str, Any],
             first: dict[str, Any], end: dict[str, Any], rounds: int) -> list[dict[str, str]]:
    """The issue's targets, each with the measured value and met/missed."""
    out = [
        {"target": "0 requests lost or hung", "measured": str(lost), "verdict": "met" if lost == 0 else "missed"},
        {"target": "in flight and queue back to 0", "measured": "yes" if drained else "no",
         "verdict": "met" if drained else "missed"},
        {"target": "no traceback in the daemon's log", "measured": str(tracebacks),
         "verdict": "met" if tracebacks == 0 else "missed"},
    ]
    comparisons = [("the daemon's start", cold)] + ([("the warm baseline", base)] if base != cold else [])
    comparisons += [("the first round's end", first)] if rounds > 1 else []
    for what, ref in comparisons:
        for key, unit, slack in (("rss_mb", " MB", 0.0), ("fds", "", FD_SLACK)):
            change = end[key] - ref[key]
            ok = change <= max(WITHIN * ref[key], slack)
            out.append({"target": f"{key} after the load within 10% of {what}" + (f" (or {slack:g})" if slack else ""),
                        "measured": f"{ref[key]}{unit} -> {end[key]}{unit} ({change / ref[key]:+.1%})",
                        "verdict": "met" if ok else "missed"})
    return out


def round_over_round(ends: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The memory goal: the daemon's RSS after each round is not above the previous round's."""
    out = []
    for i in range(1, len(ends)):
        before, after = ends[i - 1]["rss_mb"], ends[i]["rss_mb"]
        change = (after - before) / before if before else 0.0
        out.append({"target": f"RSS after round {i + 1} not above round {i}'s (+{ROUND_OVER_ROUND:.0%} slack)",
                    "measured": f"{before} MB -> {after} MB ({change:+.1%})",
                    "verdict": "met" if change <= ROUND_OVER_ROUND else "missed"})
    return out


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 2)


def show(report: dict[str, Any]) -> None:
    """The summary tables."""
    table = Table(title=f"Soak: {report['clients']} streaming clients, {report['rounds']} x {report['duration_s']:g} s "
                        f"(simulated engines, faults on and off)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    d, lag = report["daemon"], report["health_latency_ms"]
    rows: list[tuple[str, object]] = [
        ("requests", report["requests"]), ("completed", report["completed"]),
        ("clean errors", report["clean_errors"]), ("lost (hung, cut, reset)", report["lost"]),
        ("completed / s", report["requests_per_s"]),
        ("TTFT p50 / p99 (ms)", f"{report['ttft_p50_ms']} / {report['ttft_p99_ms']}"),
        ("event-loop lag p50 / p99 / max (ms, bucket bound)",
         f"{report['loop_lag_ms']['p50']} / {report['loop_lag_ms']['p99']} / {report['loop_lag_ms']['max']}"),
        ("/health latency p50 / p99 / max (ms)", f"{lag['p50']} / {lag['p99']} / {lag['max']}"),
        ("client pool closes (httpcore#1110, retried)", report["client_pool_closes"]),
    ]
    for name in ("cold", "baseline", "peak", "after_first_round", "end"):
        rows.append((f"daemon {name.replace('_', ' ')}: RSS MB / fds / connections",
                     f"{d[name]['rss_mb']} / {d[name]['fds']} / {d[name]['connections']}"))
    rows += [("daemon CPU s / client CPU s", f"{report['daemon_cpu_s']} / {report['client_cpu_s']}"),
             ("in flight and queue back to 0", "yes" if report["drained"] else "NO"),
             ("daemon tracebacks", report["daemon_tracebacks"])]
    for name, value in rows:
        table.add_row(name, str(value))
    console.print(table)
    per = Table(title="Rounds")
    for col in ("round", "requests", "ok", "clean", "lost", "daemon outcomes", "RSS MB/fds after",
                "loop lag p99", "health p99", "switch fails"):
        per.add_column(col, justify="left" if col == "daemon outcomes" else "right")
    for r in report["per_round"]:
        per.add_row(str(r["round"]), str(r["requests"]), str(r["completed"]), str(r["clean_errors"]), str(r["lost"]),
                    ", ".join(f"{k} {v}" for k, v in sorted(r["daemon_outcomes"].items())),
                    f"{r['end']['rss_mb']} / {r['end']['fds']}",
                    str(r["loop_lag_ms"]["p99"]), str(r["health_p99_ms"]),
                    str(len(r["fault_switch_failures"])))
    console.print(per)
    if report["transport_failures"]:
        transport = Table(title="Transport steps that failed (client side)")
        transport.add_column("step, connection, error")
        transport.add_column("count", justify="right")
        for kind, n in report["transport_failures"].items():
            transport.add_row(kind, str(n))
        console.print(transport)
    if report["errors_by_kind"]:
        kinds = Table(title="Clean errors and losses by kind")
        kinds.add_column("kind")
        kinds.add_column("count", justify="right")
        for kind, n in report["errors_by_kind"].items():
            kinds.add_row(kind, str(n))
        console.print(kinds)
    targets = Table(title="Targets")
    for col in ("target", "measured", "verdict"):
        targets.add_column(col)
    for v in report["verdicts"]:
        targets.add_row(v["target"], v["measured"], v["verdict"] if v["verdict"] == "met" else f"[red]{v['verdict']}[/]")
    console.print(targets)


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
