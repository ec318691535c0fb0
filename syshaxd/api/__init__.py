"""The OpenAI-compatible HTTP API on the conductor's TCP port (a new public route goes here)."""

from __future__ import annotations

from syshaxd.api.app import create_api_server, create_info_app, create_worker_api_server, own_paths
from syshaxd.api.server import ApiServer

__all__ = ["ApiServer", "create_api_server", "create_info_app", "create_worker_api_server", "own_paths"]
