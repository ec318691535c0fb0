"""The shipped unit file: `systemd-analyze verify` is silent, the security score is OK or better,
and the settings the daemon relies on are there.

`verify` checks that ExecStart's binary exists, so the test verifies a copy whose ExecStart
points at this venv's syshaxd; everything else is the shipped file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from syshaxd.config import System
from syshaxd.service.daemon import API_GRACE_MARGIN

UNIT = Path(__file__).resolve().parents[2] / "systemd" / "syshaxd.service"
SHIPPED_EXEC = "/opt/syshax/bin/syshaxd"
needs_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="needs systemd-analyze (apt-get install systemd)"
)


def settings(text: str) -> dict[str, list[str]]:
    """Key -> every value it is given (units may repeat a key)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key.strip(), []).append(value.strip())
    return found


@pytest.fixture
def unit_copy(tmp_path: Path) -> Path:
    syshaxd = Path(sys.executable).with_name("syshaxd")
    assert syshaxd.exists(), "the project must be installed in the venv"
    text = UNIT.read_text()
    assert SHIPPED_EXEC in text
    path = tmp_path / "syshaxd.service"
    path.write_text(text.replace(SHIPPED_EXEC, str(syshaxd)))
    return path


@needs_analyze
def test_systemd_analyze_verify_is_silent(unit_copy: Path) -> None:
    out = subprocess.run(
        ["systemd-analyze", "verify", str(unit_copy)], capture_output=True, text=True, timeout=60, cwd=unit_copy.parent
    )
    assert out.stderr == ""
    assert out.returncode == 0


@needs_analyze
def test_security_exposure_is_ok_or_better(unit_copy: Path) -> None:
    out = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--no-pager", str(unit_copy)],
        capture_output=True, text=True, timeout=60, cwd=unit_copy.parent,
    )
    found = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", out.stdout)
    assert found, out.stdout[-2000:] + out.stderr
    assert found.group(2) in ("SAFE", "OK"), found.group(0)


def test_unit_has_what_the_daemon_relies_on() -> None:
    s = settings(UNIT.read_text())
    assert s["Type"] == ["notify"]
    assert s["NotifyAccess"] == ["main"]
    assert s["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert s["RuntimeDirectory"] == ["syshax"] and s["StateDirectory"] == ["syshax"]
    assert s["User"] == ["syshax"] and s["Group"] == ["syshax"]
    assert "WatchdogSec" in s
    assert s["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    assert s["MemoryDenyWriteExecute"] == ["yes"] and s["NoNewPrivileges"] == ["yes"]
    assert s["ProtectSystem"] == ["strict"]
    assert "@system-service" in s["SystemCallFilter"]
    assert s.get("PrivateUsers", ["no"]) == ["no"]  # would break the SO_PEERCRED checks
    stop = float(s["TimeoutStopSec"][0].removesuffix("s"))
    default_grace = System.model_fields["shutdown_grace"].default
    assert stop > default_grace + API_GRACE_MARGIN


def test_sysusers_and_tmpfiles_snippets_name_the_service_user() -> None:
    base = UNIT.parent
    users = [line.split() for line in (base / "syshax.sysusers.conf").read_text().splitlines() if line and not line.startswith("#")]
    assert users[0][:2] == ["u", "syshax"]
    dirs = {line.split()[1]: line.split() for line in (base / "syshax.tmpfiles.conf").read_text().splitlines() if line and not line.startswith("#")}
    assert dirs["/var/lib/syshax"][3:5] == ["syshax", "syshax"]
    assert dirs["/run/syshax"][2] == "0755"
