"""The accuracy benchmark's fourth stage: advise's self-check, quiet and beside a CPU hog.

Windows recorded by a real syshaxd under ``classic``, each advised on with ``syshax advise
--json``: on the simulator (stage 3's box: two ``tiny`` engines at an eighth of their speed,
120 requests at 3/s, a fresh stack per window) and on the real llama pair (two tiny-model
llama-servers, each calibrated once on the quiet machine for its role, then
:data:`LLAMA_LOAD` per window through one stack, advised with ``--last``). Each condition
runs quiet and with :data:`HOG_PROCESSES` busy-looping processes beside it. Reported per
condition: the current setting's error on each figure the self-check judges (median over
the windows) and how many windows advise refused. Reported, not judged: how often advise
should refuse on a busy machine is what this measures.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import httpx

from bench._accuracy_advise import BOX, LOAD, QUICK_LOAD, record_and_advise
from bench._traffic import AdviseError, Workload, advise, drive
from demo.procs import StartError, Supervisor
from demo.stack import runtime_root, start_stack
from sim.advise.check import CHECKED
from sim.advise.cli import REFUSED
from sim.calibrate.calibrate import CalibrateError, Options, calibrate
from syshaxd.schema import AdviceModel

#: Busy-looping processes beside the box in the "CPU hog" condition.
HOG_PROCESSES = 1
#: Windows per condition (quick: 1).
RUNS = 3
#: A llama window: 60 requests at 4/s (~15 s), prompts and answers the tiny model serves in
#: tens of milliseconds (its vocabulary has 32,000 ids).
LLAMA_LOAD = Workload(requests=60, rate=4.0, prompt=(32, 256), max_tokens=(8, 48), seed=3)
QUICK_LLAMA_LOAD = replace(LLAMA_LOAD, requests=30, rate=3.0)
LLAMA_BOX = replace(BOX, engines="llama", speed=1.0)
Tick = Callable[[str], None]


@dataclass(frozen=True)
class Window:
    """One recorded window and what advise made of it."""

    engines: str  # simulator, llama pair
    hog: bool
    errors: dict[str, float]
    refused: str | None
    recommended: str | None
    requests: int
    window_s: float


@contextmanager
def cpu_hog(on: bool) -> Iterator[None]:
    """``HOG_PROCESSES`` busy loops while inside (none when ``on`` is false); stopped on the way out."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOG_PROCESSES if on else 0)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _conditions(quick: bool) -> tuple[bool, ...]:
    """Quiet and beside the hog; a quick run (make test) only quiet: a hog there would take a core
    from the tests running beside it, and the quick run checks the stage runs, not its figures."""
    return (False,) if quick else (False, True)


def _window(engines: str, hog: bool, advice: AdviceModel) -> Window:
    chosen = advice.options[advice.recommended].label if advice.recommended is not None else None
    return Window(engines, hog, dict(advice.current_error), advice.refused, chosen, advice.requests, advice.window_s)


def simulator_windows(runs: int, quick: bool, tick: Tick) -> list[Window]:
    """Stage 3's box, ``runs`` windows quiet and ``runs`` beside the hog."""
    out = []
    for hog in _conditions(quick):
        for k in range(runs):
            tick(f"advise on the simulator{' beside a CPU hog' if hog else ''}, window {k + 1}/{runs}")
            with cpu_hog(hog):
                rec = record_and_advise(QUICK_LOAD if quick else LOAD)
            out.append(_window("simulator", hog, rec.advice))
    return out


def llama_windows(runs: int, quick: bool, tick: Tick) -> list[Window]:
    """The llama pair: calibrate each engine (quiet), then ``runs`` windows quiet and beside the hog."""
    root = runtime_root()
    sup = Supervisor()
    load = QUICK_LLAMA_LOAD if quick else LLAMA_LOAD
    try:
        stack = start_stack(sup, root, LLAMA_BOX)
        profiles = {}
        for role, url in (("gpu", stack.gpu_url), ("cpu", stack.cpu_url)):
            tick(f"calibrating the llama-server in the {role} role")
            opts = Options(url=url, out=root / f"llama-{role}.yaml", name=f"llama-{role}", device=role,
                           **({"budget": 20.0, "settle": 0.5, "rounds": 1, "repeats": 2} if quick else {}))
            profiles[role] = str(calibrate(opts).path)
        out = []
        for hog in _conditions(quick):
            for k in range(runs):
                tick(f"advise on the llama pair{' beside a CPU hog' if hog else ''}, window {k + 1}/{runs}")
                with cpu_hog(hog):
                    ok = drive(stack.api_url, load)
                    done = advise(stack.socket_path, "--json", "--last", str(load.requests), "--gpu-profile",
                                  profiles["gpu"], "--cpu-profile", profiles["cpu"], timeout=600)
                if done.returncode not in (0, REFUSED):
                    raise AdviseError(f"syshax advise exited with {done.returncode}: {done.stderr.strip()}")
                if not all(ok):
                    raise AdviseError(f"{ok.count(False)} of {len(ok)} requests to the llama pair failed")
                out.append(_window("llama pair", hog, AdviceModel.model_validate_json(done.stdout)))
        return out
    finally:
        sup.stop_all()
        shutil.rmtree(root, ignore_errors=True)


def summary(windows: list[Window]) -> list[dict[str, object]]:
    """Per condition: windows, refusals, the median error of each judged figure."""
    out: list[dict[str, object]] = []
    for engines in ("simulator", "llama pair"):
        for hog in (False, True):
            group = [w for w in windows if w.engines == engines and w.hog == hog]
            if not group:
                continue
            medians = {k: statistics.median(w.errors[k] for w in group if k in w.errors)
                       for k in CHECKED if any(k in w.errors for w in group)}
            out.append({"engines": engines, "hog": hog, "windows": len(group),
                        "refused": sum(w.refused is not None for w in group), "median_error": medians,
                        "reasons": [w.refused for w in group if w.refused is not None]})
    return out


def table_rows(rows: list[dict[str, object]]) -> list[tuple[str, ...]]:
    """The rows of the stage's table: condition, refused, then each figure's median error."""
    out = []
    for row in rows:
        errors = row["median_error"]
        assert isinstance(errors, dict)
        cells = tuple("-" if k not in errors else f"{errors[k]:+.0%}" for k in CHECKED)
        out.append((f"{row['engines']}{', CPU hog' if row['hog'] else ', quiet'}",
                    f"{row['refused']} of {row['windows']}", *cells))
    return out


def run_stage(runs: int, quick: bool, tick: Tick) -> dict[str, object]:
    """Both boxes; the windows and their summary (or the error that stopped the stage)."""
    windows: list[Window] = []
    try:
        windows += simulator_windows(runs, quick, tick)
        windows += llama_windows(runs, quick, tick)
    except (StartError, AdviseError, CalibrateError, OSError, subprocess.TimeoutExpired, httpx.HTTPError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "windows": [w.__dict__ for w in windows],
                "summary": summary(windows)}
    return {"windows": [w.__dict__ for w in windows], "summary": summary(windows), "hog_processes": HOG_PROCESSES}
