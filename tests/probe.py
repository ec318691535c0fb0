"""What the reliability tests look at: how a request ended for the client, the daemon's state, its leaks."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from syshaxd.sse import Decoder, NotEventStream
from tests.plugins.stack import Stack

MESSAGES = [{"role": "user", "content": "Tell me about the river and the stone."}]
#: Longer than any answer in these tests takes: reaching it means the daemon hung.
CLIENT_TIMEOUT = 30.0


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL an engine and reap it (a crash, not a shutdown)."""
    proc.kill()
    proc.wait(timeout=10)


def wait_until(check: Callable[[], bool], timeout: float = 60.0, interval: float = 0.05) -> bool:
    """Poll ``check`` until it holds or ``timeout`` passes; returns its last value (the timeout
    only bounds a failure: a busy machine makes a condition come late, not fail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            pass  # the daemon or an engine is mid-restart: ask again
        time.sleep(interval)
    return check()


def assert_openai_error(response: httpx.Response, status: int | None = None) -> dict[str, Any]:
    """The response is an OpenAI error object (with the given status); returns its ``error``."""
    if status is not None:
        assert response.status_code == status, (response.status_code, response.text[:500])
    assert 400 <= response.status_code < 600, response.status_code
    assert response.headers.get("content-type", "").startswith("application/json"), response.headers
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert isinstance(error, dict), body
    assert isinstance(error.get("message"), str) and error["message"], body
    assert isinstance(error.get("type"), str) and error["type"], body
    assert "param" in error and "code" in error, body
    return dict(error)


@dataclass
class Outcome:
    """How one request ended, as the client saw it."""

    status: int
    complete: bool = False  # a whole answer (streams: a finish_reason and [DONE], no error)
    error: dict[str, Any] | None = None  # the OpenAI error object the client was told
    chunks: int = 0
    text: str = ""
    problems: list[str] = field(default_factory=list)  # anything that is neither

    @property
    def clean(self) -> bool:
        """A complete answer or a clean error: never a hang, a truncation or a broken body."""
        return not self.problems and (self.complete != (self.error is not None))


def chat(stack: Stack, *, stream: bool, max_tokens: int = 4, timeout: float = CLIENT_TIMEOUT,
         **extra: Any) -> Outcome:
    """Send one chat request and classify how it ended."""
    body = {"model": "ds-32b", "messages": MESSAGES, "max_tokens": max_tokens, "stream": stream, **extra}
    url = f"{stack.url}/v1/chat/completions"
    try:
        if not stream:
            response = httpx.post(url, json=body, timeout=timeout)
            return _whole(response)
        with httpx.stream("POST", url, json=body, timeout=timeout) as response:
            if response.status_code != 200:
                response.read()
                return _whole(response)
            return _streamed(response)
    except httpx.TimeoutException as exc:
        return Outcome(0, problems=[f"hung: {type(exc).__name__}"])
    except httpx.HTTPError as exc:
        return Outcome(0, problems=[f"transport: {type(exc).__name__}: {exc}"])


def _whole(response: httpx.Response) -> Outcome:
    out = Outcome(response.status_code)
    try:
        body = response.json()
    except ValueError:
        out.problems.append(f"HTTP {response.status_code} body is not JSON: {response.text[:200]!r}")
        return out
    if response.status_code == 200:
        choices = body.get("choices") if isinstance(body, dict) else None
        if not choices or choices[0].get("finish_reason") is None:
            out.problems.append(f"200 without a finished choice: {body!r:.300}")
        else:
            out.complete = True
            out.text = choices[0].get("message", {}).get("content") or choices[0].get("text") or ""
        return out
    try:
        out.error = assert_openai_error(response)
    except AssertionError as exc:
        out.problems.append(f"HTTP {response.status_code} is not an OpenAI error: {exc}")
    return out


def _streamed(response: httpx.Response) -> Outcome:
    out = Outcome(200)
    done = finished = False
    decoder = Decoder(strict=True)
    try:
        events = [e for chunk in response.iter_bytes() for e in decoder.feed(chunk)]
    except NotEventStream as exc:
        out.problems.append(str(exc))
        events = []
    for sse_event in events:
        payload = sse_event.data.decode("utf-8", "replace")
        if done:
            out.problems.append(f"data after [DONE]: {payload[:100]!r}")
            continue
        if payload == "[DONE]":
            done = True
            continue
        try:
            event = json.loads(payload)
        except ValueError:
            out.problems.append(f"event is not JSON: {payload[:100]!r}")
            continue
        if "error" in event:
            if out.error is not None:
                out.problems.append("two error events")
            error = event["error"]
            if not isinstance(error, dict) or not error.get("message") or not error.get("type"):
                out.problems.append(f"error event is not OpenAI-shaped: {event!r:.200}")
            out.error = error if isinstance(error, dict) else {"message": str(error)}
            continue
        if out.error is not None:
            out.problems.append("content after an error event")
        out.chunks += 1
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            out.text += delta.get("content") or choice.get("text") or ""
            finished = finished or choice.get("finish_reason") is not None
    if not done:
        out.problems.append("stream ended without [DONE]" + (" after an error" if out.error else ""))
    elif out.error is None:
        if finished:
            out.complete = True
        else:
            out.problems.append("[DONE] without a finish_reason and without an error: a silent truncation")
    return out


# -- the daemon's own view ---------------------------------------------------------------


def control_socket(stack: Stack) -> Path:
    """Where the fixture's daemon listens for the control API."""
    return stack.tmp / "run" / "control.sock"


