"""Pure Rich renderables of the console's panels, shared by the widgets and ``--once``.

Every state is written as text and a glyph, never by colour alone, so the console reads
the same under ``NO_COLOR``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text

from console.model import (
    CoreLayout,
    Device,
    History,
    NodeLayout,
    batch_limit,
    kv_threshold,
    ranges,
    resample,
    row_width,
)
from syshaxd.schema import ConductorStatsModel, EngineStateModel, HostModel, MemoryModel

STATES: Mapping[str, tuple[str, str, str]] = {
    "up": ("●", "UP", "green"),
    "stale": ("◐", "STALE", "yellow"),
    "down": ("✗", "DOWN", "bold red"),
    "unknown": ("○", "WAIT", "dim"),
}
SPARKS = "▁▂▃▄▅▆▇█"
DETAIL_WIDTH = 70  # device cards this wide get a fourth line: dialect, URL, scheduled
HEAT = "▁▂▃▄▅▆▇█"


# ---------------------------------------------------------------------------------------
# Primitives


def fmt_rate(value: float | None) -> str:
    """812 -> "812", 4100 -> "4.1k", None -> "–"."""
    if value is None:
        return "–"
    if value < 10:
        return f"{value:.1f}"
    if value < 1000:
        return f"{value:.0f}"
    if value < 999_500:
        return f"{value / 1000:.1f}k" if value < 9_950 else f"{value / 1000:.0f}k"
    return f"{value / 1e6:.1f}M"


#: syshaxd's own event-loop lag (p99 over a minute) worth showing, and worth alarm.
LOOP_LAG_WARN = 0.1
LOOP_LAG_BAD = 1.0


def fmt_seconds(value: float | None) -> str:
    """0.214 -> "0.21s", 12.3 -> "12s"."""
    if value is None:
        return "–"
    return f"{value:.2f}s" if value < 10 else f"{value:.0f}s"


def fmt_uptime(seconds: float) -> str:
    """Seconds as "45s", "12m", "3h12m" or "2d4h"."""
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def fmt_memory(memory: MemoryModel) -> str | None:
    """The daemon's own RSS, and how far it grew since it was first ready: "64 MB (+3%)"."""
    if memory.rss is None:
        return None
    text = f"{memory.rss / 2**20:.0f} MB"
    if memory.rss_start:
        text += f" ({(memory.rss / memory.rss_start - 1) * 100:+.0f}%)"
    return text


def fmt_gib(used: int | None, total: int | None) -> str:
    """Bytes as "61/128G"."""
    if not total:
        return "–"
    g = 1024**3
    return f"{(used or 0) / g:.0f}/{total / g:.0f}G"


def fmt_int(value: int | float | None) -> str:
    """An integer count, or "–" when not reported."""
    return "–" if value is None else f"{int(value)}"


def bar(fraction: float | None, width: int, threshold: float | None = None) -> Text:
    """A fixed-scale bar (0..1) ``width`` cells wide, with ``┃`` at the threshold."""
    width = max(width, 2)
    if fraction is None:
        return Text("n/a".ljust(width), style="dim")
    fraction = min(max(fraction, 0.0), 1.0)
    cells = width - 1 if threshold is not None else width
    filled = round(fraction * cells)
    over = threshold is not None and fraction >= threshold
    fill = "red" if over else "green"
    # Whole runs, not one span per cell: spans are what drawing a line costs.
    if threshold is None:
        return Text.assemble(("█" * filled, fill), ("░" * (cells - filled), "dim"))
    mark = round(threshold * cells)
    before = min(filled, mark)
    after = max(filled - mark, 0)
    return Text.assemble(
        ("█" * before, fill),
        ("░" * (mark - before), "dim"),
        ("┃", "bold"),
        ("█" * after, fill),
        ("░" * (cells - mark - after), "dim"),
    )


