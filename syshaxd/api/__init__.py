"""The OpenAI-compatible HTTP API on the conductor's TCP port (a new public route goes here)."""

from __future__ import annotations

from syshaxd.api.app import create_api_app

__all__ = ["create_api_app"]