def control(stack: Stack) -> httpx.Client:
    """An httpx client on the daemon's control socket."""
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(control_socket(stack))),
                        base_url="http://syshaxd", timeout=5.0)


def state(stack: Stack) -> dict[str, Any]:
    """GET /v1/state on the control socket."""
    with control(stack) as client:
        response = client.get("/v1/state")
        response.raise_for_status()
        return dict(response.json())


def engine_states(stack: Stack) -> dict[str, str]:
    """Engine name -> up/stale/down as GET /v1/state reports it."""
    return {e["name"]: e["state"] for e in state(stack)["engines"]}


def health(stack: Stack) -> httpx.Response:
    """GET /health on the API port."""
    return httpx.get(f"{stack.url}/health", timeout=5.0)


def assert_state_sane(snapshot: dict[str, Any]) -> None:
    """No engine in the state shows impossible numbers, whatever its /metrics said."""
    for engine in snapshot["engines"]:
        for key in ("running", "waiting", "swapped"):
            value = engine.get(key)
            assert value is None or value >= 0, (engine["name"], key, value)
        for key in ("kv_cache_usage", "cpu_swap_usage"):
            value = engine.get(key)
            assert value is None or 0.0 <= value <= 1.0, (engine["name"], key, value)
        for key in ("prefill_tps", "decode_tps"):
            value = engine.get(key)
            assert value is None or value >= 0, (engine["name"], key, value)
        assert engine["inflight"] >= 0 and engine["scheduled"] >= 0, engine
    conductor = snapshot["conductor"]
    assert conductor["queue_depth"] >= 0 and all(v >= 0 for v in conductor["inflight"].values()), conductor


# -- leaks -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """The daemon's open file descriptors and client connections at one moment."""

    fds: int
    client_connections: int  # established TCP connections on the API port

    @classmethod
    def of(cls, stack: Stack) -> Usage:
        """Measure the fixture's daemon now."""
        proc = psutil.Process(stack.daemon.pid)
        port = int(stack.url.rsplit(":", 1)[1])
        conns = [c for c in proc.net_connections(kind="tcp")
                 if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED]
        return cls(proc.num_fds(), len(conns))


#: Pooled keep-alive connections to engines come and go; more than this many extra fds is a leak.
FD_SLACK = 12


def drained(stack: Stack, baseline: Usage | None = None) -> bool:
    """In flight, queue and client connections back to zero (and fds near ``baseline``)."""
    if stack.metric("syshax_inflight") != 0 or stack.metric("syshax_queue_depth") != 0:
        return False
    now = Usage.of(stack)
    if now.client_connections != 0:
        return False
    return baseline is None or now.fds <= baseline.fds + FD_SLACK


def assert_drained(stack: Stack, baseline: Usage | None = None, timeout: float = 60.0) -> None:
    """Wait for :func:`drained`, then check the control state agrees; fail naming what stuck."""
    if not wait_until(lambda: drained(stack, baseline), timeout=timeout):
        now = Usage.of(stack)
        raise AssertionError(
            f"not drained: inflight={stack.metric('syshax_inflight')} queue={stack.metric('syshax_queue_depth')} "
            f"client connections={now.client_connections} fds={now.fds} (baseline {baseline})"
        )
    snapshot = state(stack)
    assert sum(snapshot["conductor"]["inflight"].values()) == 0, snapshot["conductor"]
    assert snapshot["conductor"]["queue_depth"] == 0, snapshot["conductor"]
    assert all(e["inflight"] == 0 and e["scheduled"] == 0 for e in snapshot["engines"]), snapshot["engines"]


def assert_no_traceback(stack: Stack) -> None:
    """The daemon logged no traceback and no internal error."""
    log = stack.log_text()
    assert "Traceback" not in log, log[-4000:]
    assert "internal error" not in log, log[-4000:]


# -- raw HTTP, for what httpx refuses to send ----------------------------------------------


#: raw_request's status when the server reset the connection without an answer we could read.
RESET = -1


def raw_request(url: str, data: bytes, timeout: float = 10.0, half_close: bool = False) -> tuple[int, bytes, bytes]:
    """Send raw bytes to the server at ``url``; returns (status, head, body) of the answer.

    The status is 0 when nothing came back and :data:`RESET` when the connection was reset
    before an answer could be read."""
    host, port = url.removeprefix("http://").split(":")
    chunks: list[bytes] = []
    reset = False
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        try:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            reset = True  # the server answered and closed before reading all of it
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                if _complete(b"".join(chunks)):
                    break
        except TimeoutError:
            pass
        except ConnectionResetError:
            reset = True
    answer = b"".join(chunks)
    if not answer.startswith(b"HTTP/1."):
        return (RESET if reset else 0), b"", answer
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, head, body


def _complete(answer: bytes) -> bool:
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value.strip())
    return False
