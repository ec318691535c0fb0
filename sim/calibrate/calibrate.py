"""One calibration, start to end: check what answers and that it is idle, measure in repeats
until the fits agree, fit, write the profile.

The command line (:mod:`sim.calibrate.cli`) and the tests call :func:`calibrate`; it
raises :class:`CalibrateError` with a message for the user when the URL is syshaxd rather
than an engine, the device asked for contradicts the engine's own, the engine is busy,
unreachable, or gave too little to fit (each but the last overridden by ``force``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from sim.calibrate.engine_info import (
    EngineFacts,
    EngineInfoError,
    Load,
    detect_dialect,
    read_facts,
    read_load,
)
from sim.calibrate.fit import Constants, FitError, FitResult, fit
from sim.calibrate.identity import BoxEngine, box_engines, reported_device
from sim.calibrate.measure import Measurements, Plan, Progress, make_plan, run_plan
from sim.calibrate.nnls import nnls
from sim.calibrate.probe import ProbeError
from sim.calibrate.quality import TermFit, profile_fit
from sim.calibrate.stability import REPEATS, SPREAD, Stability, judge
from sim.calibrate.writer import LLAMACPP_BATCH, build, record, write
from sim.profile import Profile, ProfileError, load_profile

DEFAULT_BASE = {"llamacpp": "cpu-kunpeng920-q4", "vllm-v1": "gpu-a100"}


class CalibrateError(Exception):
    """Calibration cannot go on; the message says why and what to do."""


@dataclass(frozen=True)
class Options:
    """What to measure and where to write it."""

    url: str
    dialect: str = "auto"
    out: Path | None = None
    name: str | None = None
    base: str | None = None
    device: str | None = None
    model: str | None = None
    budget: float = 120.0
    max_prompt: int = 2048
    max_batch: int = 16
    decode_tokens: int = 64
    rounds: int = 3
    settle: float = 20.0
    force: bool = False
    repeats: int = REPEATS  # the most repeats measured before giving up on agreement
    spread: float = SPREAD  # the largest spread of the repeats' predictions called stable


Phase = Callable[[str], None]


@dataclass(frozen=True)
class Calibration:
    """What a calibration found and wrote."""

    facts: EngineFacts
    measured: Measurements
    result: FitResult
    raw_api_overhead: float  # TTFT intercept beyond the step model, before folding
    quality: list[TermFit]
    profile: Profile
    path: Path
    stability: Stability
    notes: tuple[str, ...] = ()  # what was overridden (--force) or taken from the engine


def busy_message(url: str, load: Load) -> str:
    """Why calibrate refuses a serving engine."""
    return (f"{url} is serving traffic ({load.running} running, {load.waiting} waiting): calibrating now would "
            "slow those requests down and measure them instead of the engine alone. Run it when the engine "
            "is idle (drain it from the conductor first), or pass --force to measure anyway.")


def box_message(url: str, who: str, engines: list[BoxEngine]) -> str:
    """Why calibrate refuses syshaxd, naming the engines to calibrate instead."""
    each = "; ".join(f"syshax calibrate {e.url} --device {e.device}" if e.url else f"engine {e.name} ({e.device})"
                     for e in engines)
    return (f"{url} is {who}, the box in front of the engines, not an engine: calibrating it would fit one "
            f"engine's constants to the whole box. Calibrate each engine instead: {each or 'see syshax status'} "
            "(--force measures the box anyway).")


def _who(client: httpx.Client, opts: Options, notes: list[str]) -> str | None:
    """The device to write: the one asked for, else the engine's own; refuses syshaxd and a contradiction."""
    box = box_engines(client)
    if box is not None:
        message = box_message(opts.url, *box)
        if not opts.force:
            raise CalibrateError(message)
        notes.append(f"--force: measured syshaxd ({box[0]}) as if it were one engine")
    reported = reported_device(client)
    if reported is None:
        return opts.device
    device, how = reported
    if opts.device is not None and opts.device != device:
        if not opts.force:
            raise CalibrateError(f"--device {opts.device} contradicts the engine at {opts.url}: {how}. Pass "
                                 f"--device {device}, or --force to write a {opts.device} profile anyway.")
        notes.append(f"--force: a {opts.device} profile although {how}")
        return opts.device
    if opts.device is None:
        notes.append(f"device {device}: {how}")
    return device


def _facts(opts: Options, notes: list[str]) -> tuple[EngineFacts, str | None]:
    with httpx.Client(base_url=opts.url.rstrip("/"), timeout=10.0) as client:
        device = _who(client, opts, notes)
        dialect = detect_dialect(client) if opts.dialect == "auto" else opts.dialect
        load = read_load(client, dialect)
        if load.busy and not opts.force:
            raise CalibrateError(busy_message(opts.url, load))
        facts = read_facts(client, dialect)
    return dataclasses.replace(facts, model=opts.model or facts.model), device


