"""`syshax calibrate` against the simulator itself: it recovers the profile it was started with.

A real ``python -m sim`` engine (profile ``tiny``, vLLM V1 dialect, real time) on a free
loopback port, and the real command in a subprocess. Also: an engine serving traffic is
refused unless ``--force``. The strict figure (every term within 10%, on a quiet machine)
is the baseline of ``python bench/accuracy.py``; here the command's output is checked and
the constants are held to bounds that hold beside the rest of the suite.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from bench._accuracy_recovery import VISIBLE, terms
from sim.calibrate.fit import constants_of
from sim.launch import EngineHandle
from sim.profile import load_profile
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


@pytest.mark.parametrize(("profile", "per_seq_and_kv"), [("tiny", False), (str(VISIBLE), True)], ids=["tiny", "visible"])
def test_calibrating_the_simulator_recovers_its_prefill_and_decode_constants(
        sim_engine: SimEngineFactory, short_tmp: Path, profile: str, per_seq_and_kv: bool) -> None:
    """``tiny`` as shipped; ``visible`` (bench/profiles/calibrate-visible.yaml) also has per-sequence
    and KV-read costs large enough to measure through HTTP (tiny's are 0.05 ms and 0.5 ms on 10.5)."""
    engine = sim_engine(profile, dialect="vllm-v1", speed=1.0)
    out = short_tmp / "calibrated.yaml"
    done = _calibrate(engine.url, out, "--base", profile, "--decode-tokens", "32", "--settle", "3")
    assert done.returncode == 0, done.stderr
    got, want = constants_of(load_profile(str(out))), constants_of(load_profile(profile))
    pairs = terms(got, want, per_seq_and_kv)
    figures = ", ".join(f"{k} {g:.4g} (profile {w:.4g}, {g / w - 1:+.1%})" for k, (g, w) in pairs.items())
    print(f"{Path(profile).stem}: {figures}")
    for name, (g, w) in pairs.items():
        # Inside the full suite the other worker's tests share the two cores, and contention only
        # adds time: the per-KV-token term (a few % of a step) came out -11.7% once and the prefill
        # slope +13.5% once in CI; alone both are within 2%. The strict 10% on every term is
        # bench/accuracy.py's baseline, run on a quiet machine.
        loose = {"per KV token s": 0.2, "prefill s/token": 0.2}
        assert g == pytest.approx(w, rel=loose.get(name, 0.10)), figures
    record = yaml.safe_load(out.read_text())["calibration"]
    assert record["engine"]["dialect"] == "vllm-v1"
    assert {f["term"].split()[0] for f in record["fit"]} == {"prefill", "decode"}
    assert all(f["r2"] > 0.9 for f in record["fit"])
    assert load_profile(str(out)).kv_capacity_tokens == load_profile(profile).kv_capacity_tokens
    assert "decode step, fixed part" in done.stdout  # the summary table


@pytest.fixture
def busy(tiny_engine: EngineHandle) -> Iterator[EngineHandle]:
    """The engine with a long request streaming in the background until the test ends."""
    started = threading.Event()

    def stream() -> None:
        body = {"model": "ds-32b", "prompt": "busy", "max_tokens": 300, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", f"{tiny_engine.url}/v1/completions", json=body, timeout=30) as resp:
            for _ in resp.iter_lines():
                started.set()

    worker = threading.Thread(target=stream, daemon=True)
    worker.start()
    assert started.wait(10)
    yield tiny_engine
    worker.join(timeout=30)


def test_an_engine_serving_traffic_is_refused_unless_forced(busy: EngineHandle, short_tmp: Path) -> None:
    out = short_tmp / "p.yaml"
    refused = _calibrate(busy.url, out)
    assert refused.returncode == 1
    assert "serving traffic (1 running, 0 waiting)" in refused.stderr and "--force" in refused.stderr
    assert not out.exists()
    forced = _calibrate(busy.url, out, "--force", "--rounds", "1", "--settle", "0.1")
    assert forced.returncode == 0, forced.stderr
    assert load_profile(str(out)).name.startswith("calibrated-vllm-v1-")
