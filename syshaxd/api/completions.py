"""The completion routes: the hot path of every token the conductor relays.

``POST /v1/chat/completions``, ``/v1/completions`` and ``/v1/chat/pd_disagg`` are served by
the API's own server (:mod:`syshaxd.api.server`): the body is checked and parsed, the
request's id taken from ``X-Request-ID`` (or made), and the dispatcher answers on the
connection's response. These routes are still in the OpenAPI document
(:mod:`syshaxd.api.openapi`).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable
from typing import Any

from syshaxd.api.body import parse_request
from syshaxd.api.request import Request
from syshaxd.api.response import Response
from syshaxd.api.server import Handler
from syshaxd.conductor import Dispatcher
from syshaxd.config import Config
from syshaxd.errors import ApiError
from syshaxd.request import NO_ASK, PROBE_HEADER, PROBE_ID_PREFIX, Kind, ServiceAsk
from syshaxd.routing import Mode

#: path -> (request kind, forced mode, summary for the API docs)
ROUTES: dict[str, tuple[Kind, Mode | None, str]] = {
    "/v1/chat/completions": ("chat", None, "OpenAI chat completions, routed to the GPU, the CPU, or split"),
    "/v1/completions": ("completion", None, "OpenAI (legacy) completions"),
    "/v1/chat/pd_disagg": ("chat", Mode.PD_SPLIT,
                           "Chat completion always split: prefill on the GPU, decode on the CPU (as sysHAX offers)"),
}
#: A client's request id is passed on as sent when it is this tame; else one is made.
_REQUEST_ID = re.compile(rb"^[A-Za-z0-9._:@/+=-]{1,128}$")
#: A class name as the config allows it (syshaxd.config.classes).
_CLASS_NAME = re.compile(rb"^[A-Za-z0-9._-]{1,64}$")
#: An SLO header's value: milliseconds, a positive decimal number (GAIE's unit).
_MILLISECONDS = re.compile(rb"^[0-9]{1,9}(\.[0-9]{1,3})?$")


#: The headers a completion reads beside the body: its service level, its trace context and
#: calibrate's probe mark.
_ASKING = frozenset({b"x-syshax-class", b"x-slo-ttft-ms", b"x-slo-tpot-ms", b"traceparent", b"tracestate",
                     PROBE_HEADER})


def asked(request: Request) -> tuple[ServiceAsk, tuple[tuple[str, str], ...], bool]:
    """What the headers ask of the request's service level, the client's W3C trace context
    (as sent: the tracer checks it), and whether it is marked as calibrate's probe, read in one
    pass over the headers.

    Raises:
        ApiError: 400 naming the header, for a malformed service-level value.
    """
    found: dict[bytes, bytes] = {}
    for key, value in request.headers:
        if key in _ASKING and key not in found:
            found[key] = value
    if not found:
        return NO_ASK, (), False
    trace = tuple((name.decode(), found[name].decode("latin-1")) for name in (b"traceparent", b"tracestate")
                  if name in found and len(found[name]) <= 512)
    ask = _service_ask(found.get(b"x-syshax-class"), found.get(b"x-slo-ttft-ms"), found.get(b"x-slo-tpot-ms"))
    return ask, trace, PROBE_HEADER in found


def _service_ask(name: bytes | None, ttft: bytes | None, tpot: bytes | None) -> ServiceAsk:
    if name is None and ttft is None and tpot is None:
        return NO_ASK
    if name is not None and not _CLASS_NAME.match(name.strip()):
        raise ApiError(400, f"x-syshax-class {name[:64].decode('latin-1')!r} is not a class name: letters, "
                       "digits, '-', '_' and '.', at most 64", param="x-syshax-class", code="invalid_service_class")
    return ServiceAsk(name.strip().decode("ascii") if name is not None else None,
                      _milliseconds(b"x-slo-ttft-ms", ttft), _milliseconds(b"x-slo-tpot-ms", tpot))


def _milliseconds(header: bytes, value: bytes | None) -> float | None:
    if value is None:
        return None
    value = value.strip()
    if not _MILLISECONDS.match(value) or float(value) <= 0:
        raise ApiError(400, f"{header.decode()} {value[:40].decode('latin-1')!r}: expected a positive number of "
                       "milliseconds, e.g. 60000", param=header.decode(), code="invalid_slo")
    return float(value)


def request_id(request: Request) -> str | None:
    """The client's ``X-Request-ID``, when it sent a usable one."""
    value = request.header(b"x-request-id")
    if value is None or not _REQUEST_ID.match(value):
        return None
    return value.decode("ascii")


def completion_routes(dispatcher: Dispatcher[Any], config: Config) -> dict[str, Handler]:
    """The handlers of :data:`ROUTES`, by path."""

    def route(kind: Kind, forced: Mode | None) -> Handler:
        def handle(request: Request, response: Response) -> Awaitable[None] | None:
            if request.method != "POST":
                raise ApiError(405, f"{request.method} {request.path}: Method Not Allowed", code="405",
                               headers={"Allow": "POST"})
            _check_content_type(request.header(b"content-type"))
            ask, trace, probe = asked(request)
            rid = request_id(request)
            # calibrate marks a probe both ways (sim.calibrate.identity); either one is enough
            probe = probe or (rid is not None and rid.startswith(PROBE_ID_PREFIX))
            parsed = parse_request(request.body, kind, config, ask, trace, probe, api_key_name=request.api_key_name)
            return dispatcher.start(parsed, response, forced, rid)

        return handle

    return {path: route(kind, forced) for path, (kind, forced, _) in ROUTES.items()}


def _check_content_type(declared: bytes | None) -> None:
    # As vLLM does (415), but a missing Content-Type is let through: `curl -d` clients exist.
    if declared is None:
        return
    text = declared.decode("latin-1")
    media = text.split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise ApiError(415, f"unsupported Content-Type {text[:80]!r}: send the body as application/json",
                       code="unsupported_media_type")
