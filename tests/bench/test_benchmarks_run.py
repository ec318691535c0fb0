"""Every benchmark runs once at a tiny size, so none of them rots (timings are not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.run_all import scripts
from tests.shared import shared

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("script", scripts(), ids=lambda p: p.stem)
def test_benchmark_runs_quick_and_writes_json(script: Path, tmp_path: Path) -> None:
    out = tmp_path / f"{script.stem}.json"
    # The scheduling benchmark replays the workspace's traces; the others make their own load.
    traces = ["--traces", str(shared("traces"))] if script.stem == "policies" else []
    done = subprocess.run([sys.executable, str(script), "--quick", "--out", str(out), *traces], cwd=ROOT,
                          capture_output=True, text=True, timeout=580)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert isinstance(report, dict) and report
