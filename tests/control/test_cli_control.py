"""``syshax status/set/save/reload/drain/enable`` against a control API on a real socket."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from syshaxd.cli import main as cli_main
from tests.control.conftest import ControlHarness


async def syshax(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in a thread (its HTTP client is synchronous; the server shares our loop)."""
    code = await asyncio.to_thread(cli_main, list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


async def test_status_prints_engines_and_config(control_api: ControlHarness, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = await syshax(capsys, "status", "--socket", str(control_api.socket_path))
    assert code == 0
    assert "gpu0" in out and "cpu0" in out
    assert "decider.cpu_max_batch_size" in out


async def test_status_json_is_the_state(control_api: ControlHarness, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = await syshax(capsys, "status", "--json", "--socket", str(control_api.socket_path))
    assert code == 0
    assert json.loads(out)["config"]["decider.policy"] == "classic"


async def test_set_changes_the_daemon_and_bad_values_exit_2(
    control_api: ControlHarness, capsys: pytest.CaptureFixture[str]
) -> None:
    sock = str(control_api.socket_path)
    code, out, _ = await syshax(capsys, "set", "decider.cpu_max_batch_size", "12", "decider.auto_pd_offload", "true", "--socket", sock)
    assert code == 0, out
    assert "decider.cpu_max_batch_size = 12" in out and "syshax save" in out
    assert control_api.runtime.limits().auto_pd_offload is True
    code, _, err = await syshax(capsys, "set", "decider.cpu_max_batch_size", "-1", "--socket", sock)
    assert code == 2
    assert "decider.cpu_max_batch_size" in err and "-1" in err
    assert control_api.runtime.limits().cpu_max_batch_size == 12
    code, _, err = await syshax(capsys, "set", "decider.cpu_max_batch_size", "--socket", sock)
    assert code == 2 and "no value" in err


async def test_drain_and_enable_an_engine(control_api: ControlHarness, capsys: pytest.CaptureFixture[str]) -> None:
    sock = str(control_api.socket_path)
    code, out, _ = await syshax(capsys, "drain", "cpu0", "--socket", sock)
    assert code == 0 and "draining=yes" in out
    assert control_api.runtime.engine_flags("cpu0") == (True, True)
    code, out, _ = await syshax(capsys, "enable", "cpu0", "--socket", sock)
    assert code == 0 and "draining=no" in out
    assert control_api.runtime.engine_flags("cpu0") == (True, False)
    code, _, err = await syshax(capsys, "drain", "cpu7", "--socket", sock)
    assert code == 2 and "did you mean 'cpu0'" in err


async def test_save_and_reload(control_api: ControlHarness, capsys: pytest.CaptureFixture[str]) -> None:
    sock = str(control_api.socket_path)
    await syshax(capsys, "set", "decider.max_num_seqs", "5", "--socket", sock)
    code, out, _ = await syshax(capsys, "save", "--socket", sock)
    assert code == 0 and "decider.max_num_seqs = 5" in out
    code, out, _ = await syshax(capsys, "reload", "--socket", sock)
    assert code == 0 and "no change" in out
    assert control_api.runtime.config.decider.max_num_seqs == 5


def test_not_running_says_so_and_where_it_looked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "control.sock"
    code = cli_main(["status", "--socket", str(missing)])
    err = capsys.readouterr().err
    assert code == 1
    assert "not running" in err and str(missing) in err


def test_config_socket_is_used_when_no_socket_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(f"control:\n  socket: {tmp_path / 'elsewhere.sock'}\n")
    code = cli_main(["status", "--config", str(config)])
    err = capsys.readouterr().err
    assert code == 1
    assert str(tmp_path / "elsewhere.sock") in err
