"""Workloads for the virtual-time runner: published traces and synthetic arrival processes.

Formats (``shared/traces/SOURCES.md``):
- Azure LLM inference trace 2023 (``TIMESTAMP,ContextTokens,GeneratedTokens``): arrival
  times are the trace's own, relative to its first request.
- ShareGPT / arXiv length statistics (``num_prefill_tokens,num_decode_tokens,...``):
  lengths only; arrivals are drawn from a Poisson process at ``rate`` requests/s.
- Mooncake (``*.jsonl``, :func:`read_mooncake`): arrival times and lengths, and each
  prompt's blocks named by hash id, so that shared prefixes can be cached.
Everything random takes a seed, so the same seed gives the same workload.

Timestamps on a coarse grid (all whole seconds, say, maybe with a millisecond of jitter)
only say in which cell a request arrived: replayed as recorded, each cell would be a burst
of simultaneous arrivals, so by default such arrivals are spread uniformly (seeded) within
their cell; ``replay="bursts"`` keeps each cell a burst (:mod:`sim.arrival_grid`).
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from sim.arrival_grid import Replay, cell_span, grid_of, scale_keeping_bursts, spread_within_grid
from syshaxd.routing import DEFAULT_LEVEL, ServiceLevel

TRACE_FILES = {
    "azure-conv": "azure_llm_2023/AzureLLMInferenceTrace_conv.csv",
    "sharegpt": "sharegpt_lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
    "arxiv": "arxiv_summarization_lengths/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
}
TRACE_DIR_ENV = "SYSHAX_TRACE_DIR"
#: The tokens (prompt + output) a replayed request may hold: sysHAX's guide runs both engines
#: with --max_model_len=8192 (the shipped profiles' ``max_model_len``), less room for the chat
#: template. The demo and the benchmarks fit each trace request to it.
CONTEXT_LIMIT = 8192 - 64


class TraceError(ValueError):
    """A trace that cannot be read, with what is wrong with it."""


@dataclass(frozen=True)
class TraceRequest:
    """One request of a workload: when it arrives, how long it is, and what its prompt shares.

    ``prefix`` names the prompt's leading blocks of ``prefix_block`` tokens by hash id
    (a Mooncake trace's ``hash_ids``): two requests share a prefix exactly as long as their
    leading ids agree, and an engine with automatic prefix caching need not prefill what
    it still holds of it (:mod:`sim.prefix_cache`). Empty: the prompt shares nothing.
    ``level`` is the request's service class (its targets, priority, whether it may be shed).
    """

    arrival: float  # seconds from the start of the run
    prompt_tokens: int
    output_tokens: int
    prefix: tuple[int, ...] = ()
    prefix_block: int = 512
    level: ServiceLevel = DEFAULT_LEVEL


def trace_dir() -> Path:
    """Where named traces live: ``$SYSHAX_TRACE_DIR``, else the workspace's shared/traces."""
    env = os.environ.get(TRACE_DIR_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "traces"


def _timestamp(text: str) -> float:
    # "2023-11-16 18:15:46.6805900": seven fractional digits, more than datetime parses
    head, _, frac = text.strip().partition(".")
    try:
        base = datetime.strptime(head, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise TraceError(f"unreadable timestamp {text!r}") from None
    return base.timestamp() + (float(f"0.{frac}") if frac else 0.0)


def poisson_arrivals(n: int, rate: float, seed: int = 0) -> list[float]:
    """``n`` arrival times of a Poisson process with ``rate`` requests per second."""
    if rate <= 0:
        raise TraceError(f"arrival rate must be positive, got {rate}")
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def gamma_arrivals(n: int, rate: float, cv: float, seed: int = 0) -> list[float]:
    """Bursty arrivals: gamma-distributed gaps with mean 1/rate and coefficient of variation ``cv``."""
    if rate <= 0 or cv <= 0:
        raise TraceError(f"rate and cv must be positive, got rate={rate}, cv={cv}")
    rng = random.Random(seed)
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate * shape)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.gammavariate(shape, scale)
        out.append(t)
    return out


def _rows(path: Path) -> tuple[list[str], Iterable[list[str]]]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))  # the published traces are a few MB at most
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from None
    if not rows:
        raise TraceError(f"{path} is empty")
    return [h.strip() for h in rows[0]], rows[1:]


