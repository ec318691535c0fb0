"""Bad input on the OpenAI routes: every case gets a precise 4xx with an OpenAI-shaped body, the
daemon logs no traceback and keeps serving.

One daemon serves a whole group of cases (starting one per case would cost seconds each);
a failing group names every case that went wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from tests.plugins.stack import Stack
from tests.probe import (
    MESSAGES,
    RESET,
    assert_drained,
    assert_no_traceback,
    assert_openai_error,
    chat,
    raw_request,
)

CHAT, COMPLETIONS, PD = "/v1/chat/completions", "/v1/completions", "/v1/chat/pd_disagg"
#: The conductor's default services.conductor.max_body_bytes.
BODY_LIMIT = 4 * 1024 * 1024


@dataclass(frozen=True)
class Case:
    """One bad request and exactly what must come back."""

    name: str
    body: bytes
    status: int
    says: str = ""  # a fragment the error message must contain
    param: str | None = None
    path: str = CHAT
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})


def j(**body: object) -> bytes:
    """A JSON body."""
    return json.dumps(body).encode()


def ok_chat(**extra: object) -> bytes:
    """A valid chat body plus ``extra`` fields (a field set to ... is removed)."""
    body: dict[str, object] = {"model": "ds-32b", "messages": MESSAGES, "max_tokens": 3}
    body.update(extra)
    return json.dumps({k: v for k, v in body.items() if v is not ...}).encode()


NESTED = 100_000

BODY_CASES = [
    # not JSON, or not an object
    Case("empty body", b"", 400, "empty"),
    Case("whitespace body", b"  \n ", 400, "empty"),
    Case("truncated JSON", b'{"messages": [', 400, "not valid JSON"),
    Case("trailing garbage", ok_chat() + b"}}", 400, "not valid JSON"),
    Case("single quotes", b"{'messages': []}", 400, "not valid JSON"),
    Case("NaN literal", b'{"messages": NaN}', 400),
    Case("JSON array", b"[1, 2, 3]", 400, "JSON object"),
    Case("JSON string", b'"hello"', 400, "JSON object"),
    Case("JSON null", b"null", 400, "JSON object"),
    Case("JSON number", b"42", 400, "JSON object"),
    Case("invalid UTF-8", b'{"messages": [{"role": "user", "content": "\xff\xfe\xfd"}]}', 400, "UTF-8"),
    Case("UTF-16 with BOM", '{"messages": []}'.encode("utf-16"), 400),
    Case("deeply nested array body", b"[" * NESTED + b"]" * NESTED, 400, "nested"),
    Case("deeply nested messages", b'{"messages": ' + b"[" * NESTED + b"]" * NESTED + b"}", 400, "nested"),
    Case("deeply nested objects", b'{"a":' * NESTED + b"1" + b"}" * NESTED, 400, "nested"),
    # missing and wrong-typed fields
    Case("no messages", j(model="ds-32b"), 400, "messages", "messages"),
    Case("messages empty", ok_chat(messages=[]), 400, "messages", "messages"),
    Case("messages a string", ok_chat(messages="hi"), 400, "messages", "messages"),
    Case("messages an object", ok_chat(messages={"role": "user"}), 400, "messages", "messages"),
    Case("message not an object", ok_chat(messages=["hi"]), 400, "messages[0]", "messages"),
    Case("message without role", ok_chat(messages=[{"content": "hi"}]), 400, "role", "messages"),
    Case("role a number", ok_chat(messages=[{"role": 1, "content": "hi"}]), 400, "role", "messages"),
    Case("content a number", ok_chat(messages=[{"role": "user", "content": 5}]), 400, "content", "messages"),
    Case("content parts not objects", ok_chat(messages=[{"role": "user", "content": [1]}]), 400, "content",
         "messages"),
    Case("model a number", ok_chat(model=7), 400, "model", "model"),
    Case("model empty", ok_chat(model=""), 400, "model", "model"),
    Case("stream a string", ok_chat(stream="yes"), 400, "stream", "stream"),
    Case("stream_options a list", ok_chat(stream=True, stream_options=[1]), 400, "stream_options",
         "stream_options"),
    Case("max_tokens negative", ok_chat(max_tokens=-1), 400, "max_tokens", "max_tokens"),
    Case("max_tokens zero", ok_chat(max_tokens=0), 400, "max_tokens", "max_tokens"),
    Case("max_tokens a string", ok_chat(max_tokens="10"), 400, "max_tokens", "max_tokens"),
    Case("max_tokens a float", ok_chat(max_tokens=1.5), 400, "max_tokens", "max_tokens"),
    Case("max_tokens a bool", ok_chat(max_tokens=True), 400, "max_tokens", "max_tokens"),
    Case("max_tokens null-ish list", ok_chat(max_tokens=[3]), 400, "max_tokens", "max_tokens"),
    Case("max_completion_tokens negative", ok_chat(max_completion_tokens=-5), 400, "max_completion_tokens",
         "max_completion_tokens"),
    # the engine's context is far smaller: the engine's own 400 comes back, reshaped if need be
    Case("max_tokens absurd", ok_chat(max_tokens=10**12), 400, "maximum context length", "max_tokens"),
    Case("max_tokens beyond int64", ok_chat(max_tokens=10**30), 400, "", "max_tokens"),
    Case("n past the cap", ok_chat(n=17), 400, "'n' must be from 1 to 16", "n"),
    Case("n = 0", ok_chat(n=0), 400, "n", "n"),
    Case("n a string", ok_chat(n="1"), 400, "n", "n"),
    Case("num_decode_tokens a string", ok_chat(num_decode_tokens="x"), 400, "num_decode_tokens",
         "num_decode_tokens"),
    Case("unknown model", ok_chat(model="no-such-model"), 404, "no-such-model"),
    Case("unknown model, streamed", ok_chat(model="no-such-model", stream=True), 404, "no-such-model"),
    # /v1/completions
    Case("completions: no prompt", j(model="ds-32b"), 400, "prompt", "prompt", path=COMPLETIONS),
    Case("completions: prompt a number", j(prompt=5), 400, "prompt", "prompt", path=COMPLETIONS),
    Case("completions: prompt an object", j(prompt={"a": 1}), 400, "prompt", "prompt", path=COMPLETIONS),
    Case("completions: batch of prompts", j(prompt=["a", "b"]), 400, "batch", "prompt", path=COMPLETIONS),
    Case("completions: empty prompt list", j(prompt=[]), 400, "prompt", "prompt", path=COMPLETIONS),
    Case("completions: mixed prompt list", j(prompt=["a", 1]), 400, "prompt", "prompt", path=COMPLETIONS),
    Case("completions: max_tokens negative", j(prompt="hi", max_tokens=-3), 400, "max_tokens", "max_tokens",
         path=COMPLETIONS),
    Case("completions: unknown model", j(prompt="hi", model="no-such-model"), 404, "no-such-model",
         path=COMPLETIONS),
    # the forced split route
    Case("pd_disagg: no messages", j(model="ds-32b"), 400, "messages", "messages", path=PD),
    Case("pd_disagg: unknown model", ok_chat(model="no-such-model"), 404, "no-such-model", path=PD),
    Case("pd_disagg: unknown model, streamed", ok_chat(model="no-such-model", stream=True), 404,
         "no-such-model", path=PD),
    Case("pd_disagg: max_tokens absurd", ok_chat(max_tokens=10**12), 400, "maximum context length", path=PD),
]


def check(stack: Stack, case: Case, client: httpx.Client) -> str | None:
    """Send a case; None when it got exactly what it must, else what went wrong."""
    try:
        response = client.post(f"{stack.url}{case.path}", content=case.body, headers=case.headers)
    except httpx.HTTPError as exc:
        return f"{case.name}: transport error {type(exc).__name__}: {exc}"
    try:
        error = assert_openai_error(response, case.status)
    except AssertionError as exc:
        return f"{case.name}: {exc}"
    if case.says and case.says.lower() not in error["message"].lower():
        return f"{case.name}: message {error['message']!r} does not mention {case.says!r}"
    if case.param is not None and error.get("param") not in (case.param, None):
        return f"{case.name}: param {error.get('param')!r}, expected {case.param!r}"
    return None


def run_cases(stack: Stack, cases: list[Case]) -> None:
    """Every case answered precisely; the daemon logged no traceback, released everything, still serves."""
    with httpx.Client(timeout=30) as client:
        problems = [p for case in cases if (p := check(stack, case, client)) is not None]
    assert not problems, "\n".join(problems)
    assert_no_traceback(stack)
    assert_drained(stack)
    after = chat(stack, stream=True)
    assert after.complete, after


def test_bad_bodies_get_precise_openai_errors(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic")
    run_cases(stack, BODY_CASES)


def test_odd_but_valid_bodies_pass_through(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only")
    # Fields the conductor does not know go to the engine untouched (vLLM ignores them).
    body = ok_chat(frobnicate={"deep": [1, 2, {"x": None}]}, user="someone", metadata={"k": "v"})
    response = httpx.post(f"{stack.url}{CHAT}", content=body, headers={"Content-Type": "application/json"},
                          timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["finish_reason"] in ("length", "stop")

    # "\\ud800" is legal JSON but has no UTF-8 form, and the conductor fills in the model, so it
    # re-encodes the body: forwarded escaped, never a 500 from the conductor. (What the engine
    # makes of it is its business: the simulator answers 500, so the client gets a clean 502.)
    body = b'{"messages": [{"role": "user", "content": "a\\ud800b"}], "max_tokens": 2}'
    response = httpx.post(f"{stack.url}{CHAT}", content=body, headers={"Content-Type": "application/json"},
                          timeout=30)
    assert response.status_code != 500, response.text
    if response.status_code != 200:
        error = assert_openai_error(response)
        assert error["type"] != "internal_error", error
    assert_no_traceback(stack)
    assert_drained(stack)


def test_body_size_limit(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only")
    huge = ok_chat(messages=[{"role": "user", "content": "x" * (BODY_LIMIT + 10)}])
    cases = [Case("declared over the limit", huge, 413, "limit")]
    with httpx.Client(timeout=30) as client:
        problems = [p for case in cases if (p := check(stack, case, client)) is not None]

        def chunks() -> object:
            for i in range(0, len(huge), 65536):
                yield huge[i:i + 65536]

        # No Content-Length: the conductor must count as it reads, not trust a header.
        response = client.post(f"{stack.url}{CHAT}", content=chunks(),  # type: ignore[arg-type]
                               headers={"Content-Type": "application/json"})
    assert not problems, problems
    assert_openai_error(response, 413)
    assert response.request.headers.get("transfer-encoding") == "chunked"
    # A declared size far over the limit is refused before any body is read.
    status, _, body = raw_request(stack.url, (f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                              f"Content-Length: {10**12}\r\n\r\n").encode())
    assert status == 413, body
    assert json.loads(body)["error"]["message"]
    assert_no_traceback(stack)
    assert_drained(stack)


def test_header_abuse(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="gpu-only")
    body = ok_chat()
    head = f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"

    def refused_head(status: int, answer: bytes) -> None:
        # Over the conductor's limit: its own 431. Far over, h11 may give up first with its
        # plain 400 (or reset a connection still sending): a 4xx either way, never served.
        assert status in (400, 431, RESET), status
        if status == 431:
            assert "over the limit" in json.loads(answer)["error"]["message"]

    # A header bigger than any real client sends, one header, then thousands of small ones.
    status, _, answer = raw_request(stack.url, (head + f"X-Junk: {'a' * 100_000}\r\n"
                                                f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    refused_head(status, answer)
    many = "".join(f"X-H{i}: v\r\n" for i in range(8000))
    status, _, answer = raw_request(stack.url, (head + many + f"Content-Length: {len(body)}\r\n\r\n").encode()
                                    + body)
    refused_head(status, answer)
    # A megabyte of header: refused as soon as the limit is passed.
    status, _, answer = raw_request(stack.url, (head + f"X-Junk: {'a' * 1_000_000}\r\n\r\n").encode())
    refused_head(status, answer)
    # Content-Length that is not a number, negative, or given twice with different values.
    for bad in ("abc", "-1", "12, 13"):
        status, _, _ = raw_request(stack.url, (head + f"Content-Length: {bad}\r\n\r\n").encode() + body)
        assert 400 <= status < 500, (bad, status)
    status, _, _ = raw_request(stack.url, (head + f"Content-Length: {len(body)}\r\nContent-Length: 3\r\n\r\n")
                               .encode() + body)
    assert 400 <= status < 500, status
    # Content-Length promising more than is sent, then the client stops sending: no 5xx, no hang.
    status, _, _ = raw_request(stack.url, (head + f"Content-Length: {len(body) + 100}\r\n\r\n").encode() + body,
                               timeout=10, half_close=True)
    assert status == 0 or 400 <= status < 500, status
    # A broken chunked body.
    status, _, _ = raw_request(stack.url, (head + "Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n").encode())
    assert 400 <= status < 500, status

    with httpx.Client(timeout=30) as client:
        for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            response = client.post(f"{stack.url}{CHAT}", content=body, headers={"Content-Type": content_type})
            error = assert_openai_error(response, 415)
            assert "application/json" in error["message"], error
        # application/json with parameters is still JSON.
        response = client.post(f"{stack.url}{CHAT}", content=body,
                               headers={"Content-Type": "application/json; charset=utf-8"})
        assert response.status_code == 200, response.text
        # Wrong methods and unknown routes are OpenAI-shaped too.
        assert_openai_error(client.get(f"{stack.url}{CHAT}"), 405)
        assert_openai_error(client.post(f"{stack.url}/v1/nope", content=body), 404)
    assert_no_traceback(stack)
    assert_drained(stack)
    assert chat(stack, stream=True).complete


def test_api_key_rejects_missing_and_wrong_keys_without_logging_them(make_stack: Callable[..., Stack]) -> None:
    key = "sk-reliability-secret-4711"
    stack = make_stack(policy="gpu-only", api_key=key)
    with httpx.Client(timeout=30) as client:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": key},
                        {"Authorization": "Basic " + key}, {"Authorization": "Bearer " + key + "x"}):
            response = client.post(f"{stack.url}{CHAT}", content=ok_chat(),
                                   headers={"Content-Type": "application/json", **headers})
            assert_openai_error(response, 401)
        response = client.post(f"{stack.url}{CHAT}", content=ok_chat(),
                               headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        assert response.status_code == 200, response.text
    assert key not in stack.log_text()
    assert MESSAGES[0]["content"] not in stack.log_text()  # prompts are not logged at the default level
