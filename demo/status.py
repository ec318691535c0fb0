"""What the demo shows without a terminal: a status line every few seconds and a final summary.

Numbers come from where an operator would read them: requests finished per device and
mode from the conductor's ``/metrics`` (``syshax_requests``), queue, in-flight and engine
rates from the control socket's ``GET /v1/state``, and the client's own view from the
load driver's tally. Building the line and the tables is pure (unit-tested); fetching is
the two small coroutines at the end.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from rich.table import Table

from demo.load import Tally
from demo.loadgen import percentile
from syshaxd.schema import StateModel

#: The conductor's outcome for a request whose client went away.
CANCELLED = "client_disconnect"


@dataclass
class Route:
    """Finished requests of one (device, mode) from the conductor's metrics."""

    outcomes: dict[str, int] = field(default_factory=dict)  # "ok", "client_disconnect", ...
    ttft_sum: float = 0.0
    ttft_count: int = 0
    e2e_sum: float = 0.0
    e2e_count: int = 0

    @property
    def ok(self) -> int:
        """Requests answered in full."""
        return self.outcomes.get("ok", 0)

    @property
    def cancelled(self) -> int:
        """Requests the client gave up (the demo cancels what is in flight when it stops)."""
        return self.outcomes.get(CANCELLED, 0)

    @property
    def failed(self) -> int:
        """Requests that ended any other way (errors, timeouts, truncated streams)."""
        return sum(self.outcomes.values()) - self.ok - self.cancelled

    @property
    def ttft_mean(self) -> float | None:
        """Mean time to first token, seconds."""
        return self.ttft_sum / self.ttft_count if self.ttft_count else None

    @property
    def e2e_mean(self) -> float | None:
        """Mean request latency, seconds."""
        return self.e2e_sum / self.e2e_count if self.e2e_count else None


@dataclass
class ConductorNumbers:
    """What the demo reads from the conductor's ``/metrics``."""

    routes: dict[str, Route] = field(default_factory=dict)  # "gpu/whole" -> Route
    reasons: dict[str, int] = field(default_factory=dict)  # decision reason -> count

    def done(self, device: str | None = None, mode: str | None = None) -> int:
        """Requests that ended well on ``device`` (and ``mode``), all when None."""
        total = 0
        for key, route in self.routes.items():
            dev, _, mod = key.partition("/")
            if (device is None or dev == device) and (mode is None or mod == mode):
                total += route.ok
        return total


def parse_metrics(text: str) -> ConductorNumbers:
    """Read ``syshax_requests``, the latency histograms and ``syshax_decisions``."""
    out = ConductorNumbers()

    def route(labels: Mapping[str, str]) -> Route:
        key = f"{labels.get('device', '?')}/{labels.get('mode', '?')}"
        return out.routes.setdefault(key, Route())

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == "syshax_requests_total":
                outcomes = route(labels).outcomes
                outcome = labels.get("outcome", "?")
                outcomes[outcome] = outcomes.get(outcome, 0) + int(value)
            elif name == "syshax_time_to_first_token_seconds_sum":
                route(labels).ttft_sum += value
            elif name == "syshax_time_to_first_token_seconds_count":
                route(labels).ttft_count += int(value)
            elif name == "syshax_e2e_request_latency_seconds_sum":
                route(labels).e2e_sum += value
            elif name == "syshax_e2e_request_latency_seconds_count":
                route(labels).e2e_count += int(value)
            elif name == "syshax_decisions_total":
                reason = labels.get("reason", "?")
                out.reasons[reason] = out.reasons.get(reason, 0) + int(value)
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def status_line(elapsed: float, numbers: ConductorNumbers, state: StateModel | None, tally: Tally, now: float) -> str:
    """One line: finished requests by route, queue, each engine, and the client's view."""
    routes = "  ".join(
        f"{key} {route.ok}" for key, route in sorted(numbers.routes.items()) if route.ok
    ) or "none yet"
    parts = [f"{elapsed:5.0f}s", f"done: {routes}"]
    if state is not None:
        c = state.conductor
        parts.append(f"queue {c.queue_depth}  in flight {sum(c.inflight.values())}")
        for e in state.engines:
            flag = "" if e.state == "up" else f" {e.state.upper()}"
            parts.append(
                f"{e.name}{flag} run {e.running if e.running is not None else '-'}"
                f"/{e.batch_limit if e.batch_limit is not None else '-'} wait {e.waiting or 0}"
                f" kv {_pct(e.kv_cache_usage)} {_rate(e.decode_tps)} tok/s"
            )
        parts.append(f"{c.policy}{' +pd' if c.auto_pd_offload else ''}")
    parts.append(f"client ok {tally.ok} err {tally.errors} {tally.tokens_per_s(now):.0f} tok/s")
    return " | ".join(parts)


