"""Who may hold a connection to the API port, and the edge's counts in Prometheus.

Every process serving the port caps its open client connections below its open-file limit:
the file descriptors beyond the cap stay for what the process needs to serve the ones it
has (a connection to an engine per running request, the monitor, the control socket, its
logs). Without a configured cap it is ``(RLIMIT_NOFILE - fd_reserve) / 2``, since each
client connection may hold one engine connection while its request runs. With
``max_connections_per_client`` set, one client address may hold at most that many. A
connection past a cap is answered 503 and closed at once, and counted. Connections on a
Unix socket (a worker forwarding to its daemon) are not capped.
"""

from __future__ import annotations

import logging
import resource
from collections import Counter

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client import Counter as PromCounter

from syshaxd.config import EdgeLimits

log = logging.getLogger("syshaxd.api")

CONNECTION_REASONS = ("connection_limit", "client_limit")
REQUEST_REASONS = ("head_timeout", "body_timeout", "header_size", "header_count", "target_size", "body_size",
                   "malformed", "version", "method", "pipeline")


def connection_cap(limits: EdgeLimits, nofile: int | None = None) -> int:
    """The most client connections this process keeps open at once."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    room = max(1, nofile - limits.fd_reserve) if nofile != resource.RLIM_INFINITY else 1 << 20
    if limits.max_connections is None:
        return max(1, room // 2)
    if limits.max_connections > room:
        log.warning("services.conductor.limits.max_connections (%d) is above the open-file limit (%d) less "
                    "fd_reserve (%d): capped at %d", limits.max_connections, nofile, limits.fd_reserve, room)
        return room
    return limits.max_connections


class Gate:
    """Counts open client connections, in all and per address, and refuses those past a cap."""

    def __init__(self, limits: EdgeLimits, registry: CollectorRegistry | None = None) -> None:
        self.cap = connection_cap(limits)
        self.per_client = limits.max_connections_per_client
        self.open = 0
        self._by_address: Counter[str] = Counter()
        registry = registry if registry is not None else CollectorRegistry()
        gauge = Gauge("syshax_http_connections", "Open client connections on the API port (this process)",
                      registry=registry)
        gauge.set_function(lambda: self.open)
        Gauge("syshax_http_connections_max", "The cap on open client connections (this process)",
              registry=registry).set(self.cap)
        self.m_refused = PromCounter("syshax_http_connections_refused", "Client connections refused past a cap",
                                     ["reason"], registry=registry)
        self.m_requests = PromCounter("syshax_http_requests_refused", "Requests refused while they were read "
                                      "(timeouts, sizes, malformed)", ["reason"], registry=registry)
        for reason in CONNECTION_REASONS:
            self.m_refused.labels(reason)
        for reason in REQUEST_REASONS:
            self.m_requests.labels(reason)

    def admit(self, address: str | None) -> str | None:
        """Count a new connection from ``address`` (None: a Unix socket), or the reason it is refused."""
        if address is None:
            return None
        if self.open >= self.cap:
            self.m_refused.labels("connection_limit").inc()
            return f"this server holds its limit of {self.cap} connections (services.conductor.limits)"
        if self.per_client and self._by_address[address] >= self.per_client:
            self.m_refused.labels("client_limit").inc()
            return (f"this client address holds its limit of {self.per_client} connections "
                    "(services.conductor.limits.max_connections_per_client)")
        self.open += 1
        if self.per_client:
            self._by_address[address] += 1
        return None

    def release(self, address: str) -> None:
        """A connection :meth:`admit` counted closed."""
        self.open -= 1
        if self.per_client:
            left = self._by_address[address] - 1
            if left > 0:
                self._by_address[address] = left
            else:
                del self._by_address[address]

    def refused(self, reason: str) -> None:
        """Count a request refused while it was read."""
        self.m_requests.labels(reason).inc()