def fold_api_overhead(result: FitResult) -> FitResult:
    """Charge the per-request TTFT the step model cannot hold to the prompt's tokens.

    The simulator has no per-request cost, but the engine spends it (llama-server sets up
    a compute graph for each new prompt shape; the API parses and tokenises) and a batch
    waits for it. So the prefill constants are fitted again to the measured TTFTs with the
    profile's own intercept (s0 + s1): the relative error over the measured prompt lengths
    is the smallest the simulator can reach.
    """
    c = result.constants
    if c.api_overhead <= 0 or len(result.prefill_used) < 2:
        return result
    fixed = c.step_overhead + c.per_seq_overhead
    points = result.prefill_used
    rows = [[float(p.prompt_tokens), p.prompt_tokens**2 / 2] for p in points]
    alpha, beta = nnls(rows, [p.ttft_s - fixed for p in points], [1 / p.ttft_s**2 for p in points])
    folded = dataclasses.replace(c, prefill_per_token=alpha, attention=beta, api_overhead=0.0)
    return dataclasses.replace(result, constants=folded)


def _merge(into: Measurements, more: Measurements) -> None:
    for probe, runs in more.samples.items():
        into.samples.setdefault(probe, []).extend(runs)
    into.duration += more.duration
    into.skipped = more.skipped


def _repeats(facts: EngineFacts, plan: Plan, opts: Options, progress: Progress | None,
             phase: Phase | None) -> tuple[Measurements, Stability]:
    """Measure the plan again and again (each repeat fitted alone) until the fits agree, the
    repeats run out or the budget does; all the measurements, and how the fits agree."""
    merged: Measurements | None = None
    fits: list[Constants] = []
    stability = judge([], [], [], opts.spread)
    for k in range(opts.repeats):
        left = opts.budget - (merged.duration if merged is not None else 0.0)
        if left <= 0:
            break
        if phase:
            phase(f"measuring, repeat {k + 1} of up to {opts.repeats}")
        tag = f" [repeat {k + 1}/{opts.repeats}]"
        shown: Progress | None = None
        if progress is not None:
            def shown(label: str, done: int, total: int, tag: str = tag, show: Progress = progress) -> None:
                show(label + tag, done, total)
        one = asyncio.run(run_plan(facts, plan, budget=left, settle=opts.settle, progress=shown))
        if merged is None:
            merged = one
        else:
            _merge(merged, one)
        try:
            fits.append(fold_api_overhead(fit(one.prefill_points(), one.decode_points())).constants)
        except FitError:
            pass  # a repeat the budget cut short: the merged fit still uses its points
        stability = judge(fits, merged.prefill_points(), merged.decode_points(), opts.spread)
        if stability.stable:
            break
    assert merged is not None  # the budget is positive
    return merged, stability


def calibrate(opts: Options, progress: Progress | None = None, phase: Phase | None = None) -> Calibration:
    """Measure the engine at ``opts.url`` and write its profile."""
    notes: list[str] = []
    if phase:
        phase(f"reading the engine at {opts.url}")
    try:
        facts, device = _facts(opts, notes)
        base = opts.base or DEFAULT_BASE[facts.dialect]
        base_profile = load_profile(base)
        batch_cap = LLAMACPP_BATCH if facts.dialect == "llamacpp" else base_profile.max_num_batched_tokens
        plan = make_plan(facts, max_prompt=min(opts.max_prompt, batch_cap),
                         max_batch=min(opts.max_batch, facts.max_num_seqs or base_profile.max_num_seqs),
                         decode_tokens=opts.decode_tokens, rounds=opts.rounds)
        measured, stability = _repeats(facts, plan, opts, progress, phase)
        if phase:
            phase("fitting")
        raw = fit(measured.prefill_points(), measured.decode_points())
        result = fold_api_overhead(raw)
        name = opts.name or f"calibrated-{facts.dialect}-{httpx.URL(facts.url).port or 80}"
        data = build(base, facts, result, name=name, tag=f"calibrate {_day(measured)}", device=device)
    except (EngineInfoError, ProbeError, ProfileError) as exc:
        raise CalibrateError(str(exc)) from None
    except FitError as exc:
        raise CalibrateError(f"{exc} after {measured.duration:.0f} s of probes (budget {opts.budget:g} s): "
                             "give it more time with --budget, or more decode tokens with --decode-tokens") from None
    profile = _profile(data)
    quality = profile_fit(profile, result.prefill_used, result.decode_used)
    path = opts.out or Path(f"{name}.yaml")
    calibration = record(facts, measured, result, quality)
    calibration["api_overhead_folded_s"] = float(f"{raw.constants.api_overhead:.6g}")
    calibration["repeats"] = len(stability.fits)
    calibration["stable"] = stability.stable
    calibration["spread"] = float(f"{stability.spread:.4g}")
    calibration["notes"] = notes
    if phase:
        phase(f"writing {path}")
    try:
        write(path, data, calibration)
    except OSError as exc:
        raise CalibrateError(f"cannot write the profile to {path}: {exc.strerror or exc}") from None
    return Calibration(facts, measured, result, raw.constants.api_overhead, quality, load_profile(str(path)), path,
                       stability, tuple(notes))


def _day(measured: Measurements) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(measured.started_at, tz=timezone.utc).strftime("%Y-%m-%d")


def _profile(data: dict[str, object]) -> Profile:
    from sim.profile import parse_profile

    return parse_profile(data, str(data.get("name")))
