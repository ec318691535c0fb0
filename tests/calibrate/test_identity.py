"""calibrate knows what it measures: it refuses syshaxd (naming the engines to calibrate instead)
and a ``--device`` the engine contradicts, unless forced; its probes are marked, so advise leaves
them out; without a terminal it prints one line per phase."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml

from sim.calibrate.identity import PROBE_ID_PREFIX
from sim.launch import EngineHandle
from sim.profile import load_profile
from tests.plugins.sim import SimEngineFactory
from tests.plugins.stack import Stack

SYSHAX = str(Path(sys.executable).with_name("syshax"))
QUICK = ("--base", "tiny", "--decode-tokens", "16", "--rounds", "1", "--settle", "0.1", "--max-batch", "2",
         "--max-prompt", "256")


def _calibrate(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SYSHAX, "calibrate", url, "-o", str(out), *QUICK, *extra], capture_output=True, text=True,
                          timeout=300, check=False)


def test_syshaxd_says_who_it_is_and_calibrate_names_its_engines_instead(make_stack: Callable[..., Stack],
                                                                        short_tmp: Path) -> None:
    stack = make_stack(policy="classic")
    head = httpx.get(f"{stack.url}/health", timeout=10)
    assert head.headers["x-syshax"].startswith("syshaxd/")
    out = short_tmp / "box.yaml"
    done = _calibrate(stack.url, out)
    assert done.returncode == 1, done.stderr
    assert "the box in front of the engines, not an engine" in done.stderr
    assert f"syshax calibrate {stack.gpu_url} --device gpu" in done.stderr
    assert f"syshax calibrate {stack.cpu_url} --device cpu" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()
    # Forced, it measures the box; the probes it sent are marked: the daemon serves them, counts
    # them and records none, so advise has no traffic to replay.
    forced = _calibrate(stack.url, out, "--force", "--repeats", "1")
    assert forced.returncode == 0, forced.stderr
    assert "--force: measured syshaxd" in forced.stdout
    control = httpx.Client(transport=httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock")),
                           base_url="http://syshaxd", timeout=10)
    with control:
        records = control.get("/v1/requests").raise_for_status().json()
        probes = control.get("/v1/state").raise_for_status().json()["conductor"]["probe_requests_total"]
    assert not any(r["request_id"].startswith(PROBE_ID_PREFIX) for r in records)
    assert probes > 0
    advised = subprocess.run([SYSHAX, "advise", "--socket", str(stack.tmp / "run" / "control.sock")],
                             capture_output=True, text=True, timeout=300, check=False)
    assert advised.returncode == 1
    assert "nothing to advise on" in advised.stderr


def test_a_device_the_engine_contradicts_is_refused_unless_forced_and_phases_print_as_lines(
        sim_engine: SimEngineFactory, short_tmp: Path) -> None:
    engine: EngineHandle = sim_engine("tiny", dialect="vllm-v1", speed=1.0)  # tiny is a gpu profile
    out = short_tmp / "p.yaml"
    refused = _calibrate(engine.url, out, "--device", "cpu")
    assert refused.returncode == 1
    assert "--device cpu contradicts the engine" in refused.stderr and "a gpu profile" in refused.stderr
    assert not out.exists()
    forced = _calibrate(engine.url, out, "--device", "cpu", "--force")
    assert forced.returncode == 0, forced.stderr
    assert load_profile(str(out)).device == "cpu"
    assert "note: --force: a cpu profile although it simulates profile tiny" in forced.stdout
    # No terminal: a line per phase on stderr, in order, not a redrawn bar.
    phases = [line.split(":", 1)[1].strip().split(",")[0].split(" ")[0]
              for line in forced.stderr.splitlines() if line.startswith("calibrate:")]
    assert phases[0] == "reading" and phases[-2:] == ["fitting", "writing"] and "measuring" in phases
    # Unforced, the device is the engine's own, and the record says whether the repeats agreed.
    again = _calibrate(engine.url, out)
    assert again.returncode == 0, again.stderr
    assert load_profile(str(out)).device == "gpu"
    record = yaml.safe_load(out.read_text())["calibration"]
    assert 1 <= record["repeats"] <= 3 and isinstance(record["stable"], bool)
    assert ("the fitted constants are stable" in again.stdout) == record["stable"]
