"""What an attacker costs the daemon: memory, descriptors and a well-behaved client's TTFT under each attack.

One daemon with an API key (the default edge limits, ``max_connections_per_client`` set as
docs/reliability.md advises for an exposed port, an open-file limit of 1,024) in front of
simulated engines. For each attack (bench/_attackers.py, run without the key from a process
of its own): a well-behaved client streams small chat requests on a kept-alive connection
from another address, first in quiet (its p50 TTFT there is the baseline), then while the
attack runs, then in quiet again once the attacker left (the quiet figure is both spells,
so a machine whose load drifts does not pass for the attack's effect); the daemon's RSS and
open fds are sampled from /proc throughout. When the attacker leaves, the time until a new
connection is served is measured, and memory is read again once the daemon has been idle
long enough to return what it freed. Targets (issue 35):
p50 TTFT under attack within 2x of quiet, peak RSS under baseline + 100 MB, RSS after within
10% of baseline, new connections served within 1 s.

Before it reports, it checks that its baseline sees: every quiet request answered, and a
quiet p50 TTFT under 0.5 s (the simulated engine's own is milliseconds); and that every
attack attacked (it opened connections). Else it refuses.

    python bench/attack.py            # full run (~5 minutes)
    python bench/attack.py --quick    # a tiny run, as `make test` does
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _attackers  # noqa: E402
from bench._attack_stack import Daemon, GoodClient, cpu_seconds, daemon, refusals, served_after  # noqa: E402
from bench._common import results_dir  # noqa: E402

console = Console()
#: services.conductor.limits of the run: the defaults, and a cap per client address.
LIMITS: dict[str, Any] = {"max_connections_per_client": 128}
#: The quick run's, short enough that its timeouts fire within its seconds.
QUICK_LIMITS: dict[str, Any] = {**LIMITS, "head_timeout": 1.0, "body_timeout": 1.0}
QUIET_MAX_TTFT = 0.5


def p50(values: list[float]) -> float | None:
    """The median, or None for no values."""
    return statistics.median(values) if values else None


def attack(stack: Daemon, name: str, seconds: float, scale: float, settle: float) -> dict[str, Any]:
    """One attack: quiet baseline, the attack, the attacker leaving, memory after."""
    rss0, fds0 = stack.usage()
    quiet_ttfts, quiet_failures = quiet_spell(stack, min(seconds, 5.0))
    before = refusals(stack.url)
    host, port = stack.url.removeprefix("http://").split(":")
    attacker = subprocess.Popen([sys.executable, __file__, "--attacker", name, "--host", host, "--port", port,
                                 "--seconds", str(seconds), "--scale", str(scale)], stdout=subprocess.PIPE, text=True)
    try:
        good = GoodClient(stack.url)
        good.start()
        peak_rss, peak_fds = rss0, fds0
        began, cpu0, attacker_cpu = time.perf_counter(), stack.cpu(), 0.0
        while attacker.poll() is None:
            rss, fds = stack.usage()
            peak_rss, peak_fds = max(peak_rss, rss), max(peak_fds, fds)
            try:
                attacker_cpu = cpu_seconds(attacker.pid)
            except psutil.Error:
                pass  # it just ended
            time.sleep(0.2)
        busy = time.perf_counter() - began
        daemon_cpu = (stack.cpu() - cpu0) / busy
        ttfts, failures = good.stop()
        tally = json.loads(attacker.communicate(timeout=30)[0].strip().splitlines()[-1])
    finally:
        if attacker.poll() is None:
            attacker.kill()
            attacker.wait(timeout=10)
    recovery = served_after(stack.url)
    time.sleep(settle)  # idle: the daemon returns freed memory after 5 s of it
    rss1, fds1 = stack.usage()
    after = refusals(stack.url)
    # Quiet again after the attack: the baseline is both spells, so a machine whose load
    # drifts during the run (others share it) does not pass for the attack's effect.
    later_ttfts, later_failures = quiet_spell(stack, min(seconds, 5.0))
    quiet_ttfts, quiet_failures = quiet_ttfts + later_ttfts, quiet_failures + later_failures
    return {
        "attack": name, "what": _attackers.ATTACKS[name][2], "scale": scale, "seconds": seconds, "attacker": tally,
        "quiet_ttft_p50_ms": _ms(p50(quiet_ttfts)), "quiet_requests": len(quiet_ttfts), "quiet_failures": quiet_failures,
        "ttft_p50_ms": _ms(p50(ttfts)), "requests": len(ttfts), "failures": failures,
        "rss_baseline_mb": round(rss0, 1), "rss_peak_mb": round(peak_rss, 1), "rss_after_mb": round(rss1, 1),
        "fds_baseline": fds0, "fds_peak": peak_fds, "fds_after": fds1,
        "served_again_s": None if recovery is None else round(recovery, 3),
        "daemon_cpu_share": round(daemon_cpu, 3), "attacker_cpu_share": round(attacker_cpu / busy, 3),
        "refused": {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after if after.get(k, 0.0) > before.get(k, 0.0)},
    }


def quiet_spell(stack: Daemon, seconds: float) -> tuple[list[float], list[str]]:
    """The well-behaved client alone for ``seconds``: its TTFTs and failures."""
    client = GoodClient(stack.url)
    client.start()
    time.sleep(seconds)
    return client.stop()


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 2)


def judge(row: dict[str, Any]) -> list[str]:
    """The targets a row misses."""
    misses = []
    quiet, loud = row["quiet_ttft_p50_ms"], row["ttft_p50_ms"]
    if loud is None or quiet is None or loud > 2 * quiet:
        misses.append("TTFT")
    if row["rss_peak_mb"] > row["rss_baseline_mb"] + 100:
        misses.append("peak memory")
    if row["rss_after_mb"] > row["rss_baseline_mb"] * 1.1:
        misses.append("memory after")
    if row["served_again_s"] is None or row["served_again_s"] > 1.0:
        misses.append("served again")
    return misses


def labelled(rows: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Each row with its attack's name, numbered where an attack ran more than once (``--only flood flood``)."""
    names = [row["attack"] for row in rows]
    seen: dict[str, int] = {}
    out = []
    for row in rows:
        name = row["attack"]
        seen[name] = seen.get(name, 0) + 1
        out.append((f"{name} #{seen[name]}" if names.count(name) > 1 else name, row))
    return out


