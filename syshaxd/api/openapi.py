"""The API's OpenAPI document: FastAPI documents its own routes; the plain-ASGI completion
routes (:mod:`syshaxd.api.completions`) are added here so the document names every route.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from syshaxd.api.completions import ROUTES

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


def openapi_paths(chat_schema: dict[str, Any] = CHAT_SCHEMA, completion_schema: dict[str, Any] = COMPLETION_SCHEMA) -> dict[str, Any]:
    """The routes' entries for the OpenAPI document (FastAPI only documents its own routes)."""
    paths: dict[str, Any] = {}
    for path, (kind, _, summary) in ROUTES.items():
        schema = chat_schema if kind == "chat" else completion_schema
        error = {"description": "An OpenAI-shaped error", "content": {"application/json": {"schema": {
            "type": "object", "required": ["error"], "properties": {"error": {"type": "object"}}}}}}
        paths[path] = {"post": {
            "summary": summary,
            "operationId": path.strip("/").replace("/", "_"),
            "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
            "responses": {
                "200": {"description": "The completion, or with \"stream\": true a text/event-stream of chunks",
                        "content": {"application/json": {"schema": {"type": "object"}},
                                    "text/event-stream": {"schema": {"type": "string"}}}},
                **{code: error for code in ("400", "401", "404", "413", "415", "422", "429", "502", "503", "504")},
            },
        }}
    return paths


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` document the completion routes beside FastAPI's own."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            schema["paths"] = {**openapi_paths(), **schema.get("paths", {})}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
