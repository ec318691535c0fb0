"""The one error renderer: the OpenAI error object as an answer's body, as a stream's last event,
and what becomes of an error once an answer has begun."""

from __future__ import annotations

import json

from syshaxd.api.response import Response
from syshaxd.conductor.reply import end_stream, send_error
from syshaxd.errors import ApiError
from syshaxd.sse import Decoder
from tests.edge.wire import Wire


def test_the_body_is_openais_error_object() -> None:
    error = ApiError(429, "queue full — try later", type="rate_limit_error", headers={"Retry-After": "1"})
    assert json.loads(error.json()) == {"error": {"message": "queue full — try later", "type": "rate_limit_error",
                                                  "param": None, "code": "429"}}
    assert "—".encode() in error.json()  # UTF-8, not \\u escapes
    assert json.loads(ApiError(400, "x", param="max_tokens", code="bad").json())["error"] == {
        "message": "x", "type": "invalid_request_error", "param": "max_tokens", "code": "bad"}


def test_the_event_is_the_same_object_then_done() -> None:
    error = ApiError(502, "engine gpu0 failed mid-stream", type="upstream_error")
    events = Decoder(strict=True).feed(error.event())
    assert [e.done for e in events] == [False, True]
    assert json.loads(events[0].data) == json.loads(error.json())


def test_an_error_before_the_answer_is_the_whole_answer() -> None:
    wire = Wire()
    send_error(Response(wire, keep_alive=True), ApiError(401, "no key", headers={"WWW-Authenticate": "Bearer"}),
               "rid-1")
    head, _, body = wire.data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401 ")
    assert b"www-authenticate: Bearer" in head and b"x-request-id: rid-1" in head
    assert json.loads(body)["error"]["message"] == "no key" and wire.done and not wire.aborted


def test_an_error_after_the_answer_began_cuts_it() -> None:
    wire = Wire()
    response = Response(wire, keep_alive=True)
    response.start(200, [(b"content-type", b"application/json")], 100)
    response.write(b'{"half":')
    send_error(response, ApiError(500, "internal error"))
    assert wire.aborted and not wire.done and b"internal error" not in wire.data


def test_a_stream_between_events_ends_with_the_error_inside_it() -> None:
    wire = Wire()
    response = Response(wire, keep_alive=True)
    response.start(200, [(b"content-type", b"text/event-stream")])
    response.write(b'data: {"n": 1}\n\n')
    end_stream(response, ApiError(504, "request exceeded system.request_timeout", type="timeout"))
    assert wire.done and not wire.aborted and wire.data.endswith(b"0\r\n\r\n")
    assert b'"type":"timeout"' in wire.data and b"data: [DONE]" in wire.data
