"""The demo's request mix: real arrival times and lengths from the Azure LLM inference trace.

Two sources, same shape (seconds since the first request, prompt tokens, output tokens):

- the full trace file when it is around (``AzureLLMInferenceTrace_conv.csv``, one hour,
  19,366 requests; the workspace keeps it beside the checkout in ``../shared/traces``), or
  any file of that format given with ``--trace``;
- otherwise the sample shipped in this package, ``mix.csv``: 400 consecutive requests of
  that trace, the window whose length statistics are closest to the whole hour's (made by
  ``python -m demo.workload make-sample TRACE``; provenance in the file's header).

The Azure trace is CC-BY 4.0 (Microsoft, Azure/AzurePublicDataset); cite Patel et al.,
"Splitwise: Efficient Generative LLM Inference Using Phase Splitting", ISCA 2024.

Replaying: ``load`` multiplies the trace's request rate (1.0 = as recorded, ~5.5 req/s)
and ``speed`` the simulator's clock, so request ``i`` is sent at
``offset_i / (load * speed)`` wall seconds. The trace repeats when it runs out. Lengths
are kept, except that prompt + output is capped to fit the engines' context length.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path

from sim.traces import CONTEXT_LIMIT

#: Where the workspace keeps the full trace, relative to the repository checkout.
REAL_TRACE = Path("../shared/traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv")
SAMPLE_NAME = "mix.csv"
SAMPLE_ROWS = 400


class TraceError(Exception):
    """A trace file the demo cannot use; the message names the file and line."""


@dataclass(frozen=True)
class Row:
    """One request of a trace."""

    offset: float  # seconds since the trace's first request
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Trace:
    """A trace loaded into memory, with where it came from."""

    rows: tuple[Row, ...]
    source: str  # for the status line and the summary

    @property
    def span(self) -> float:
        """Seconds from the first request to the last."""
        return self.rows[-1].offset - self.rows[0].offset if self.rows else 0.0

    @property
    def rate(self) -> float:
        """Requests per second as recorded."""
        return (len(self.rows) - 1) / self.span if self.span > 0 else 0.0


def _parse_time(text: str) -> float:
    """``2023-11-16 18:17:03.9799600`` -> POSIX seconds (7 fractional digits, which
    ``datetime.fromisoformat`` rejects before Python 3.11)."""
    stamp, _, frac = text.strip().partition(".")
    base = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float("0." + frac) if frac else 0.0)


def parse_trace(lines: Sequence[str], source: str) -> Trace:
    """Parse an Azure trace (``TIMESTAMP,ContextTokens,GeneratedTokens``) or a demo mix
    (``offset_s,prompt_tokens,output_tokens``, ``#`` comments allowed).

    Raises:
        TraceError: unknown header, a bad row, or no rows.
    """
    numbered = [(n, line) for n, line in enumerate(lines, 1) if line.strip() and not line.startswith("#")]
    if not numbered:
        raise TraceError(f"{source}: no requests in the file")
    header_no, header = numbered[0]
    columns = [c.strip() for c in header.split(",")]
    azure = columns == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    if not azure and columns != ["offset_s", "prompt_tokens", "output_tokens"]:
        raise TraceError(
            f"{source}:{header_no}: unknown columns {header.strip()!r}; expected the Azure trace's "
            "TIMESTAMP,ContextTokens,GeneratedTokens or offset_s,prompt_tokens,output_tokens"
        )
    rows: list[Row] = []
    first: float | None = None
    for number, fields in zip((n for n, _ in numbered[1:]), csv.reader(line for _, line in numbered[1:]), strict=True):
        try:
            when, prompt, output = fields
            at = _parse_time(when) if azure else float(when)
            row = Row(at, int(prompt), int(output))
        except ValueError:
            raise TraceError(f"{source}:{number}: not a request row: {','.join(fields)!r}") from None
        if row.prompt_tokens < 0 or row.output_tokens < 0:
            raise TraceError(f"{source}:{number}: negative token count")
        first = row.offset if first is None else first
        rows.append(Row(row.offset - first, row.prompt_tokens, row.output_tokens))
    if not rows:
        raise TraceError(f"{source}: no requests in the file")
    if any(b.offset < a.offset for a, b in zip(rows, rows[1:], strict=False)):
        raise TraceError(f"{source}: requests are not in time order")
    return Trace(tuple(rows), source)


def load_trace(path: Path) -> Trace:
    """Read a trace file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc.strerror or exc}") from None
    return parse_trace(text.splitlines(), str(path))


def load_sample() -> Trace:
    """The sample shipped with the package."""
    text = resources.files("demo").joinpath(SAMPLE_NAME).read_text(encoding="utf-8")
    return parse_trace(text.splitlines(), f"packaged sample ({SAMPLE_NAME}, {SAMPLE_ROWS} requests)")


def find_real_trace(checkout: Path | None = None) -> Path | None:
    """The full Azure trace beside the checkout this package runs from, if present."""
    root = checkout or Path(__file__).resolve().parents[1]  # demo/workload.py
    candidate = root / REAL_TRACE
    return candidate.resolve() if candidate.is_file() else None


def choose_trace(option: str) -> Trace:
    """``auto`` (the full trace if found, else the sample), ``sample``, or a path.

    The full trace is replayed from its most typical window on (the one the sample was
    cut from) rather than from its first minute, which is quieter than the hour.
    """
    if option == "sample":
        return load_sample()
    if option == "auto":
        real = find_real_trace()
        if real is None:
            return load_sample()
        trace = load_trace(real)
        return rotated(trace, best_window(trace, SAMPLE_ROWS))
    return load_trace(Path(option))


