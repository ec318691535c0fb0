"""`syshax calibrate` against the simulator itself, over HTTP.

A real ``python -m sim`` engine (profile ``tiny``, vLLM V1 dialect, real time) on a free
loopback port, and the real command in a subprocess: it reads the engine, fits both terms
and writes a profile; an engine serving traffic is refused unless ``--force``. How close
the fitted constants come to the profile's is a wall-clock measurement: every term within
10% on a quiet machine is the baseline of ``python bench/accuracy.py``.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from sim.calibrate.fit import constants_of
from sim.launch import EngineHandle
from sim.profile import load_profile
from tests.plugins.ports import wait_until
from tests.plugins.sim import SimEngineFactory

SYSHAX = str(Path(sys.executable).with_name("syshax"))


def _calibrate(url: str, out: Path, *extra: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    if "--base" not in extra:
        extra = ("--base", "tiny", *extra)
    return subprocess.run([SYSHAX, "calibrate", url, "-o", str(out), *extra],
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def tiny_engine(sim_engine: SimEngineFactory) -> EngineHandle:
    """The tiny profile in real time (speed 1: calibrate times the wall clock)."""
    return sim_engine("tiny", dialect="vllm-v1", speed=1.0)


def test_calibrating_the_simulator_over_http_writes_a_profile_of_what_it_measured(
        tiny_engine: EngineHandle, short_tmp: Path) -> None:
    """The command end to end against a live engine: what it reads, fits and writes. How close
    the constants come is a wall-clock figure: ``python bench/accuracy.py`` judges it (the
    same path on virtual time is held to 1% in test_plan_in_virtual_time.py)."""
    out = short_tmp / "calibrated.yaml"
    done = _calibrate(tiny_engine.url, out, "--decode-tokens", "32", "--rounds", "1", "--settle", "0.1")
    assert done.returncode == 0, done.stderr
    fitted, base = load_profile(str(out)), load_profile("tiny")
    got = constants_of(fitted)
    assert got.prefill_per_token > 0 and got.decode_base > 0  # each term was measured, not left at zero
    record = yaml.safe_load(out.read_text())["calibration"]
    assert record["engine"]["dialect"] == "vllm-v1"
    assert {f["term"].split()[0] for f in record["fit"]} == {"prefill", "decode"}
    assert all(-math.inf < f["r2"] <= 1 for f in record["fit"])
    assert fitted.kv_capacity_tokens == base.kv_capacity_tokens and fitted.max_model_len == base.max_model_len
    assert "decode step, fixed part" in done.stdout  # the summary table


@pytest.fixture
def busy(tiny_engine: EngineHandle) -> Iterator[EngineHandle]:
    """The engine paused with a request waiting in it (the test resumes it); the request is
    streamed to its end before the test ends."""
    tiny_engine.set_faults(paused=True)

    def stream() -> None:
        body = {"model": "ds-32b", "prompt": "busy", "max_tokens": 300, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{tiny_engine.url}/v1/completions", json=body, timeout=120) as resp:
            for _ in resp.iter_lines():
                pass

    worker = threading.Thread(target=stream, daemon=True)
    worker.start()
    try:
        assert wait_until(lambda: tiny_engine.stats()["waiting"] == 1)
        yield tiny_engine
    finally:
        tiny_engine.set_faults(paused=False)
        worker.join(timeout=120)


def test_an_engine_serving_traffic_is_refused_unless_forced(busy: EngineHandle, short_tmp: Path) -> None:
    out = short_tmp / "p.yaml"
    refused = _calibrate(busy.url, out)
    assert refused.returncode == 1
    assert "serving traffic (0 running, 1 waiting)" in refused.stderr and "--force" in refused.stderr
    assert not out.exists()
    busy.set_faults(paused=False)  # forced, it measures beside the request as it runs
    forced = _calibrate(busy.url, out, "--force", "--rounds", "1", "--settle", "0.1")
    assert forced.returncode == 0, forced.stderr
    assert load_profile(str(out)).name.startswith("calibrated-vllm-v1-")