@dataclass
class Summary:
    """Everything the demo reports at the end; also written as JSON with ``--json-summary``."""

    duration: float
    policy: str
    handoff: str
    load: float
    speed: float
    trace: str
    routes: dict[str, dict[str, Any]]
    reasons: dict[str, int]
    client: dict[str, Any]
    splits: int
    done_gpu: int
    done_cpu: int

    def to_json(self) -> str:
        """The summary as indented JSON."""
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    def write(self, path: Path) -> None:
        """Write the JSON summary."""
        path.write_text(self.to_json() + "\n", encoding="utf-8")


def build_summary(
    *, duration: float, policy: str, handoff: str, load: float, speed: float, trace: str,
    numbers: ConductorNumbers, tally: Tally,
) -> Summary:
    """Collect the final numbers."""
    routes = {
        key: {
            "ok": r.ok, "cancelled": r.cancelled, "failed": r.failed, "outcomes": dict(r.outcomes),
            "ttft_mean_s": r.ttft_mean, "e2e_mean_s": r.e2e_mean,
        }
        for key, r in sorted(numbers.routes.items())
    }
    ttfts = list(tally.ttfts)
    client = {
        "sent": tally.sent, "ok": tally.ok, "errors": tally.errors, "lost": tally.lost,
        "skipped": tally.skipped, "chunks": tally.chunks, "error_kinds": dict(tally.error_kinds),
        "ttft_p50_s": percentile(ttfts, 0.5), "ttft_p99_s": percentile(ttfts, 0.99),
    }
    return Summary(
        duration=duration, policy=policy, handoff=handoff, load=load, speed=speed, trace=trace,
        routes=routes, reasons=dict(sorted(numbers.reasons.items(), key=lambda kv: -kv[1])),
        client=client, splits=numbers.done(mode="pd_split"),
        done_gpu=numbers.done("gpu"), done_cpu=numbers.done("cpu"),
    )


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def summary_tables(summary: Summary) -> list[Table]:
    """The final tables: by route, and the policy's reasons."""
    title = (
        f"syshax demo: {summary.duration:.0f}s, policy {summary.policy}, handoff {summary.handoff}, "
        f"load {summary.load:g}, speed {summary.speed:g}"
    )
    routes = Table(title=title, title_justify="left")
    routes.add_column("device/mode")
    for name in ("ok", "failed", "cancelled at stop", "mean TTFT s", "mean latency s"):
        routes.add_column(name, justify="right")
    for key, r in summary.routes.items():
        routes.add_row("(queued, never routed)" if key.startswith("none/") else key, str(r["ok"]), str(r["failed"]), str(r["cancelled"]),
                       _secs(r["ttft_mean_s"]), _secs(r["e2e_mean_s"]))
    c = summary.client
    routes.add_section()
    routes.add_row(
        "client's view", str(c["ok"]), str(c["errors"] + c["lost"]), "", "p50 " + _secs(c["ttft_p50_s"]), "",
    )
    reasons = Table(title="routing decisions by reason", title_justify="left")
    reasons.add_column("reason")
    reasons.add_column("count", justify="right")
    for reason, count in list(summary.reasons.items())[:8]:
        reasons.add_row(reason, str(count))
    return [routes, reasons]


async def fetch_metrics(client: httpx.AsyncClient, url: str) -> ConductorNumbers:
    """The conductor's numbers (empty when it does not answer)."""
    try:
        response = await client.get(f"{url.rstrip('/')}/metrics")
        response.raise_for_status()
    except httpx.HTTPError:
        return ConductorNumbers()
    return parse_metrics(response.text)


async def fetch_state(socket_path: Path) -> StateModel | None:
    """``GET /v1/state`` over the control socket (None when the daemon does not answer)."""
    transport = httpx.AsyncHTTPTransport(uds=str(socket_path))
    async with httpx.AsyncClient(transport=transport, base_url="http://syshaxd", timeout=5.0) as client:
        try:
            response = await client.get("/v1/state")
            response.raise_for_status()
            return StateModel.model_validate_json(response.content)
        except (httpx.HTTPError, ValueError):
            return None