def rotated(trace: Trace, start: int) -> Trace:
    """The same requests, starting at row ``start`` and wrapping around to the beginning."""
    if start <= 0 or start >= len(trace.rows):
        return trace
    gap = trace.span / max(1, len(trace.rows) - 1)
    head, tail = trace.rows[start:], trace.rows[:start]
    t0 = head[0].offset
    after = head[-1].offset - t0 + gap
    rows = [Row(r.offset - t0, r.prompt_tokens, r.output_tokens) for r in head]
    rows += [Row(after + r.offset, r.prompt_tokens, r.output_tokens) for r in tail]
    return Trace(tuple(rows), f"{trace.source} (from request {start + 1})")


@dataclass(frozen=True)
class Planned:
    """A request to send: when (wall seconds after the start) and how big."""

    index: int
    at: float
    prompt_tokens: int
    output_tokens: int


def fit_lengths(prompt: int, output: int, limit: int = CONTEXT_LIMIT) -> tuple[int, int]:
    """Lengths capped so prompt + output fits the context; the prompt gives way first."""
    output = max(1, min(output, limit // 2))
    prompt = max(1, min(prompt, limit - output))
    return prompt, output


def schedule(trace: Trace, load: float, speed: float, limit: int = CONTEXT_LIMIT) -> Iterator[Planned]:
    """Requests in wall time, forever (the trace repeats, each pass after the last);
    prompt + output capped at ``limit`` tokens."""
    if load <= 0 or speed <= 0:
        raise ValueError("load and speed must be positive")
    scale = 1.0 / (load * speed)
    # One mean gap between passes, so a repeat does not land on the previous pass's end.
    period = trace.span + (trace.span / max(1, len(trace.rows) - 1))
    index = 0
    passes = 0
    while True:
        for row in trace.rows:
            prompt, output = fit_lengths(row.prompt_tokens, row.output_tokens, limit)
            yield Planned(index, (passes * period + row.offset) * scale, prompt, output)
            index += 1
        passes += 1


# ---------------------------------------------------------------------------------------
# Making the packaged sample


def _stats(rows: Sequence[Row]) -> tuple[float, float, float, float]:
    def p90(values: list[int]) -> float:
        return float(statistics.quantiles(values, n=10)[-1])

    ins = [r.prompt_tokens for r in rows]
    outs = [r.output_tokens for r in rows]
    return statistics.fmean(ins), p90(ins), statistics.fmean(outs), p90(outs)


def best_window(trace: Trace, size: int) -> int:
    """The start of the window of ``size`` consecutive rows whose length means and p90s are
    closest (sum of relative errors) to the whole trace's."""
    if len(trace.rows) <= size:
        return 0
    target = _stats(trace.rows)
    best, best_err = 0, float("inf")
    for start in range(0, len(trace.rows) - size + 1, max(1, size // 8)):
        got = _stats(trace.rows[start : start + size])
        err = sum(abs(g - t) / t for g, t in zip(got, target, strict=True))
        if err < best_err:
            best, best_err = start, err
    return best


def sample_text(trace: Trace, size: int = SAMPLE_ROWS) -> str:
    """The packaged sample's file text: a provenance header, then ``size`` rows."""
    start = best_window(trace, size)
    window = trace.rows[start : start + size]
    t0 = window[0].offset
    mean_in, p90_in, mean_out, p90_out = _stats(window)
    header = [
        f"# syshax demo workload: requests {start + 1}-{start + len(window)} (consecutive) of the Azure LLM",
        "# inference trace 2023, conversation service (AzureLLMInferenceTrace_conv.csv, 19,366 requests",
        "# over one hour on 2023-11-16), from Azure/AzurePublicDataset @ b469a113, data/.",
        "# License: CC-BY 4.0. Cite: Patel et al., \"Splitwise: Efficient Generative LLM Inference",
        "# Using Phase Splitting\", ISCA 2024.",
        "# Changes: timestamps became seconds since the window's first request; nothing else.",
        "# The window is the one whose prompt/output means and p90s are closest to the whole hour's.",
        f"# This window: {len(window)} requests over {window[-1].offset - t0:.1f} s; prompt tokens mean "
        f"{mean_in:.0f}, p90 {p90_in:.0f}; output tokens mean {mean_out:.0f}, p90 {p90_out:.0f}.",
        "# Regenerate: python -m demo.workload make-sample PATH/AzureLLMInferenceTrace_conv.csv",
        "offset_s,prompt_tokens,output_tokens",
    ]
    body = [f"{r.offset - t0:.3f},{r.prompt_tokens},{r.output_tokens}" for r in window]
    return "\n".join(header + body) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m demo.workload make-sample TRACE [-o OUT]`` and ``describe``."""
    parser = argparse.ArgumentParser(prog="python -m demo.workload", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make-sample", help="write the packaged sample from the full Azure trace")
    make.add_argument("trace", type=Path)
    make.add_argument("-o", "--output", type=Path, default=Path(__file__).with_name(SAMPLE_NAME))
    describe = sub.add_parser("describe", help="print a trace's size, rate and length statistics")
    describe.add_argument("trace", nargs="?", default="auto", help="auto, sample or a path")
    args = parser.parse_args(argv)
    try:
        if args.command == "make-sample":
            args.output.write_text(sample_text(load_trace(args.trace)), encoding="utf-8")
            print(f"wrote {args.output}")
            return 0
        trace = choose_trace(args.trace)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    mean_in, p90_in, mean_out, p90_out = _stats(trace.rows)
    print(f"{trace.source}: {len(trace.rows)} requests over {trace.span:.0f} s ({trace.rate:.2f} req/s); "
          f"prompt mean {mean_in:.0f} p90 {p90_in:.0f}; output mean {mean_out:.0f} p90 {p90_out:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
