"""Workloads for the scheduling benchmark: real traces replayed at a chosen request rate.

Three workloads, each a list of requests (arrival second, prompt tokens, output tokens):

- ``azure-conv`` — the Azure LLM inference trace 2023, conversation service (one hour,
  19,366 requests; Patel et al., "Splitwise", ISCA 2024; CC-BY 4.0): real arrival times
  and lengths. A window of consecutive requests is replayed with its inter-arrival gaps
  scaled so that the window's mean rate is the requested one (burstiness is kept).
- ``sharegpt`` — the ShareGPT length distribution (Sarathi-Serve's "8k filtered" stats,
  Llama-2 tokenizer; Apache-2.0) with seeded Poisson arrivals: no timestamps exist.
- ``azure-reasoning`` — the Azure trace with every output multiplied by
  ``REASONING_SCALE``: a distilled reasoning model (DeepSeek-R1-Distill) writes its think
  block before the answer, so answers run to thousands of tokens (SOURCES.md: none of the
  traces comes from a reasoning model).

A fourth kind is any file in Mooncake's format (``mooncake:PATH``, JSON lines with
``timestamp`` in ms, lengths and the prompt's 512-token blocks as ``hash_ids``; Qin et al.,
"Mooncake", FAST 2025, whose traces come from Kimi's service): real arrival times, replayed
as Azure's (a seeded window, gaps scaled to the offered rate), and each request's prompt
blocks, which the simulated GPU engine caches as vLLM's automatic prefix caching does.

Every request is made to fit the engines' context (``CONTEXT_LIMIT``): the output is kept
and the prompt cut, as a client trims its history (a Mooncake prompt keeps the hash ids of
the blocks left). The same seed gives the same requests.

A trace whose timestamps sit on a coarse grid (every one a whole second, say, maybe with
a millisecond of jitter) records when a request arrived only to within its grid cell;
replayed as is, every cell becomes a burst of simultaneous arrivals. By default such a
trace's arrivals are spread uniformly within their cell (seeded), which keeps every
cell's count and so the trace's burstiness at the grid's own scale; ``replay="bursts"``
(``--grid-replay bursts``) keeps each cell the burst it was recorded as
(:mod:`sim.arrival_grid`, ``Source.grid``). The Azure 2023 trace has sub-second
timestamps and is replayed as recorded.

``azure-bursts`` is the Azure conversation trace with its arrivals grouped into cells of
``BURST_CELL`` seconds, every request of a cell arriving at the cell's start within
``BURST_JITTER`` (up to 27 requests at one instant, 11 in the median cell): what a client
that batches its calls, or a trace logged on a coarse clock, sends. Its cells are
replayed as bursts, whatever the rate: the cells move apart or together, each burst stays
a burst.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cached_property
from pathlib import Path

from sim.arrival_grid import (
    Grid,
    Replay,
    cell_span,
    grid_of,
    scale_keeping_bursts,
    spread_within_grid,
)
from sim.traces import CONTEXT_LIMIT, MOONCAKE_BLOCK, TraceError, read_mooncake
from syshaxd.routing import DEFAULT_LEVEL, ServiceLevel

AZURE_FILE = Path("azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
SHAREGPT_FILE = Path("sharegpt_lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv")
ARXIV_FILE = Path("arxiv_summarization_lengths/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv")
#: Output length multiplier of the reasoning variant: the Azure mean of 211 tokens becomes
#: ~2,100, its p99 ~6,000 (capped by the context).
REASONING_SCALE = 10
#: Seconds of the bursty workload's cells, and how far (seconds) a burst's arrivals spread.
BURST_CELL = 2.0
BURST_JITTER = 0.001
WORKLOADS: tuple[str, ...] = ("azure-conv", "sharegpt", "azure-reasoning", "azure-bursts")
#: Workloads no policy was tuned on, for checking a result on data it has not seen:
#: ``arxiv`` — arXiv summarisation lengths (Sarathi-Serve's stats; long prompts, short
#: answers) with seeded Poisson arrivals. Run them with ``--workloads``.
HELD_OUT: tuple[str, ...] = ("arxiv",)
#: Share of ``--requests`` a run of each workload replays: reasoning answers are ten times
#: longer, so half as many requests still make a run of comparable virtual length.
RUN_SHARE: dict[str, float] = {"azure-reasoning": 0.5}
#: A workload ``mooncake:PATH`` replays the Mooncake-format file at PATH.
MOONCAKE = "mooncake:"


def run_size(workload: str, requests: int) -> int:
    """Requests per run of ``workload`` when the benchmark asks for ``requests``."""
    return max(2, round(requests * RUN_SHARE.get(workload, 1.0)))


class WorkloadError(Exception):
    """A trace directory or file the benchmark cannot use; the message says what to do."""


@dataclass(frozen=True)
class Request:
    """One request of a workload."""

    arrival: float  # seconds since the first request
    prompt_tokens: int
    output_tokens: int
    prefix: tuple[int, ...] = ()  # the prompt's blocks of 512 tokens by hash id (Mooncake traces)
    level: ServiceLevel = DEFAULT_LEVEL  # its service class (mixed workloads)


@dataclass(frozen=True)
class Source:
    """A trace's rows as loaded: gaps between arrivals (may be empty) and lengths."""

    name: str
    gaps: tuple[float, ...]  # seconds between consecutive requests; empty = no timestamps
    lengths: tuple[tuple[int, int], ...]  # (prompt tokens, output tokens)
    citation: str
    grid: Grid | None = None  # the timestamps' grid when it is coarse (times from the first request)
    prefixes: tuple[tuple[int, ...], ...] = ()  # per request, when the trace names prompt blocks
    replay: Replay = "spread"  # a grid's cells: spread within them, or kept as bursts

    @cached_property
    def stamps(self) -> tuple[float, ...]:
        """Arrival times as recorded, in seconds from the first request (empty without timestamps)."""
        if not self.gaps:
            return ()
        out = [0.0]
        for gap in self.gaps:
            out.append(out[-1] + gap)
        return tuple(out)


