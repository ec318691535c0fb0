"""The API port's OpenAPI document and the pages that show it.

The document is built from the routes' own tables: the completion routes
(:data:`syshaxd.api.completions.ROUTES`, with the body schemas below) and the box's own routes
(:data:`syshaxd.api.info.INFO`). The engines' routes that pass through are theirs to document.
``/docs`` (Swagger UI) and ``/redoc`` are static pages that load the viewer from a CDN and the
document from ``/openapi.json``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from syshaxd import __version__
from syshaxd.api.completions import ROUTES


@dataclass(frozen=True)
class Route:
    """One of the box's own (GET) routes, as the document describes it."""

    path: str
    summary: str
    media: str = "application/json"
    statuses: tuple[int, ...] = (200,)


CHAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": {"type": "string"},
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role"],
                "properties": {"role": {"type": "string"}, "content": {"type": "string"}},
            },
        },
        "max_tokens": {"type": "integer", "minimum": 1},
        "max_completion_tokens": {"type": "integer", "minimum": 1},
        "stream": {"type": "boolean"},
        "temperature": {"type": "number"},
    },
}
COMPLETION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["prompt"],
    "properties": {
        "model": {"type": "string"},
        "prompt": {"type": "string"},
        "max_tokens": {"type": "integer", "minimum": 1},
        "stream": {"type": "boolean"},
        "temperature": {"type": "number"},
    },
}


_ERROR = {"description": "An OpenAI-shaped error", "content": {"application/json": {"schema": {
    "type": "object", "required": ["error"], "properties": {"error": {"type": "object"}}}}}}


def completion_paths(chat_schema: dict[str, Any] = CHAT_SCHEMA,
                     completion_schema: dict[str, Any] = COMPLETION_SCHEMA) -> dict[str, Any]:
    """The completion routes' entries."""
    paths: dict[str, Any] = {}
    for path, (kind, _, summary) in ROUTES.items():
        schema = chat_schema if kind == "chat" else completion_schema
        paths[path] = {"post": {
            "summary": summary,
            "operationId": path.strip("/").replace("/", "_"),
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
            "responses": {
                "200": {"description": "The completion, or with \"stream\": true a text/event-stream of chunks",
                        "content": {"application/json": {"schema": {"type": "object"}},
                                    "text/event-stream": {"schema": {"type": "string"}}}},
                **{code: _ERROR for code in ("400", "401", "404", "413", "415", "422", "429", "502", "503", "504")},
            },
        }}
    return paths


def info_paths(routes: Iterable[Route]) -> dict[str, Any]:
    """The box's own routes' entries."""
    paths: dict[str, Any] = {}
    for route in routes:
        schema = {"type": "object"} if route.media == "application/json" else {"type": "string"}
        answers = {str(status): {"description": "OK" if status == 200 else "Not serving",
                                 "content": {route.media: {"schema": schema}}} for status in route.statuses}
        paths[route.path] = {"get": {"summary": route.summary, "operationId": route.path.strip("/").replace("/", "_"),
                                     "responses": {**answers, "401": _ERROR}}}
    return paths


def document(info: Iterable[Route]) -> dict[str, Any]:
    """The whole OpenAPI document of the port."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "syshax", "version": __version__,
                 "description": "One OpenAI-compatible endpoint in front of a GPU and a CPU inference engine."},
        "paths": {**completion_paths(), **info_paths(info)},
    }


_CDN = "https://cdn.jsdelivr.net/npm"
SWAGGER_PAGE = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>syshax API</title>
<link rel="stylesheet" href="{_CDN}/swagger-ui-dist@5/swagger-ui.css"></head>
<body><div id="ui"></div>
<script src="{_CDN}/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>SwaggerUIBundle({{url: "/openapi.json", dom_id: "#ui"}});</script>
</body></html>
""".encode()
REDOC_PAGE = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>syshax API</title></head>
<body><redoc spec-url="/openapi.json"></redoc>
<script src="{_CDN}/redoc@2/bundles/redoc.standalone.js"></script>
</body></html>
""".encode()
