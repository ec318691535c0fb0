"""The profiles stay calibrated: gpu-a100 against published points 1-5, CPU estimates in their ranges."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.calibration import burst, check_points, profile_row, setup_profile

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_a100_is_within_20_percent_of_published_points_1_to_5() -> None:
    checks = check_points()
    assert {c.published.point for c in checks} == {1, 2, 3, 4, 5}
    for c in checks:
        assert c.within, f"point {c.published.point} ({c.published.prompts} prompts): {c.measured}"


def test_the_kv_bound_point_runs_about_45_and_preempts() -> None:
    m = burst(setup_profile("tp2"), 50)
    assert 40 <= m.peak_running <= 50
    assert m.preemptions > 0


@pytest.mark.parametrize("name,low,high", [("cpu-kunpeng920-q4", 8.0, 12.0), ("cpu-kunpeng920-q8", 4.3, 6.5)])
def test_cpu_estimates_stay_inside_the_readme_ranges(name: str, low: float, high: float) -> None:
    row = profile_row(name)
    assert low <= row.decode_tps[1] <= high
    assert 2.0 <= row.decode_tps[8] / row.decode_tps[1] <= 4.0
    assert 40 <= row.ttft_s[2048] <= 130


def test_bench_script_quick_run_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "cal.json"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "sim_calibration.py"), "--quick", "--out", str(out)],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["points"] and all(p["within"] for p in data["points"])
    assert {p["profile"] for p in data["profiles"]} >= {"gpu-a100", "cpu-kunpeng920-q4", "tiny", "null"}
    assert "published points within 20%" in run.stdout
