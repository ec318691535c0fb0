"""The OpenAI-compatible HTTP API on the conductor's TCP port, its routes by concern.

- the completion routes, on the hot path (:mod:`syshaxd.api.completions`);
- what the box says about itself: models, health, metrics, load, the OpenAPI document and the
  docs pages (:mod:`syshaxd.api.info`);
- every other route, passed through to the engines (:mod:`syshaxd.api.passthrough`);
- in front of all of it, the server (:mod:`syshaxd.api.server`) and its guard
  (:mod:`syshaxd.api.guard`); errors are rendered once, as OpenAI error objects.

All of them are handlers on the one server: no framework runs on this port.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from syshaxd.api.completions import completion_routes
from syshaxd.api.guard import Guard
from syshaxd.api.info import Info
from syshaxd.api.passthrough import Books, forward_route, passthrough_route
from syshaxd.api.server import ApiServer, Handler
from syshaxd.conductor import Conductor, Dispatcher, LoadFormat
from syshaxd.config import Config
from syshaxd.engines import ConnectionPool, EngineClient


def create_api_server(dispatcher: Dispatcher[Any], conductor: Conductor, config: Config, info: Info) -> ApiServer:
    """The daemon's API port: the dispatcher answers completions, ``info`` (:func:`create_info_app`)
    syshaxd's own routes, the engines every other route they serve."""
    return _api_server(dispatcher, conductor, config, info.handlers(), conductor.registry)


def create_worker_api_server(dispatcher: Dispatcher[Any], books: Books, config: Config, own: Iterable[str],
                             daemon: ConnectionPool) -> ApiServer:
    """A worker process's API port: completions and pass-through as in the daemon, syshaxd's own
    routes (``own``) forwarded to the daemon over ``daemon``, where the books are."""
    forward = forward_route(daemon, config.system.request_timeout)
    return _api_server(dispatcher, books, config, dict.fromkeys(own, forward))


def own_paths(info: Info) -> frozenset[str]:
    """syshaxd's own routes (a worker forwards them to the daemon)."""
    return info.paths


def create_info_app(conductor: Conductor, engines: Sequence[EngineClient],
                    load_format: LoadFormat = "vllm-router") -> Info:
    """The routes off the token path: models, health, metrics, load, the docs."""
    return Info(conductor, engines, load_format)


def _api_server(dispatcher: Dispatcher[Any], books: Books, config: Config, own: dict[str, Handler],
                registry: CollectorRegistry | None = None) -> ApiServer:
    service = config.services.conductor
    keys = {name: secret.get_secret_value() for name, secret in service.named_keys().items()}
    routes: dict[str, Handler] = completion_routes(dispatcher, config)
    routes.update({path: handler for path, handler in own.items() if path not in routes})
    open_paths = frozenset(path for path in own if not path.startswith("/v1/"))  # health, metrics, docs
    passthrough = passthrough_route(books, config.system.request_timeout)
    return ApiServer(routes, Guard(keys, open_paths), service.max_body_bytes, default=passthrough,
                     limits=service.limits, registry=registry)