#: Prompt tokens per hash id in Mooncake's traces.
MOONCAKE_BLOCK = 512


def _mooncake_int(where: str, row: dict[str, object], field: str, least: int) -> int:
    value = row.get(field)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise TraceError(f"{where}: {field!r} must be a whole number >= {least}, got {value!r}")
    return value


def _mooncake_line(where: str, text: str, block: int) -> tuple[float, TraceRequest]:
    """One line of a Mooncake trace: its timestamp (ms) and the request (arrival not set)."""
    try:
        row = json.loads(text)
    except ValueError as exc:
        raise TraceError(f"{where}: not a JSON object ({exc})") from None
    if not isinstance(row, dict):
        raise TraceError(f"{where}: expected a JSON object, got {type(row).__name__}")
    stamp = row.get("timestamp")
    if not isinstance(stamp, (int, float)) or isinstance(stamp, bool) or not 0 <= stamp < math.inf:
        raise TraceError(f"{where}: 'timestamp' must be milliseconds >= 0, got {stamp!r}")
    prompt = _mooncake_int(where, row, "input_length", 0)
    output = _mooncake_int(where, row, "output_length", 0)
    ids = row.get("hash_ids", [])
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        raise TraceError(f"{where}: 'hash_ids' must be a list of whole numbers, got {ids!r}")
    if len(ids) > -(-prompt // block):
        raise TraceError(f"{where}: {len(ids)} hash_ids for input_length {prompt}: more than its "
                         f"{-(-prompt // block)} blocks of {block} tokens")
    return float(stamp), TraceRequest(0.0, max(1, prompt), max(1, output), tuple(ids), block)


def read_mooncake(path: Path, *, limit: int | None = None, block: int = MOONCAKE_BLOCK) -> list[TraceRequest]:
    """The requests of a Mooncake-format trace, arrivals in seconds from the first, as recorded.

    One JSON object per line: ``timestamp`` (milliseconds since the trace began),
    ``input_length`` and ``output_length`` (tokens) and ``hash_ids``, one id per ``block``
    (512) prompt tokens, the last block possibly partial: two requests share a prefix
    exactly as long as their leading ids agree. Found in kvcache-ai/Mooncake
    (``FAST25-release/README.md`` and the traces in ``FAST25-release/traces``: 6,758
    input tokens carry 14 ids) and in ai-dynamo/dynamo's trace tools
    (``benchmarks/data_generator/README.md``: milliseconds, blocks of 512). Other fields
    are ignored, blank lines skipped, ``hash_ids`` may be missing (nothing shared) or
    shorter than the prompt (its tail shares nothing). Requests are ordered by timestamp
    (the file's order among equal ones); lengths below 1 become 1, as in the other traces.

    Raises:
        TraceError: the file cannot be read, has no request, or a line is malformed
            (``path:line: what is wrong``).
    """
    stamped: list[tuple[float, TraceRequest]] = []
    try:
        with path.open(encoding="utf-8") as handle:
            for number, text in enumerate(handle, start=1):
                if limit is not None and len(stamped) >= limit:
                    break
                if text.strip():
                    stamped.append(_mooncake_line(f"{path}:{number}", text, block))
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"cannot read trace {path}: {exc}") from None
    if not stamped:
        raise TraceError(f"{path} has no requests")
    stamped.sort(key=lambda pair: pair[0])
    t0 = stamped[0][0]
    return [replace(r, arrival=(t - t0) / 1000.0) for t, r in stamped]


def _replay(times: list[float], out: list[TraceRequest], rate: float | None, seed: int,
            time_scale: float, replay: Replay) -> list[TraceRequest]:
    """Recorded arrivals (from 0, in order) off their grid as ``replay`` says, at ``rate``, times ``time_scale``."""
    grid = grid_of(times)
    if grid is not None and replay == "spread":
        times, grid = spread_within_grid(times, grid, random.Random(seed)), None
    span = times[-1] if grid is None else cell_span(times, grid)
    factor = (len(times) - 1) / span / rate if rate is not None and len(times) > 1 and span > 0 else 1.0
    times = [t * factor for t in times] if grid is None else scale_keeping_bursts(times, grid, factor)
    return [replace(r, arrival=t * time_scale) for t, r in zip(times, out, strict=True)]


