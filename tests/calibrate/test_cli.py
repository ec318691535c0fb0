"""`syshax calibrate` errors a user can cause: exit 1 with a message, no traceback, nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.plugins.ports import free_port

SYSHAX = str(Path(sys.executable).with_name("syshax"))


def test_an_engine_that_is_not_there_is_named_in_the_error(short_tmp: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    out = short_tmp / "p.yaml"
    done = subprocess.run([SYSHAX, "calibrate", url, "-o", str(out)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 1
    assert f"cannot reach {url}/props" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()


def test_a_bad_option_is_a_usage_error() -> None:
    done = subprocess.run([SYSHAX, "calibrate", "http://127.0.0.1:1", "--budget", "0"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "must be above 0" in done.stderr
