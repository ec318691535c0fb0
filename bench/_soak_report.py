"""The soak's report: totals over the rounds, the verdicts against its targets, and the tables."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.table import Table

from bench._soak_clients import Tally
from bench._soak_stack import Sample
from demo.loadgen import percentile

console = Console()
WITHIN = 0.10  # "back within 10 % of the baseline"
#: Round over round the daemon's RSS must not grow: a few per cent is allocator noise.
ROUND_OVER_ROUND = 0.03
#: Idle keep-alive connections to the engines and the monitor come and go: a few fds either way.
FD_SLACK = 8


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
        "loop_lag_note": "the daemon's own probe (a 500 ms timer, syshax_event_loop_lag_seconds) over the load: the "
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
    for key, title, what in (("transport_failures", "Transport steps that failed (client side)",
                              "step, connection, error"),
                             ("errors_by_kind", "Clean errors and losses by kind", "kind")):
        if report[key]:
            counts = Table(title=title)
            counts.add_column(what)
            counts.add_column("count", justify="right")
            for kind, n in report[key].items():
                counts.add_row(kind, str(n))
            console.print(counts)
    targets = Table(title="Targets")
    for col in ("target", "measured", "verdict"):
        targets.add_column(col)
    for v in report["verdicts"]:
        targets.add_row(v["target"], v["measured"], v["verdict"] if v["verdict"] == "met" else f"[red]{v['verdict']}[/]")
    console.print(targets)