def load_trace(
    name_or_path: str,
    *,
    limit: int | None = None,
    rate: float | None = None,
    seed: int = 0,
    time_scale: float = 1.0,
    replay: Replay = "spread",
) -> list[TraceRequest]:
    """Read a trace by name (``azure-conv``, ``sharegpt``, ``arxiv``) or path (a ``.jsonl`` one is Mooncake's).

    Args:
        limit: keep the first ``limit`` requests.
        rate: requests/s of the Poisson arrivals for length-only traces (default 1.0);
            for timestamped traces, rescales the arrivals to this mean rate.
        seed: seed of the drawn arrivals.
        time_scale: multiplies arrival times (0.5 = twice as dense).
        replay: timestamps on a coarse grid: ``spread`` within their cells (seeded), or
            each cell a ``bursts`` of arrivals as recorded (:mod:`sim.arrival_grid`).
    """
    path = Path(name_or_path) if name_or_path not in TRACE_FILES else trace_dir() / TRACE_FILES[name_or_path]
    if path.suffix == ".jsonl":
        mooncake = read_mooncake(path, limit=limit)
        return _replay([r.arrival for r in mooncake], mooncake, rate, seed, time_scale, replay)
    header, rows = _rows(path)
    out: list[TraceRequest] = []
    if header[:3] == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]:
        stamps: list[float] = []
        for i, row in enumerate(rows, start=2):
            if limit is not None and len(out) >= limit:
                break
            try:
                stamps.append(_timestamp(row[0]))
                out.append(TraceRequest(0.0, max(1, int(row[1])), max(1, int(row[2]))))
            except (IndexError, ValueError):
                raise TraceError(f"{path}:{i}: expected TIMESTAMP,ContextTokens,GeneratedTokens") from None
        if not out:
            raise TraceError(f"{path} has no requests")
        t0 = stamps[0]
        return _replay([t - t0 for t in stamps], out, rate, seed, time_scale, replay)
    if header[:2] == ["num_prefill_tokens", "num_decode_tokens"]:
        for i, row in enumerate(rows, start=2):
            if limit is not None and len(out) >= limit:
                break
            try:
                out.append(TraceRequest(0.0, max(1, int(row[0])), max(1, int(row[1]))))
            except (IndexError, ValueError):
                raise TraceError(f"{path}:{i}: expected num_prefill_tokens,num_decode_tokens,...") from None
        if not out:
            raise TraceError(f"{path} has no requests")
        times = poisson_arrivals(len(out), rate if rate is not None else 1.0, seed)
        return [TraceRequest(t * time_scale, r.prompt_tokens, r.output_tokens) for t, r in zip(times, out, strict=True)]
    raise TraceError(f"{path}: unknown trace format (header {','.join(header[:4])})")


def synthetic(
    n: int,
    rate: float,
    *,
    prompt_tokens: int = 1024,
    output_tokens: int = 256,
    spread: float = 0.0,
    cv: float = 1.0,
    seed: int = 0,
) -> list[TraceRequest]:
    """``n`` requests at ``rate``/s (Poisson when ``cv`` is 1, gamma otherwise).

    Lengths are fixed, or lognormal around the given medians when ``spread`` (sigma) > 0.
    """
    times = poisson_arrivals(n, rate, seed) if cv == 1.0 else gamma_arrivals(n, rate, cv, seed)
    rng = random.Random(seed + 1)

    def draw(median: int) -> int:
        return median if spread <= 0 else max(1, round(median * math.exp(rng.gauss(0.0, spread))))

    return [TraceRequest(t, draw(prompt_tokens), draw(output_tokens)) for t in times]


def burst(n: int, prompt_tokens: int, output_tokens: int) -> list[TraceRequest]:
    """``n`` identical requests arriving together at t=0 (a benchmark's ``--num-prompts``)."""
    return [TraceRequest(0.0, prompt_tokens, output_tokens) for _ in range(n)]


def describe(requests: Sequence[TraceRequest]) -> dict[str, float]:
    """Count, span, mean rate and mean lengths of a workload."""
    if not requests:
        return {"requests": 0}
    span = requests[-1].arrival - requests[0].arrival
    return {
        "requests": len(requests),
        "span_s": span,
        "rate_per_s": (len(requests) - 1) / span if span > 0 else math.inf,
        "prompt_mean": sum(r.prompt_tokens for r in requests) / len(requests),
        "output_mean": sum(r.output_tokens for r in requests) / len(requests),
    }
