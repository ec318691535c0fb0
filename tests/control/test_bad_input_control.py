"""Bad input on the control API (Unix socket): a precise 4xx in the control API's error shape
(``{"error": ..., "key": ...}``), nothing changed, no traceback, and the socket stays private.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from tests.plugins.stack import Stack
from tests.probe import assert_no_traceback, chat, control, control_socket, state

NESTED = 100_000


@dataclass(frozen=True)
class Case:
    """One bad control request and what must come back."""

    name: str
    method: str
    path: str
    body: bytes | None
    status: int
    key: str | None = None  # the key the error must name, when it names one
    says: str = ""


def j(value: object) -> bytes:
    """A JSON body."""
    return json.dumps(value).encode()


CASES = [
    Case("invalid JSON", "PATCH", "/v1/config", b'{"decider.cpu_max_batch_size": ', 422, "(body)", "JSON"),
    Case("invalid UTF-8", "PATCH", "/v1/config", b'{"decider.policy": "\xff\xfe"}', 422, "(body)"),
    Case("empty body", "PATCH", "/v1/config", b"", 422, "(body)"),
    Case("JSON array", "PATCH", "/v1/config", j([1, 2]), 422, "(body)", "object"),
    Case("JSON string", "PATCH", "/v1/config", j("decider.policy"), 422, "(body)", "object"),
    Case("empty object", "PATCH", "/v1/config", j({}), 422, "(body)"),
    Case("unknown key", "PATCH", "/v1/config", j({"decider.no_such_key": 1}), 422, "decider.no_such_key"),
    Case("not a runtime key", "PATCH", "/v1/config", j({"services.conductor.port": 1}), 422,
         "services.conductor.port"),
    Case("wrong type", "PATCH", "/v1/config", j({"decider.cpu_max_batch_size": "many"}), 422,
         "decider.cpu_max_batch_size"),
    Case("out of range", "PATCH", "/v1/config", j({"decider.cpu_max_batch_size": -4}), 422,
         "decider.cpu_max_batch_size"),
    Case("absurd number", "PATCH", "/v1/config", j({"decider.cpu_max_batch_size": 10**40}), 422,
         "decider.cpu_max_batch_size"),
    Case("unknown policy", "PATCH", "/v1/config", j({"decider.policy": "fastest"}), 422, "decider.policy"),
    Case("one good key, one bad", "PATCH", "/v1/config",
         j({"decider.cpu_max_batch_size": 3, "decider.gpu_cache_threshold": "hot"}), 422,
         "decider.gpu_cache_threshold"),
    Case("unknown engine", "PATCH", "/v1/config", j({"engines.tpu0.enabled": False}), 422, "engines.tpu0.enabled"),
    Case("engine flag a string", "PATCH", "/v1/config", j({"engines.gpu0.draining": "yes"}), 422,
         "engines.gpu0.draining"),
    Case("deeply nested value", "PATCH", "/v1/config",
         b'{"decider.cpu_max_batch_size": ' + b"[" * NESTED + b"]" * NESTED + b"}", 422, "(body)"),
    Case("deeply nested body", "PATCH", "/v1/config", b"[" * NESTED + b"]" * NESTED, 422, "(body)"),
    Case("huge body", "PATCH", "/v1/config", j({f"decider.k{i}": i for i in range(300_000)}), 413),
    Case("unknown route", "GET", "/v1/nope", None, 404),
    Case("wrong method", "POST", "/v1/state", b"{}", 405),
    Case("wrong method on config", "GET", "/v1/config/save", None, 405),
]


def check(client: httpx.Client, case: Case) -> str | None:
    """None when the case got what it must, else what went wrong."""
    try:
        response = client.request(case.method, case.path, content=case.body)
    except httpx.HTTPError as exc:
        return f"{case.name}: transport error {type(exc).__name__}: {exc}"
    if response.status_code != case.status:
        return f"{case.name}: HTTP {response.status_code}, expected {case.status}: {response.text[:200]}"
    try:
        body = response.json()
    except ValueError:
        return f"{case.name}: body is not JSON: {response.text[:200]!r}"
    if not isinstance(body, dict) or not isinstance(body.get("error"), str) or not body["error"]:
        return f"{case.name}: not the control API's error shape: {body!r:.200}"
    if case.key is not None and body.get("key") != case.key:
        return f"{case.name}: key {body.get('key')!r}, expected {case.key!r}"
    if case.says and case.says.lower() not in body["error"].lower():
        return f"{case.name}: {body['error']!r} does not mention {case.says!r}"
    return None


def test_bad_control_requests_get_precise_errors_and_change_nothing(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic")
    before = state(stack)
    with control(stack) as client:
        client.timeout = httpx.Timeout(30.0)
        problems = [p for case in CASES if (p := check(client, case)) is not None]
    assert not problems, "\n".join(problems)
    after = state(stack)
    assert after["config"] == before["config"]
    assert [(e["name"], e["enabled"], e["draining"]) for e in after["engines"]] == \
        [(e["name"], e["enabled"], e["draining"]) for e in before["engines"]]
    assert_no_traceback(stack)
    assert chat(stack, stream=False).complete
    assert_socket_private(stack)


def assert_socket_private(stack: Stack) -> None:
    """The control socket is a socket, with no access at all for others."""
    info = control_socket(stack).stat()
    assert stat.S_ISSOCK(info.st_mode)
    assert info.st_mode & 0o007 == 0, oct(info.st_mode)
    assert control_socket(stack).parent.stat().st_mode & 0o002 == 0
