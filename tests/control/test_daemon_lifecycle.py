"""The daemon's life as systemd sees it: one per socket, a stale socket replaced, SIGTERM and SIGINT
drain and clean up, socket activation, a busy port."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.plugins.daemon import run_syshaxd, successor, wait_control_socket
from tests.plugins.ports import free_port, wait_until

pytestmark = pytest.mark.slow


def test_second_daemon_is_refused_and_the_first_socket_survives(start_daemon: Any) -> None:
    daemon = start_daemon()
    second = run_syshaxd(daemon.config_path, daemon.env)
    assert second.returncode == 1
    assert "already running" in second.stderr and str(daemon.socket_path) in second.stderr
    assert daemon.socket_path.exists()
    assert daemon.state().engines  # the first one still answers on it


def test_stale_socket_of_a_killed_daemon_is_replaced(start_daemon: Any) -> None:
    daemon = start_daemon()
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait(timeout=10)
    assert daemon.socket_path.exists()  # left behind, nobody listens
    with pytest.raises(OSError):
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(daemon.socket_path))
        finally:
            probe.close()
    with successor(daemon, "second.log") as proc:
        assert daemon.state().engines
    assert proc.returncode == 0


def test_sigterm_drains_and_cleans_up_with_the_sd_notify_protocol(start_daemon: Any) -> None:
    # speed 1: a 150-token stream takes over a second, so SIGTERM arrives mid-stream.
    daemon = start_daemon(notify=True, speed=1.0, env={"WATCHDOG_USEC": "200000"})
    sink = daemon.notify
    assert sink is not None
    assert "READY=1" in sink.wait_for("READY=1").split("\n")
    sink.wait_for("WATCHDOG=1")
    daemon.proc.send_signal(signal.SIGHUP)
    reloading = sink.wait_for("RELOADING=1").split("\n")
    assert any(f.startswith("MONOTONIC_USEC=") for f in reloading)
    sink.wait_for("READY=1", count=2)  # READY=1 again once the reload is done
    sink.wait_for("WATCHDOG=1", count=3)  # pings keep coming from the event loop
    assert any(f.startswith("STATUS=") and "in flight" in f for f in sink.fields())

    body = {
        "model": "ds-32b", "messages": [{"role": "user", "content": "tell me"}],
        "max_tokens": 150, "ignore_eos": True, "stream": True,
    }
    chunks_after_term = 0
    finish = None
    with httpx.stream("POST", f"{daemon.url}/v1/chat/completions", json=body, timeout=60) as resp:
        assert resp.status_code == 200
        lines = resp.iter_lines()
        for line in lines:
            if line.startswith("data: {"):
                break
        daemon.proc.send_signal(signal.SIGTERM)
        sink.wait_for("STOPPING=1")
        for line in lines:
            if line.startswith("data: {"):
                chunks_after_term += 1
                choice = json.loads(line[6:])["choices"]
                if choice and choice[0].get("finish_reason"):
                    finish = choice[0]["finish_reason"]
            if line == "data: [DONE]":
                break
    assert chunks_after_term > 0  # the stream went on after SIGTERM ...
    assert finish == "length"  # ... and finished normally
    assert daemon.proc.wait(timeout=30) == 0
    assert not daemon.socket_path.exists()  # cleanup ran: socket and lock removed
    assert not Path(str(daemon.socket_path) + ".lock").exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{daemon.url}/health", timeout=2)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=10).close()
    except ConnectionRefusedError:
        return True
    return False


def test_new_requests_are_refused_while_draining(start_daemon: Any) -> None:
    # The grace outlasts the test: the stream ends when the test lets its engine go on.
    daemon = start_daemon(config={"system": {"shutdown_grace": 600}})
    body = {
        "model": "ds-32b", "messages": [{"role": "user", "content": "tell me"}],
        "max_tokens": 150, "ignore_eos": True, "stream": True,
    }
    engines = (daemon.gpu_url, daemon.cpu_url)
    with httpx.stream("POST", f"{daemon.url}/v1/chat/completions", json=body, timeout=60) as resp:
        lines = resp.iter_lines()
        for line in lines:
            if line.startswith("data: {"):
                break
        try:
            for url in engines:  # the stream stays in flight until resumed
                httpx.post(f"{url}/sim/faults", json={"paused": True}, timeout=10).raise_for_status()
            daemon.proc.send_signal(signal.SIGTERM)
            port = int(daemon.url.rsplit(":", 1)[1])
            assert wait_until(lambda: _refused(port))  # no new connections while the old stream drains
        finally:
            for url in engines:
                httpx.post(f"{url}/sim/faults", json={"paused": False}, timeout=10).raise_for_status()
        done = False
        for line in lines:
            if line == "data: [DONE]":
                done = True
                break
    assert done
    assert daemon.proc.wait(timeout=30) == 0


def test_daemon_exits_cleanly_with_sigint_too(start_daemon: Any) -> None:
    daemon = start_daemon()
    daemon.proc.send_signal(signal.SIGINT)
    assert daemon.proc.wait(timeout=30) == 0
    assert not daemon.socket_path.exists()
    assert "Traceback" not in daemon.log_text()


def test_environment_names_the_socket_dir(start_daemon: Any) -> None:
    daemon = start_daemon()
    assert daemon.socket_path == Path(daemon.env["RUNTIME_DIRECTORY"]) / "control.sock"
    mode = os.stat(daemon.socket_path).st_mode & 0o777
    assert mode == 0o660


@pytest.mark.skipif(shutil.which("systemd-socket-activate") is None, reason="needs systemd-socket-activate")
def test_socket_activated_api(start_daemon: Any) -> None:
    port = free_port()
    daemon = start_daemon(
        # It passes on only the variables named with -E.
        launcher=["systemd-socket-activate", "-l", f"127.0.0.1:{port}", "-E", "RUNTIME_DIRECTORY", "-E", "STATE_DIRECTORY"],
        config={"services": {"conductor": {"port": port}}},
        wait=False,
    )
    # The first connection makes systemd-socket-activate start syshaxd with the socket.
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=10).close()
            break
        except OSError:
            assert time.monotonic() < deadline and daemon.proc.poll() is None
            time.sleep(0.05)
    wait_control_socket(daemon.socket_path, daemon.proc)
    resp = httpx.get(f"http://127.0.0.1:{port}/health", timeout=60)
    assert resp.status_code == 200, daemon.log_text()
    assert "socket-activated" in daemon.log_text()
    assert daemon.stop() == 0


def test_a_busy_api_port_is_a_clear_error_and_leaves_no_socket(start_daemon: Any) -> None:
    daemon = start_daemon()
    assert daemon.stop() == 0
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        data = yaml.safe_load(daemon.config_path.read_text())
        data["services"]["conductor"]["port"] = busy.getsockname()[1]
        daemon.config_path.write_text(yaml.safe_dump(data))
        result = run_syshaxd(daemon.config_path, daemon.env)
    finally:
        busy.close()
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{data['services']['conductor']['port']}" in result.stderr
    assert "Traceback" not in result.stderr
    assert not daemon.socket_path.exists()