def _fit(prompt: int, output: int) -> tuple[int, int]:
    output = max(1, min(output, CONTEXT_LIMIT - 1))
    prompt = max(1, min(prompt, CONTEXT_LIMIT - output))
    return prompt, output


def _open(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    except FileNotFoundError:
        raise WorkloadError(f"trace file {path} not found (see --traces)") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise WorkloadError(f"cannot read trace file {path}: {exc}") from None


def _int(path: Path, line: int, row: dict[str, str], column: str) -> int:
    try:
        value = int(row[column])
    except (KeyError, TypeError, ValueError):
        raise WorkloadError(f"{path}:{line}: column {column!r} must be a whole number, got {row.get(column)!r}") from None
    if value < 0:
        raise WorkloadError(f"{path}:{line}: column {column!r} must not be negative, got {value}")
    return value


def _stamp(path: Path, line: int, text: str | None, days: dict[str, float]) -> float:
    # ``2023-11-16 18:17:03.9799600``: seven fractional digits, which fromisoformat rejects
    # before 3.11; strptime per row costs seconds on the whole trace, so only the date is
    # parsed (once per day) and the time of day is plain arithmetic.
    try:
        day, _, clock = (text or "").strip().partition(" ")
        if day not in days:
            days[day] = datetime.strptime(day, "%Y-%m-%d").timestamp()
        hms, _, frac = clock.partition(".")
        h, m, sec = (int(x) for x in hms.split(":"))
        if not (0 <= h < 24 and 0 <= m < 60 and 0 <= sec < 61 and (not frac or frac.isdigit())):
            raise ValueError(clock)
        return days[day] + h * 3600 + m * 60 + sec + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise WorkloadError(f"{path}:{line}: TIMESTAMP {text!r} is not 'YYYY-MM-DD HH:MM:SS.fffffff'") from None


def load_azure(traces: Path) -> Source:
    """The Azure 2023 conversation trace: arrival gaps and (prompt, output) lengths."""
    path = traces / AZURE_FILE
    rows = _open(path)
    if len(rows) < 2:
        raise WorkloadError(f"{path}: needs at least two requests, found {len(rows)}")
    days: dict[str, float] = {}
    stamps = [_stamp(path, i + 2, r.get("TIMESTAMP"), days) for i, r in enumerate(rows)]
    gaps = tuple(max(0.0, b - a) for a, b in zip(stamps, stamps[1:], strict=False))
    lengths = tuple(
        _fit(_int(path, i + 2, r, "ContextTokens"), _int(path, i + 2, r, "GeneratedTokens")) for i, r in enumerate(rows)
    )
    relative = [t - stamps[0] for t in stamps]
    return Source("azure-conv", gaps, lengths, "Azure LLM inference trace 2023 (conv), CC-BY 4.0, Splitwise ISCA'24",
                  grid=grid_of(relative))


def load_lengths(traces: Path, name: str, file: Path, citation: str) -> Source:
    """A length-statistics trace (``num_prefill_tokens,num_decode_tokens,...``; no timestamps)."""
    path = traces / file
    rows = _open(path)
    if not rows:
        raise WorkloadError(f"{path}: no requests")
    lengths = tuple(
        _fit(_int(path, i + 2, r, "num_prefill_tokens"), _int(path, i + 2, r, "num_decode_tokens"))
        for i, r in enumerate(rows)
    )
    return Source(name, (), lengths, citation)


def load_sharegpt(traces: Path) -> Source:
    """The ShareGPT length distribution (no timestamps)."""
    return load_lengths(traces, "sharegpt", SHAREGPT_FILE,
                        "ShareGPT 8k-filtered length stats (Sarathi-Serve), Apache-2.0")


def reasoning(source: Source, scale: int = REASONING_SCALE) -> Source:
    """The same arrivals and prompts with outputs ``scale`` times longer (within the context)."""
    lengths = tuple(_fit(p, o * scale) for p, o in source.lengths)
    return Source("azure-reasoning", source.gaps, lengths, f"{source.citation}; outputs x{scale}", source.grid)


def bursts(source: Source, cell: float = BURST_CELL, jitter: float = BURST_JITTER) -> Source:
    """``source``'s requests with each cell of ``cell`` seconds arriving at its start, within ``jitter`` seconds.

    The jitter is drawn once with a fixed seed (the workload is one trace; the run's seed
    picks its window), and the requests are taken in their new order.
    """
    rng = random.Random(0)
    moved = sorted((math.floor(t / cell) * cell + rng.random() * jitter, i) for i, t in enumerate(source.stamps))
    stamps = [t - moved[0][0] for t, _ in moved]
    gaps = tuple(b - a for a, b in zip(stamps, stamps[1:], strict=False))
    lengths = tuple(source.lengths[i] for _, i in moved)
    return Source("azure-bursts", gaps, lengths, f"{source.citation}; arrivals in bursts, one per {cell:g} s cell",
                  grid=grid_of(stamps), replay="bursts")


def load_mooncake(name: str) -> Source:
    """A Mooncake-format trace (``name`` is ``mooncake:PATH``): arrival gaps, lengths and prompt blocks."""
    path = Path(name[len(MOONCAKE):])
    try:
        rows = read_mooncake(path)
    except TraceError as exc:
        raise WorkloadError(str(exc)) from None
    if len(rows) < 2:
        raise WorkloadError(f"{path}: needs at least two requests, found {len(rows)}")
    gaps = tuple(b.arrival - a.arrival for a, b in zip(rows, rows[1:], strict=False))
    lengths = tuple(_fit(r.prompt_tokens, r.output_tokens) for r in rows)
    # a cut prompt keeps the ids of its blocks that are left
    prefixes = tuple(r.prefix[: -(-p // MOONCAKE_BLOCK)] for r, (p, _) in zip(rows, lengths, strict=True))
    return Source(name, gaps, lengths, f"Mooncake-format trace {path.name} (Qin et al., FAST'25)",
                  grid=grid_of([r.arrival for r in rows]), prefixes=prefixes)


def choose(names: str) -> list[str]:
    """The workloads of a comma-separated ``--workloads`` (raises ValueError with a message for the user)."""
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    known = WORKLOADS + HELD_OUT
    unknown = [n for n in chosen if n not in known and not n.startswith(MOONCAKE)]
    if unknown or not chosen:
        raise ValueError(f"unknown workload {', '.join(unknown) or repr(names)}; choose from "
                         f"{', '.join(known)} or {MOONCAKE}PATH")
    missing = [n for n in chosen if n.startswith(MOONCAKE) and not Path(n[len(MOONCAKE):]).is_file()]
    if missing:
        raise ValueError(f"no such trace file: {', '.join(n[len(MOONCAKE):] for n in missing)}")
    return chosen


def load(name: str, traces: Path, replay: Replay = "spread") -> Source:
    """A workload's source by name (one of ``WORKLOADS`` or ``HELD_OUT``, or ``mooncake:PATH``).

    ``replay`` says what becomes of a trace whose timestamps sit on a coarse grid (spread
    within the cells, or kept as bursts); ``azure-bursts`` is made of bursts and keeps them.
    """
    if name.startswith(MOONCAKE):
        return replace(load_mooncake(name), replay=replay)
    if not traces.is_dir():
        raise WorkloadError(
            f"trace directory {traces} does not exist: pass --traces DIR (the workspace keeps "
            "the traces in ../shared/traces beside the checkout)"
        )
    if name == "azure-conv":
        return replace(load_azure(traces), replay=replay)
    if name == "azure-bursts":
        return bursts(load_azure(traces))
    if name == "sharegpt":
        return load_sharegpt(traces)
    if name == "azure-reasoning":
        return replace(reasoning(load_azure(traces)), replay=replay)
    if name == "arxiv":
        return load_lengths(traces, "arxiv", ARXIV_FILE, "arXiv summarisation length stats (Sarathi-Serve), Apache-2.0")
    raise WorkloadError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS + HELD_OUT)} or {MOONCAKE}PATH")


def requests_at(source: Source, rate: float, count: int, seed: int) -> list[Request]:
    """``count`` requests of ``source`` offered at ``rate`` requests/s on average.

    With timestamps, a seeded window of consecutive requests keeps its own gaps, scaled so
    that the window's mean rate is ``rate`` (on a coarse grid: spread within the cells, or
    the cells' bursts kept and only the cells moved, as ``source.replay`` says). Without,
    lengths are drawn with replacement and arrivals are Poisson. The seed alone decides
    which requests: a sweep over rates replays the same requests faster or slower.
    """
    if rate <= 0:
        raise ValueError(f"rate must be positive, got {rate}")
    rng = random.Random(seed)
    n = len(source.lengths)
    if source.gaps:
        count = min(count, n)
        start = rng.randrange(0, n - count + 1)
        picked: Sequence[int] = range(start, start + count)
        arrivals = _window(source, start, count, rate, rng)
    else:
        picked = [rng.randrange(n) for _ in range(count)]
        arrivals = [0.0]
        for _ in range(count - 1):
            arrivals.append(arrivals[-1] + rng.expovariate(1.0))
        arrivals = [a / rate for a in arrivals]
    prefixes = source.prefixes
    return [Request(t, *source.lengths[i], prefixes[i] if prefixes else ()) for t, i in zip(arrivals, picked, strict=True)]


def _window(source: Source, start: int, count: int, rate: float, rng: random.Random) -> list[float]:
    """Arrivals (from 0) of ``count`` recorded requests from ``start``, scaled to a mean of ``rate``/s."""
    gaps: Sequence[float] = source.gaps[start : start + count - 1]
    grid = source.grid
    if grid is not None:
        stamps = source.stamps[start : start + count]
        if source.replay == "bursts":
            span = cell_span(stamps, grid)
            return scale_keeping_bursts(stamps, grid, (count - 1) / rate / span if span > 0 else 0.0)
        times = spread_within_grid(stamps, grid, rng)
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    span = sum(gaps)
    factor = (len(gaps) / rate) / span if span > 0 else 0.0
    arrivals = [0.0]
    for gap in gaps:
        arrivals.append(arrivals[-1] + gap * factor)
    return arrivals