def sparkline(values: Sequence[float], width: int) -> Text:
    """The shape of ``values`` (scaled to their own min and max), newest at the right.

    Print the value beside it: the height is relative, so noise must not look like peaks.
    """
    points = resample(values, width)
    if width <= 0:
        return Text()
    text = Text(" " * (width - len(points)))
    if not points:
        return text
    low, high = min(points), max(points)
    span = high - low
    if span < 0.02 * high or high < 0.5:
        span = 0.0  # noise around a constant (or around zero) draws flat, not as peaks
    levels = (0 if span <= 0 else round((value - low) / span * (len(SPARKS) - 1)) for value in points)
    text.append("".join(SPARKS[level] for level in levels), style="cyan")
    return text


def heat_glyph(percent: float | None, bound: bool) -> tuple[str, str]:
    """One core as (glyph, style): a block as high as its utilisation, underlined when bound."""
    underline = " underline" if bound else ""
    if percent is None:
        return "?", "dim" + underline
    if percent < 2:
        return "·", "dim" + underline
    level = min(len(HEAT) - 1, int(percent / 100 * len(HEAT)))
    colour = "green" if percent < 50 else "yellow" if percent < 80 else "red"
    return HEAT[level], colour + underline


# ---------------------------------------------------------------------------------------
# Panels


def device_title(device: Device, config: Mapping[str, Any], selected: bool) -> str:
    """A device panel's title: the side, its batch limit and KV threshold."""
    parts = [("▶ " if selected else "") + device.upper()]
    limit = batch_limit(config, device)
    if limit is not None:
        parts.append(f"limit {limit}")
    threshold = kv_threshold(config, device)
    if threshold is not None:
        parts.append(f"KV ≤{threshold * 100:.0f}%")
    return " · ".join(parts)


def device_panel(
    engines: Sequence[EngineStateModel],
    *,
    device: Device,
    config: Mapping[str, Any],
    history: History,
    selected: str | None,
    width: int,
) -> Text:
    """Every engine of one device, three lines each (four when wide)."""
    if not engines:
        return Text(f"no {device.upper()} engine configured", style="dim")
    name_width = min(max(len(e.name) for e in engines), 12)
    out = Text()
    for index, engine in enumerate(engines):
        if index:
            out.append("\n")
        out.append_text(
            engine_card(engine, device, config, history, engine.name == selected, name_width, width)
        )
    return out


def engine_card(
    engine: EngineStateModel,
    device: Device,
    config: Mapping[str, Any],
    history: History,
    selected: bool,
    name_width: int,
    width: int,
) -> Text:
    """One engine: state and KV cache, counts, then tokens/s (or the last error)."""
    glyph, word, style = STATES.get(engine.state, STATES["unknown"])
    line1 = Text("▶" if selected else " ", style="bold")
    line1.append(engine.name[:name_width].ljust(name_width), style="bold" if selected else "")
    line1.append(f" {glyph} ", style=style)
    line1.append(word.ljust(5), style=style)
    if not engine.enabled:
        line1.append(" OFF", style="bold yellow")
    elif engine.draining:
        line1.append(" DRAIN", style="bold yellow")
    kv = engine.kv_cache_usage
    pct = "  n/a" if kv is None else f" {kv * 100:3.0f}%"
    bar_width = width - line1.cell_len - len(" KV ") - len(pct)
    if bar_width >= 4:
        line1.append(" KV ")
        line1.append_text(bar(kv, bar_width, kv_threshold(config, device)))
        line1.append(pct, style="bold" if kv is not None else "dim")

    # The confirmed config first: it changes the moment the daemon accepts a PATCH.
    limit = batch_limit(config, device)
    if limit is None:
        limit = engine.batch_limit
    running = fmt_int(engine.running)
    over = engine.running is not None and limit is not None and engine.running >= limit
    wide = width >= 56
    if engine.swapped is not None:
        swap = ("swapped" if wide else "swap", fmt_int(engine.swapped))
    else:
        swap = ("preempted" if wide else "preempt", fmt_int(engine.preemptions_total))
    labels = ("running", "waiting", "in-flight") if wide else ("run", "wait", "infl")
    gap = "  " if wide else " "
    # Plain text but for a full batch: every styled span is paid for on each redraw.
    line2 = Text(f"{gap}{labels[0]} ")
    line2.append(f"{running}/{fmt_int(limit)}", style="bold red" if over else "")
    line2.append(f"{gap}{labels[1]} {fmt_int(engine.waiting)}{gap}{swap[0]} {swap[1]}"
                 f"{gap}{labels[2]} {engine.inflight}")  # fmt: skip

    if engine.state in ("down", "stale") and engine.last_error:
        line3 = Text("  ✗ ", style="red")
        line3.append(engine.last_error[: max(width - 4, 0)], style="red")
    else:
        line3 = _rates_line(engine, history, width)
    lines = [line1, line2, line3]
    if width >= DETAIL_WIDTH:
        line4 = Text(f"  {engine.dialect} {engine.url}", style="dim")
        line4.append(f"  scheduled {engine.scheduled}")
        if engine.prefill_speed is not None:
            line4.append(f"  prefills {fmt_rate(engine.prefill_speed)} tok/s")
        if engine.cpu_swap_usage is not None:
            line4.append(f"  swap space {engine.cpu_swap_usage * 100:.0f}%")
        lines.append(line4)
    out = Text()
    for line in lines:
        line.truncate(width)
        if out:
            out.append("\n")
        out.append_text(line)
    return out


