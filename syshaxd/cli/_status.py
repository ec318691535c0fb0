"""``syshax status`` rendering: the control API's state as rich tables (no I/O here)."""

from __future__ import annotations

from pathlib import Path

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from syshaxd.config import display_value
from syshaxd.monitor import format_cpulist
from syshaxd.schema import EngineStateModel, HostModel, StateModel


def _num(value: float | int | None, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s"


def _flags(engine: EngineStateModel) -> str:
    if not engine.enabled:
        return "DISABLED"
    return "DRAINING" if engine.draining else "on"


def engines_table(state: StateModel) -> Table:
    """One row per engine: health, switches, cache, batch, throughput, conductor counts."""
    table = Table(title="engines", title_justify="left")
    for name in ("engine", "device", "state", "routing"):
        table.add_column(name)
    for name in ("KV cache", "running/limit", "waiting", "prefill tok/s", "decode tok/s", "in flight"):
        table.add_column(name, justify="right")
    for e in state.engines:
        kv = "-" if e.kv_cache_usage is None else f"{e.kv_cache_usage * 100:.0f}%"
        running = f"{_num(e.running, '{}')}/{_num(e.batch_limit, '{}')}"
        table.add_row(
            e.name, e.device, e.state.upper() if e.state != "up" else "up", _flags(e), kv, running,
            _num(e.waiting, "{}"), _num(e.prefill_tps), _num(e.decode_tps), str(e.inflight),
        )
    return table


def conductor_table(state: StateModel) -> Table:
    """Queue, totals, latency and decisions."""
    c = state.conductor
    table = Table(title="conductor", title_justify="left", show_header=False)
    table.add_column("what")
    table.add_column("value")
    accuracy = "-" if c.decision_accuracy is None else f"{c.decision_accuracy * 100:.0f}%"
    rows: list[tuple[str, str]] = [
        ("policy", f"{c.policy or state.config.get('decider.policy', '?')}"
                   f"{' + auto PD offload' if c.auto_pd_offload else ''}"),
        ("queue", f"{c.queue_depth}/{c.queue_limit}"),
        ("in flight", ", ".join(f"{k} {v}" for k, v in sorted(c.inflight.items())) or "0"),
        ("requests", f"{c.requests_total} ({c.requests_per_s:.1f}/s), {c.resubmits_total} resubmitted"),
        ("TTFT p50 / p99", f"{_num(c.ttft_p50, '{:.3f}s')} / {_num(c.ttft_p99, '{:.3f}s')}"),
        ("decisions", ", ".join(f"{k} {v}" for k, v in sorted(c.decisions.items())) or "-"),
        ("reasons", ", ".join(f"{k} {v}" for k, v in sorted(c.reasons.items(), key=lambda kv: -kv[1])) or "-"),
        ("outcomes", ", ".join(f"{k} {v}" for k, v in sorted(c.outcomes.items())) or "-"),
        ("decision accuracy", accuracy),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def host_table(host: HostModel) -> Table:
    """NUMA nodes with their utilisation and the CPU engine's cores."""
    table = Table(title="host", title_justify="left")
    for name in ("node", "CPUs", "busy", "bound to CPU engine", "memory free"):
        table.add_column(name)
    bound = set(host.bound_cpus)
    for node in host.numa_nodes:
        loads = [host.cpu_percent[c] for c in node.cpus if c < len(host.cpu_percent)]
        busy = f"{sum(loads) / len(loads):.0f}%" if loads else "-"
        mine = sorted(bound & set(node.cpus))
        free = "-" if node.mem_free is None or not node.mem_total else (
            f"{node.mem_free / 2**30:.1f} of {node.mem_total / 2**30:.1f} GiB"
        )
        table.add_row(str(node.id), format_cpulist(node.cpus) or "-", busy, format_cpulist(mine) or "-", free)
    return table


def config_table(state: StateModel) -> Table:
    """Runtime keys, values and where each came from."""
    table = Table(title="runtime config", title_justify="left")
    table.add_column("key")
    table.add_column("value")
    table.add_column("from")
    for key, value in sorted(state.config.items()):
        table.add_row(key, display_value(value), state.config_sources.get(key, "default"))
    return table


def render_state(state: StateModel, socket: Path | None = None) -> list[RenderableType]:
    """Everything ``syshax status`` prints, top to bottom."""
    head = Text(f"syshaxd {state.version}, up {_duration(state.uptime)}")
    if socket is not None:
        head.append(f"  (control socket {socket})", style="dim")
    if state.events_dropped:
        head.append(f"  {state.events_dropped} events dropped for slow readers", style="yellow")
    if state.conductor.box_draining:
        head.append(f"\nDRAINING ({state.conductor.box_draining}): /health answers 503; syshaxd exits once "
                    "what is in flight has finished", style="bold red")
    parts: list[RenderableType] = [head, engines_table(state), conductor_table(state)]
    if state.host.numa_nodes:
        parts.append(host_table(state.host))
    parts.append(config_table(state))
    return parts
