"""``syshax-console --once``: the same panels, printed once as plain text, no TUI."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from console.decisionlog import DecisionLog, row_cells
from console.model import DEVICES, History, engines_of, fold_cores
from console.render import (
    conductor_panel,
    device_panel,
    device_title,
    fmt_memory,
    fmt_uptime,
    numa_label_width,
    numa_panel,
)
from syshaxd.schema import StateModel


def snapshot(state: StateModel, width: int, socket: str = "", decisions: int = 10) -> RenderableType:
    """Every panel for one state, laid out for a terminal ``width`` columns wide."""
    inner = max(width - 4, 20)
    header = Text()
    header.append(f"syshaxd {state.version}", style="bold")
    header.append(f"  up {fmt_uptime(state.uptime)}")
    memory = fmt_memory(state.memory)
    if memory:
        header.append(f"  {memory}", style="dim")
    if socket:
        header.append(f"  via {socket}", style="dim")
    parts: list[RenderableType] = [header]
    history = History().push(state)
    for device in DEVICES:
        engines = engines_of(state, device)
        body = device_panel(
            engines, device=device, config=state.config, history=history, selected=None, width=inner
        )
        parts.append(Panel(body, title=device_title(device, state.config, False), title_align="left"))
    labels = numa_label_width(state.host)
    layout = fold_cores(state.host, max(inner - labels, 1))
    numa_title = f"NUMA · {len(state.host.cpu_percent)} cores"
    parts.append(Panel(numa_panel(state.host, layout, labels, inner), title=numa_title, title_align="left"))
    parts.append(Panel(conductor_panel(state.conductor, inner), title="conductor", title_align="left"))
    recent = DecisionLog(cap=decisions).add(state.recent_decisions).items
    if recent:
        table = Table(box=None, header_style="bold", expand=False, pad_edge=False)
        for column in ("time", "request", "dev", "mode", "TTFT est→real", "reason"):
            table.add_column(column, no_wrap=column != "reason")
        for decision in recent:
            table.add_row(*row_cells(decision, id_width=16))
        parts.append(Panel(table, title="recent decisions", title_align="left"))
    return Group(*parts)


def print_snapshot(state: StateModel, console: Console, socket: str = "") -> None:
    """Print the snapshot to ``console`` (rich honours ``NO_COLOR`` and pipes by itself)."""
    console.print(snapshot(state, min(console.width, 160), socket))