def _rates_line(engine: EngineStateModel, history: History, width: int) -> Text:
    decode = f" {fmt_rate(engine.decode_tps)}/s"
    prefill = f" {fmt_rate(engine.prefill_tps)}/s"
    fixed = 2 + len("dec ") + 7 + 2 + len("pre ") + 7
    # A single sample has no shape: print the values alone (the --once snapshot).
    has_shape = len(history.decode.get(engine.name, ())) > 1
    spark = max((width - fixed) // 2, 0) if has_shape else 0
    line = Text("  dec " if spark else "  decode")
    line.append_text(sparkline(history.decode.get(engine.name, ()), spark))
    line.append(decode.ljust(7) + ("  pre " if spark else "  prefill"))
    line.append_text(sparkline(history.prefill.get(engine.name, ()), spark))
    line.append(prefill.ljust(7))
    return line


def node_label(node: NodeLayout) -> str:
    """"N0 43%" for a node ("all" when the host reported no NUMA layout)."""
    name = "all" if node.node is None else f"N{node.node}"
    util = "  –" if node.utilisation is None else f"{node.utilisation:3.0f}"
    return f"{name} {util}%"


def numa_label_width(host: HostModel) -> int:
    """Characters before the heat strip: "N12 100% "."""
    widest = max((len(f"N{n.id}") for n in host.numa_nodes), default=3)
    return widest + 6


def numa_panel(host: HostModel, layout: CoreLayout, label_width: int, width: int) -> Text:
    """Per-node utilisation, the folded per-core heat strip, bound cores and memory."""
    if not layout.nodes:
        return Text("no CPU readings yet", style="dim")
    out = Text()
    strip = row_width(layout.per_row, layout.gaps)
    for node in layout.nodes:
        for index, row in enumerate(node.rows):
            if out:
                out.append("\n")
            out.append((node_label(node) if index == 0 else "").ljust(label_width), style="bold")
            # Runs of equal style become one span: 160 single-cell spans cost far more to draw.
            run_text, run_style = "", ""
            for i, core in enumerate(row):
                glyph, style = heat_glyph(core.percent, core.bound)
                if layout.gaps and i and i % 8 == 0:
                    glyph = " " + glyph
                if style != run_style and run_text:
                    out.append(run_text, style=run_style)
                    run_text = ""
                run_text, run_style = run_text + glyph, style
            if run_text:
                out.append(run_text, style=run_style)
            mem = f"  mem {fmt_gib(_used(node), node.mem_total)}"
            if index == 0 and node.mem_total and label_width + strip + len(mem) <= width:
                out.append(" " * (strip - row_width(len(row), layout.gaps)))
                out.append(mem, style="dim")
    footer = Text("\nmem ")
    footer.append(fmt_gib(host.mem_used, host.mem_total), style="bold")
    if host.bound_cpus:
        footer.append("  bound ")
        footer.append(ranges(host.bound_cpus), style="underline")
    footer.append("  ·▁▄█ 0→100%", style="dim")
    footer.truncate(width + 1)
    out.append_text(footer)
    return out


def _used(node: NodeLayout) -> int | None:
    if node.mem_total is None or node.mem_free is None:
        return None
    return node.mem_total - node.mem_free


def conductor_panel(conductor: ConductorStatsModel, width: int) -> Text:
    """Queue against its limit, rates, TTFT, decisions by device and mode, policy; a draining
    box says so first (a router sends it nothing new; it exits when in flight is done)."""
    out = Text()
    if conductor.box_draining:
        out.append("DRAINING", style="bold reverse red")
        out.append(f" {conductor.box_draining}: /health 503\n")
    out.append("queue ")
    full = conductor.queue_limit and conductor.queue_depth >= conductor.queue_limit
    out.append(f"{conductor.queue_depth}/{conductor.queue_limit}", style="bold red" if full else "bold")
    out.append("  ")
    out.append(f"{conductor.requests_per_s:.1f}", style="bold")
    out.append(" req/s")
    if conductor.classes:
        # Per class: who waits, and how much of what finished met the class's own targets.
        out.append("\nclass       wait good/done/min", style="dim")
        for name, c in sorted(conductor.classes.items()):
            good, done = round(c.goodput_per_s * 60), round(c.finished_per_s * 60)
            out.append(f"\n{name[:11]:<11}")
            out.append(f"{c.waiting:>5}", style="bold yellow" if c.waiting else "")
            out.append(f" {good}", style="bold red" if good < done else "bold")
            out.append(f"/{done}")
    out.append("\nTTFT p50 ")
    out.append(fmt_seconds(conductor.ttft_p50), style="bold")
    out.append(" p99 ")
    out.append(fmt_seconds(conductor.ttft_p99), style="bold")
    items = [(k.replace("pd_split", "split"), v) for k, v in sorted(conductor.decisions.items())]
    line = Text()
    for name, count in items or [("decisions", 0)]:
        piece = Text(f"{name} ")
        piece.append(str(count), style="bold")
        if line and line.cell_len + 2 + piece.cell_len > width:
            out.append("\n")
            out.append_text(line)
            line = Text()
        if line:
            line.append("  ")
        line.append_text(piece)
    out.append("\n")
    out.append_text(line)
    out.append("\naccuracy ")
    acc = conductor.decision_accuracy
    out.append("–" if acc is None else f"{acc * 100:.0f}%", style="bold")
    lag = conductor.loop_lag_p99
    if lag is not None and lag >= LOOP_LAG_WARN:
        # syshaxd itself is behind: every stream waits this long; say so before the total.
        out.append("  loop lag ")
        out.append(fmt_seconds(lag), style="bold red" if lag >= LOOP_LAG_BAD else "bold yellow")
    out.append(f"  total {conductor.requests_total}")
    out.append("\npolicy ")
    out.append(conductor.policy or "–", style="bold")
    out.append("  auto-PD ")
    out.append("on" if conductor.auto_pd_offload else "off", style="bold")
    if width >= 44 and conductor.reasons:
        top = sorted(conductor.reasons.items(), key=lambda kv: -kv[1])[:3]
        for reason, count in top:
            out.append(f"\n  {count:>5} ", style="bold")
            out.append(reason)
    lines = out.split("\n")
    for text_line in lines:
        text_line.truncate(width)
    return Text("\n").join(lines)
