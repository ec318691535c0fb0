"""What a proxy costs: streamed chat requests sent straight to an engine, through syshax,
and through vllm-router, with the same load, in one run.

The engine is the simulator's ``null`` profile (next to no compute time), so the proxies
are the bottleneck. Reported per path and concurrency: TTFT and inter-token latency p50/p99,
the TTFT each proxy adds over direct, requests/s and streamed chunks/s; plus several
streamed requests in a row on one keep-alive connection.

    python bench/overhead.py            # full run (concurrency 1, 16, 64, 256)
    python bench/overhead.py --quick    # a tiny run, as `make test` does
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import free_port, results_dir, wait_http  # noqa: E402
from demo.loadgen import Result, closed_loop, percentile, stream_chat  # noqa: E402

console = Console()
ROUTER_VERSION = "0.1.17"
BODY = {"model": "ds-32b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "ignore_eos": True}


def ensure_router() -> str | None:
    """The vllm-router binary, installed into this venv on first use (bench setup only)."""
    found = shutil.which("vllm-router", path=str(Path(sys.executable).parent)) or shutil.which("vllm-router")
    if found:
        return found
    console.print(f"[dim]installing vllm-router=={ROUTER_VERSION} (bench only)…[/]")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", f"vllm-router=={ROUTER_VERSION}"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        console.print(f"[red]could not install vllm-router:[/] {done.stderr.strip()[-400:]}")
        return None
    return shutil.which("vllm-router", path=str(Path(sys.executable).parent))


@contextmanager
def processes(tmp: Path, router: str | None) -> Iterator[tuple[dict[str, str], dict[str, int]]]:
    """Start the engine, syshaxd and vllm-router; yield their base URLs and the proxies' pids; stop them all."""
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        gpu, cpu, api, rport = free_port(), free_port(), free_port(), free_port()

        def start(name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
            log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed below
            logs.append(log)
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
            procs.append(proc)
            return proc

        sim = start("sim", [sys.executable, "-m", "sim", "pair", "--gpu-port", str(gpu), "--cpu-port", str(cpu),
                            "--gpu-profile", "null", "--cpu-profile", "null"])
        wait_http(f"http://127.0.0.1:{gpu}/health", proc=sim)
        config = {
            "services": {"gpu": {"port": gpu}, "cpu": {"port": cpu}, "conductor": {"port": api}},
            "decider": {"policy": "gpu-only"},
            "system": {"max_queue_size": 10000},
            "monitor": {"startup_check": False},
            "control": {"socket": str(tmp / "control.sock"), "state_dir": str(tmp / "state")},
            "logging": {"level": "warning"},
        }
        (tmp / "config.yaml").write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYSHAX_")}
        daemon = start("syshaxd", [sys.executable, "-m", "syshaxd", "--config", str(tmp / "config.yaml")], env)
        wait_http(f"http://127.0.0.1:{api}/health", proc=daemon)
        urls = {"direct": f"http://127.0.0.1:{gpu}", "syshax": f"http://127.0.0.1:{api}"}
        pids = {"syshax": daemon.pid}
        if router:
            rproc = start("vllm-router", [router, "--host", "127.0.0.1", "--port", str(rport), "--worker-urls",
                                          f"http://127.0.0.1:{gpu}", "--policy", "round_robin", "--log-level", "error",
                                          "--prometheus-port", str(free_port())])
            wait_http(f"http://127.0.0.1:{rport}/health", proc=rproc, timeout=60)
            urls["vllm-router"] = f"http://127.0.0.1:{rport}"
            pids["vllm-router"] = rproc.pid
        yield urls, pids
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for log in logs:
            log.close()


def summarize(results: list[Result], wall: float) -> dict[str, Any]:
    """Latency quantiles and rates of one path at one concurrency."""
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    itls = [x for r in ok for x in r.itls]
    return {
        "requests": len(results),
        "ok": len(ok),
        "ttft_p50_ms": _ms(percentile(ttfts, 0.5)),
        "ttft_p99_ms": _ms(percentile(ttfts, 0.99)),
        "itl_p50_ms": _ms(percentile(itls, 0.5)),
        "itl_p99_ms": _ms(percentile(itls, 0.99)),
        "requests_per_s": len(ok) / wall if wall > 0 else 0.0,
        "chunks_per_s": sum(r.chunks for r in ok) / wall if wall > 0 else 0.0,
        "chunks": sum(r.chunks for r in ok),
    }


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 3)


async def measure(url: str, concurrency: int, total: int) -> dict[str, Any]:
    """One closed-loop run."""
    t0 = time.perf_counter()
    results = await closed_loop(f"{url}/v1/chat/completions", concurrency, total, lambda i: dict(BODY))
    return summarize(results, time.perf_counter() - t0)


async def keepalive(url: str, count: int) -> dict[str, Any]:
    """Several streamed requests in a row on one keep-alive connection."""
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=1)) as client:
        await stream_chat(client, f"{url}/v1/chat/completions", dict(BODY))  # open the connection
        results = [await stream_chat(client, f"{url}/v1/chat/completions", dict(BODY)) for _ in range(count)]
    ttfts = [r.ttft for r in results if r.ttft is not None]
    return {"requests": count, "ttft_mean_ms": _ms(sum(ttfts) / len(ttfts)) if ttfts else None,
            "ttft_p50_ms": _ms(percentile(ttfts, 0.5))}