def run_drift(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Memory and descriptors before the first attack and after the last: what the attacks
    left behind together (each row's own baseline is the one just before it)."""
    first, last = rows[0], rows[-1]
    return {"rss_first_baseline_mb": first["rss_baseline_mb"], "rss_last_after_mb": last["rss_after_mb"],
            "rss_growth": round(last["rss_after_mb"] / first["rss_baseline_mb"] - 1, 3),
            "fds_first_baseline": first["fds_baseline"], "fds_last_after": last["fds_after"]}


def refuse_if_blind(rows: list[dict[str, Any]]) -> str | None:
    """Why the run cannot be reported (its baseline or an attack did not happen as it should), or None."""
    for row in rows:
        if row["quiet_failures"] or not row["quiet_requests"]:
            return f"{row['attack']}: the quiet baseline failed requests ({row['quiet_failures'][:3]})"
        if row["quiet_ttft_p50_ms"] > QUIET_MAX_TTFT * 1e3:
            return f"{row['attack']}: quiet p50 TTFT {row['quiet_ttft_p50_ms']} ms: the machine is too loaded to measure"
        if not row["attacker"]["connections"]:
            return f"{row['attack']}: the attacker opened no connection"
    return None


def table(rows: list[dict[str, Any]]) -> Table:
    """The report."""
    out = Table(title="The edge under attack (API key set; targets: TTFT <= 2x quiet, peak < base + 100 MB, "
                      "after <= base x 1.1, served again <= 1 s)")
    for col in ("attack", "TTFT p50 quiet / attack", "ratio", "RSS MB base / peak / after", "fds base / peak / after",
                "served again", "CPU daemon / attacker", "refused", "verdict"):
        out.add_column(col)
    for row in rows:
        quiet, loud = row["quiet_ttft_p50_ms"], row["ttft_p50_ms"]
        ratio = f"{loud / quiet:.2f}x" if quiet and loud else "-"
        misses = judge(row)
        refused = ", ".join(f"{k} {v:.0f}" for k, v in sorted(row["refused"].items())) or "-"
        again = "never" if row["served_again_s"] is None else f"{row['served_again_s'] * 1e3:.0f} ms"
        out.add_row(row["attack"], f"{quiet} / {loud} ms", ratio,
                    f"{row['rss_baseline_mb']:.0f} / {row['rss_peak_mb']:.0f} / {row['rss_after_mb']:.0f}",
                    f"{row['fds_baseline']} / {row['fds_peak']} / {row['fds_after']}", again,
                    f"{row['daemon_cpu_share']:.0%} / {row['attacker_cpu_share']:.0%}", refused,
                    "[green]ok[/]" if not misses else "[red]miss: " + ", ".join(misses) + "[/]")
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the attacks, print the table, write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny run (each attack ~2 s, a tenth of its sockets)")
    parser.add_argument("--only", nargs="*", choices=list(_attackers.ATTACKS), help="attacks to run (default: all)")
    parser.add_argument("--out", type=Path, default=results_dir() / "attack.json")
    parser.add_argument("--attacker", help=argparse.SUPPRESS)
    parser.add_argument("--host", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--scale", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.attacker:
        _attackers.main(args.attacker, args.host, args.port, args.seconds, args.scale)
        return 0
    seconds, scale, settle = (2.0, 0.1, 1.0) if args.quick else (20.0, 1.0, 8.0)
    names = args.only or list(_attackers.ATTACKS)
    rows = []
    with daemon(QUICK_LIMITS if args.quick else LIMITS) as stack, Progress(console=console) as progress:
        task = progress.add_task("attacks", total=len(names))
        for name in names:
            progress.update(task, description=name)
            rows.append(attack(stack, name, seconds, scale, settle))
            progress.advance(task)
    console.print(table(rows))
    drift = run_drift(rows)
    console.print(f"Over the run: RSS {drift['rss_first_baseline_mb']:.1f} MB before the first attack, "
                  f"{drift['rss_last_after_mb']:.1f} MB after the last ({drift['rss_growth']:+.1%}); fds "
                  f"{drift['fds_first_baseline']} -> {drift['fds_last_after']}")
    report = {"quick": args.quick, "limits": QUICK_LIMITS if args.quick else LIMITS, "rows": rows, "run": drift,
              "misses": {label: judge(row) for label, row in labelled(rows) if judge(row)}}
    blind = refuse_if_blind(rows)
    if blind is not None:
        report["refused"] = blind
        console.print(f"[red]refusing to report: {blind}[/]")
    args.out.write_text(json.dumps(report, indent=2))
    console.print(f"JSON: {args.out}")
    return 1 if blind is not None else 0


if __name__ == "__main__":
    sys.exit(main())
