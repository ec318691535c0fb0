"""The overhead benchmark refuses to report when its baseline cannot see, after measuring it again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_a_baseline_that_cannot_see_is_measured_three_times_then_refused(tmp_path: Path) -> None:
    """A tolerance of 0.01 ms no loopback round trip meets: the direct path never shows the engine's own TTFT."""
    out = tmp_path / "overhead.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "overhead.py"), "--quick", "--no-router",
                           "--workers", "1", "--tolerance", "0.01", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "REFUSED" in done.stdout
    report = json.loads(out.read_text())
    base = report["baseline"]
    assert base["ok"] is False and base["tries"] == 3
    assert base["direct_ttft_p50_ms"] > base["engine_own_first_byte_ms"] > 0
    assert report["targets"] == []  # nothing is judged from a harness that cannot see
    assert set(report["cases"]["stream-1"]) == {"direct", "syshax"}