def judge(rows: dict[str, dict[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The issue's targets, each with the measured numbers and a verdict."""
    targets = []
    if "vllm-router" not in rows:
        return [{"target": "vllm-router comparison", "verdict": "not run (vllm-router unavailable)"}]
    for c in (16, 64):
        if c not in rows["direct"]:
            continue
        direct, ours, theirs = rows["direct"][c], rows["syshax"][c], rows["vllm-router"][c]
        add_ours = (ours["ttft_p50_ms"] or 0) - (direct["ttft_p50_ms"] or 0)
        add_theirs = (theirs["ttft_p50_ms"] or 0) - (direct["ttft_p50_ms"] or 0)
        p99_add = (ours["ttft_p99_ms"] or 0) - (direct["ttft_p99_ms"] or 0)
        targets.append({"target": f"c={c}: syshax TTFT p50 added <= router's + 1 ms",
                        "measured": f"{add_ours:.2f} vs {add_theirs:.2f} ms",
                        "verdict": "met" if add_ours <= add_theirs + 1.0 else "missed"})
        targets.append({"target": f"c={c}: syshax TTFT p99 added < 5 ms", "measured": f"{p99_add:.2f} ms",
                        "verdict": "met" if p99_add < 5.0 else "missed"})
    if 256 in rows["direct"]:
        ours, theirs = rows["syshax"][256]["chunks_per_s"], rows["vllm-router"][256]["chunks_per_s"]
        targets.append({"target": "c=256: syshax chunks/s >= 0.5 x router's",
                        "measured": f"{ours:.0f} vs {theirs:.0f} ({ours / theirs if theirs else 0:.2f}x)",
                        "verdict": "met" if theirs and ours >= 0.5 * theirs else "missed"})
    return targets


async def run(args: argparse.Namespace) -> dict[str, Any]:
    levels = [1, 4] if args.quick else [1, 16, 64, 256]
    per_level = (lambda c: 8) if args.quick else (lambda c: max(200, c * 8))
    router = None if args.no_router else ensure_router()
    rows: dict[str, dict[int, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="syshax-overhead-") as tmp, processes(Path(tmp), router) as (urls, pids):
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("overhead", total=len(levels) * len(urls) + len(urls))
            for c in levels:
                for name, url in urls.items():  # paths interleaved per level: the machine's noise hits all alike
                    progress.update(task, description=f"{name} at concurrency {c}")
                    await measure(url, c, min(c, 8))  # warm the connections
                    proxy = psutil.Process(pids[name]) if name in pids else None
                    cpu0 = sum(proxy.cpu_times()[:2]) if proxy else 0.0
                    row = rows.setdefault(name, {})[c] = await measure(url, c, per_level(c))
                    if proxy is not None and row["chunks"]:
                        # CPU per relayed chunk: steadier than latency on a shared machine.
                        used = sum(proxy.cpu_times()[:2]) - cpu0
                        row["proxy_cpu_ms_per_1k_chunks"] = round(used * 1e6 / row["chunks"], 1)
                    progress.advance(task)
            seq = {}
            for name, url in urls.items():
                progress.update(task, description=f"{name}: keep-alive sequence")
                seq[name] = await keepalive(url, 5 if args.quick else 50)
                progress.advance(task)
    return {"levels": levels, "paths": rows, "keepalive": seq, "targets": judge(rows),
            "engine_profile": "null", "router_version": ROUTER_VERSION if router else None}


def show(report: dict[str, Any]) -> None:
    table = Table(title="Proxy overhead (streamed chat, null-profile engine)")
    for col in ("path", "conc", "ok", "TTFT p50", "TTFT p99", "added p50", "added p99", "ITL p50", "ITL p99",
                "req/s", "chunks/s", "CPU ms/1k chunks"):
        table.add_column(col, justify="right" if col not in ("path",) else "left")
    paths = report["paths"]
    for c in report["levels"]:
        direct = paths["direct"][c]
        for name in paths:
            row = paths[name][c]
            table.add_row(name, str(c), f"{row['ok']}/{row['requests']}", _fmt(row["ttft_p50_ms"]),
                          _fmt(row["ttft_p99_ms"]), _added(name, row, direct, "ttft_p50_ms"),
                          _added(name, row, direct, "ttft_p99_ms"),
                          _fmt(row["itl_p50_ms"]), _fmt(row["itl_p99_ms"]), f"{row['requests_per_s']:.0f}",
                          f"{row['chunks_per_s']:.0f}", _fmt(row.get("proxy_cpu_ms_per_1k_chunks")))
    console.print(table)
    seq = Table(title="Streamed requests in a row on one keep-alive connection")
    seq.add_column("path")
    seq.add_column("requests", justify="right")
    seq.add_column("TTFT mean (ms)", justify="right")
    for name, row in report["keepalive"].items():
        seq.add_row(name, str(row["requests"]), _fmt(row["ttft_mean_ms"]))
    console.print(seq)
    verdicts = Table(title="Targets")
    for col in ("target", "measured", "verdict"):
        verdicts.add_column(col)
    for t in report["targets"]:
        verdicts.add_row(t["target"], t.get("measured", ""), t["verdict"])
    console.print(verdicts)


def _added(name: str, row: dict[str, Any], direct: dict[str, Any], key: str) -> str:
    if name == "direct" or row[key] is None or direct[key] is None:
        return "-"
    return f"{row[key] - direct[key]:+.2f}"


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny run (what make test does)")
    parser.add_argument("--no-router", action="store_true", help="skip vllm-router")
    parser.add_argument("--out", type=Path, default=None, help="JSON output path")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    show(report)
    out = args.out or results_dir() / ("overhead-quick.json" if args.quick else "overhead.json")
    out.write_text(json.dumps(report, indent=2))
    console.print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
