"""The summary a calibration prints: the fitted constants, how well they fit, what was written."""

from __future__ import annotations

from rich.table import Table

from sim.calibrate.calibrate import Calibration


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.4g} ms"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.4g} µs"


def summary_table(cal: Calibration) -> Table:
    """Constants, fit quality per term, and the engine's reported limits."""
    c = cal.result.constants
    f = cal.facts
    table = Table(title=f"calibrated {f.dialect} at {f.url} in {cal.measured.duration:.0f} s -> {cal.path}")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_column("from")
    table.add_row("prefill per token", _us(c.prefill_per_token),
                  f"{len(cal.result.prefill_used)} prompt lengths (API overhead folded in)")
    table.add_row("attention per n·(c+n/2)", f"{c.attention:.3g} s", "TTFT's curvature")
    table.add_row("decode step, fixed part", _ms(c.decode_base), f"{len(cal.result.decode_used)} batch/context points")
    table.add_row("decode step, per sequence", _us(c.per_seq_overhead), "step time vs batch size")
    table.add_row("decode step, per KV token", _us(c.kv_per_token), "step time vs context")
    table.add_row("API overhead per request", _ms(cal.raw_api_overhead), "TTFT intercept beyond the step model")
    for q in cal.quality:
        table.add_row(f"fit: {q.term}", f"R² {q.r2:.3f}", f"rel. error median {q.median_error:.1%}, max {q.max_error:.1%}")
    kv = f"{f.kv_capacity_tokens:,} tokens" if f.kv_capacity_tokens else "not reported (base profile's)"
    table.add_row("KV cache", kv, "engine API")
    table.add_row("sequences at once", str(cal.profile.max_num_seqs), "engine API" if f.max_num_seqs else "base profile")
    table.add_row("context per request", f"{cal.profile.max_model_len:,}", "engine API" if f.max_model_len else "base profile")
    for name, (low, high) in cal.stability.ranges().items():
        table.add_row(f"over {len(cal.stability.fits)} repeats: {name}", f"{_us(low)} - {_us(high)}",
                      "each repeat fitted alone")
    if cal.measured.skipped:
        table.add_row("probes left out", str(cal.measured.skipped), "the budget ran out (--budget)")
    return table
