"""The API port's edge limits: what one client may hold (``services.conductor.limits``).

Timeouts for a request's head and body, sizes of its head, and caps on open connections.
The server enforces them while it reads (:mod:`syshaxd.api.connection`); docs/reliability.md
says what to set when the port is exposed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EdgeLimits(BaseModel):
    """What one client may hold on the API port: timeouts, sizes and connections."""

    # As every config section: YAML has types, so a quoted number is a mistake to report.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=True)

    head_timeout: float = Field(default=10.0, gt=0, le=3600, description="Seconds from a request's first byte "
                                "(a new connection's first request: from the connection) to the end of its headers; "
                                "408 and close after")
    body_timeout: float = Field(default=30.0, gt=0, le=3600,
                                description="Seconds between two reads of a request body; 408 and close after")
    keep_alive: float = Field(default=75.0, gt=0, le=3600, description="Seconds an idle connection is kept open "
                              "(longer than clients keep theirs), and a client that does not read its answers")
    max_header_bytes: int = Field(default=64 * 1024, ge=1024, le=1024**2,
                                  description="Request line and headers together; 431 above, as soon as it is passed")
    max_headers: int = Field(default=100, ge=8, le=10_000, description="Header fields in one request; 431 above")
    max_target_bytes: int = Field(default=16 * 1024, ge=256, le=1024**2,
                                  description="Request target (path and query); 414 above, as soon as it is passed")
    max_connections: int | None = Field(default=None, ge=1, description="Open client connections per process; "
                                        "null: (open-file limit - fd_reserve) / 2; beyond it: 503 and close")
    fd_reserve: int = Field(default=64, ge=8, le=1_000_000,
                            description="File descriptors kept for engine, monitor and control connections")
    max_connections_per_client: int = Field(default=0, ge=0, description="Open connections from one client "
                                            "address; 0: no limit (set it when clients reach the port directly)")
