"""The running daemon: entry point, wiring, servers, signals, systemd, startup check, vitals."""

from __future__ import annotations

from syshaxd.service.command import main

__all__ = ["main"]
