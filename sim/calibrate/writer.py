"""Turn fitted constants into a profile file the simulator loads (``--profile PATH``).

The simulator computes with physical-looking figures (FLOP/s, bytes/s, efficiencies); a
calibrated profile writes *effective* ones: efficiencies of 1, a FLOP rate and a bandwidth
that give the measured seconds. Model figures the engine reports (llama.cpp's parameter
count, file size, width) are used; the rest come from a base profile, and so do the
figures calibrate does not measure (hand-off link, swap space, answer lengths), with their
sources. What was measured, when, and how well the profile fits it go in a
``calibration`` section the loader ignores.
"""

from __future__ import annotations

import copy
from dataclasses import asdict
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sim.calibrate.engine_info import EngineFacts
from sim.calibrate.fit import FitResult
from sim.calibrate.measure import Measurements
from sim.calibrate.quality import TermFit
from sim.profile import Profile, ProfileError, load_profile, parse_profile

TINY = 1e-12  # stand-in for a constant the fit found to be zero (the loader wants positive figures)
LLAMACPP_BATCH = 2048  # llama-server's default -b; its API does not report the value in use


def base_data(name_or_path: str) -> dict[str, Any]:
    """The base profile's YAML as a mapping (checked by loading it first)."""
    load_profile(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        text = Path(name_or_path).read_text(encoding="utf-8")
    else:
        text = resources.files("sim").joinpath(f"profiles/{name_or_path}.yaml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def _num(value: float | int, source: str) -> dict[str, Any]:
    return {"value": value, "source": source}


def _model(data: dict[str, Any], base: Profile, facts: EngineFacts, tag: str) -> None:
    model = data["model"]
    if facts.n_params:
        model["parameters"] = _num(facts.n_params, f"{tag}: n_params of /v1/models")
        model["linear_flops_per_token"] = _num(2.0 * facts.n_params, f"{tag}: 2 x n_params of /v1/models")
    if facts.model_bytes:
        model["weight_bytes"] = _num(float(facts.model_bytes), f"{tag}: size of /v1/models")
    if facts.hidden_size:
        model["hidden_size"] = _num(facts.hidden_size, f"{tag}: n_embd of /v1/models")


def build(base_name: str, facts: EngineFacts, result: FitResult, *, name: str, tag: str,
          device: str | None = None) -> dict[str, Any]:
    """The profile's YAML mapping (without the calibration record); checked by the loader."""
    data = copy.deepcopy(base_data(base_name))
    base = load_profile(base_name)
    c = result.constants
    data.update(name=name, device=device or base.device,
                summary=f"calibrated from {facts.dialect} at {facts.url} ({tag})", model_name=facts.model or base.model_name)
    data.pop("moe", None)  # the fit sees one dense step model
    _model(data, base, facts, tag)
    flops_per_token = float(data["model"]["linear_flops_per_token"]["value"])
    weight_bytes = float(data["model"]["weight_bytes"]["value"])
    peak = flops_per_token / max(c.prefill_per_token, TINY)
    bandwidth = weight_bytes / max(c.decode_floor, TINY)
    kv_bytes = max(c.kv_per_token * bandwidth, TINY * bandwidth)
    capacity = facts.kv_capacity_tokens or base.kv_capacity_tokens
    # Hand-off and swap are priced per KV byte: keep their per-token cost and room as the base had them.
    scale = kv_bytes / base.kv_bytes_per_token
    data["model"]["kv_bytes_per_token"] = _num(kv_bytes, f"{tag}: effective, from decode step time vs context")
    data["model"]["attention_flops_coeff"] = _num(c.attention * peak, f"{tag}: fit of TTFT vs prompt length (n^2 term)")
    hw = data["hardware"]
    hw.update(
        devices=_num(1, f"{tag}: the engine measured as one device"),
        peak_flops=_num(peak, f"{tag}: effective (peak x efficiency), from TTFT vs prompt length"),
        compute_efficiency=_num(1.0, f"{tag}: folded into peak_flops"),
        memory_bandwidth=_num(bandwidth, f"{tag}: effective, from the decode step's fixed part"),
        memory_efficiency=_num(1.0, f"{tag}: folded into memory_bandwidth"),
        allreduce_latency=_num(0.0, f"{tag}: folded into the measured step times"),
        step_overhead=_num(c.step_overhead, f"{tag}: shared intercept of TTFT and decode step"),
        per_seq_overhead=_num(c.per_seq_overhead, f"{tag}: decode step time vs batch size"),
        kv_cache_bytes=_num(capacity * kv_bytes, f"{tag}: {capacity} tokens of KV cache"
                            + (" reported by the engine" if facts.kv_capacity_tokens else f" as in {base_name}")),
        handoff_bandwidth=_num(base.handoff_bandwidth * scale, f"{base_name}'s per-token hand-off time, kept"),
    )
    eng = data["engine"]
    if facts.max_num_seqs:
        eng["max_num_seqs"] = _num(facts.max_num_seqs, f"{tag}: slots the engine reports")
    if facts.max_model_len:
        eng["max_model_len"] = _num(facts.max_model_len, f"{tag}: context per request the engine reports")
    if facts.block_size:
        eng["block_size"] = _num(facts.block_size, f"{tag}: block_size of cache_config_info")
    if facts.dialect == "llamacpp":
        eng["max_num_batched_tokens"] = _num(LLAMACPP_BATCH, "llama-server's default -b (its API does not report it)")
    eng["swap_bytes"] = _num(base.swap_bytes * scale, f"{base_name}'s swap room in tokens, kept")
    try:
        parse_profile(data, name)
    except ProfileError as exc:
        raise ProfileError(f"the fitted constants make no valid profile: {exc}") from None
    return data


def record(facts: EngineFacts, measured: Measurements, result: FitResult, quality: list[TermFit]) -> dict[str, Any]:
    """The ``calibration`` section: what was measured, when, the constants and the fit."""
    when = datetime.fromtimestamp(measured.started_at, tz=timezone.utc)
    return {
        "measured_at": when.isoformat(timespec="seconds"),
        "engine": {"url": facts.url, "dialect": facts.dialect, "model": facts.model},
        "duration_s": round(measured.duration, 2),
        "probes_skipped_by_budget": measured.skipped,
        "constants_s": {k: float(f"{v:.6g}") for k, v in asdict(result.constants).items()},
        "api_overhead_note": "api_overhead_folded_s: TTFT per request beyond the step model, folded into the "
                             "prefill constants (the simulator has no per-request cost)",
        "fit": [{"term": q.term, "points": q.points, "r2": round(q.r2, 4), "median_rel_error": round(q.median_error, 4),
                 "max_rel_error": round(q.max_error, 4)} for q in quality],
        "prefill_points": [[p.prompt_tokens, float(f"{p.ttft_s:.6g}"), p.samples] for p in result.prefill_used],
        "decode_points": [[p.batch, round(p.context, 1), float(f"{p.step_s:.6g}"), p.samples]
                          for p in result.decode_used],
        "left_out": {"prefill": [p.prompt_tokens for p in result.prefill_left_out],
                     "decode": [[p.batch, round(p.context, 1)] for p in result.decode_left_out]},
    }


def write(path: Path, data: dict[str, Any], calibration: dict[str, Any]) -> None:
    """Write the profile with its calibration record."""
    header = (f"# {data['name']}: written by `syshax calibrate` on {calibration['measured_at']}.\n"
              "# Figures marked 'calibrate' are effective values fitted to measured step times\n"
              "# (see docs/calibrate.md); the `calibration` section records the measurements.\n")
    body = yaml.safe_dump({**data, "calibration": calibration}, sort_keys=False, default_flow_style=None, width=110)
    path.write_text(header + body, encoding="utf-8")
