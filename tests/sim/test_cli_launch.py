"""The sim CLI and the launch helpers: clear errors, clean shutdown, nothing left behind."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sim.launch import LaunchError, start_engine
from sim.traces import TRACE_DIR_ENV
from syshaxd.cli import main as syshax
from tests.shared import shared


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sim", *args], capture_output=True, text=True, timeout=60)


def test_unknown_profile_is_a_usage_error() -> None:
    run = sim("--profile", "gpu-h100", "--port", "0")
    assert run.returncode == 2
    assert "unknown profile 'gpu-h100'" in run.stderr and "Traceback" not in run.stderr


def test_busy_port_is_reported() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        run = sim("--profile", "tiny", "--port", str(s.getsockname()[1]))
    assert run.returncode == 1
    assert "cannot listen on 127.0.0.1" in run.stderr and "Traceback" not in run.stderr


def test_pair_on_one_port_is_refused() -> None:
    run = sim("pair", "--gpu-port", "9", "--cpu-port", "9")
    assert run.returncode == 2 and "both 9" in run.stderr


def test_profiles_command_lists_every_profile(capsys: pytest.CaptureFixture[str]) -> None:
    assert syshax(["sim", "profiles"]) == 0
    out = capsys.readouterr().out
    for name in ("gpu-a100", "gpu-a100-40g", "cpu-kunpeng920-q4", "cpu-kunpeng920-q8", "tiny", "null"):
        assert name in out


def test_replay_command_prints_a_summary_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TRACE_DIR_ENV, str(shared("traces")))
    out = tmp_path / "replay.json"
    code = syshax(["sim", "replay", "--trace", "sharegpt", "--limit", "40", "--rate", "0.5", "--policy", "gpu-only",
                   "--json", str(out)])
    assert code == 0
    assert "output tokens/s" in capsys.readouterr().out
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["summary"]["completed"] == 40 and len(data["requests"]) == 40


def test_replay_rejects_a_bad_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert syshax(["sim", "replay", "--policy", "fastest"]) == 2
    assert "unknown policy" in capsys.readouterr().err


def test_launcher_stops_the_process_and_cleans_up_even_when_the_body_fails() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with start_engine("tiny", speed=50.0) as (proc, engine):
            assert httpx.get(f"{engine.url}/health").status_code == 200
            folder = proc.log_path.parent
            raise RuntimeError("boom")
    assert not proc.alive()
    assert proc.proc.returncode == 0  # SIGTERM is a clean shutdown
    assert not folder.exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{engine.url}/health", timeout=2)


def test_launcher_reports_a_simulator_that_cannot_start() -> None:
    with pytest.raises(LaunchError, match="unknown profile"):
        with start_engine("no-such-profile"):
            pass


def test_served_model_name_and_dialect_come_through(sim_engine) -> None:  # type: ignore[no-untyped-def]
    engine = sim_engine("tiny", dialect="sglang", served_model_name="my-model")
    assert engine.dialect == "sglang"
    assert httpx.get(f"{engine.url}/v1/models").json()["data"][0]["id"] == "my-model"
    assert 'model_name="my-model"' in httpx.get(f"{engine.url}/metrics").text
