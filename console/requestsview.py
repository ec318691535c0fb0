"""What the requests view and the advice view draw: pure functions of the daemon's records.

The requests view lists the last finished requests, newest first (``GET /v1/requests``);
Enter on one shows the decision's inputs -- the engines as the policy saw them, the limits
it applied, its estimates -- beside what happened. The advice view shows the latest advice
of ``syshax advise`` (``GET /v1/advice``): the recommendation, which class the CPU should
serve, one line per service class, the options.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from syshaxd.schema import AdviceClass, AdviceModel, AdviceOption, RequestRecordModel, duration

#: The requests view's columns.
COLUMNS = ("time", "id", "class", "route", "outcome", "prompt", "out/max", "queue", "TTFT", "TPOT", "e2e",
           "reason")
OK_OUTCOMES = frozenset({"ok"})
#: Limits a person reads first in the detail, in this order (the rest follow).
FIRST_LIMITS = ("gpu_max_batch_size", "cpu_max_batch_size", "auto_pd_offload", "ttft_target", "tpot_target")


#: The advice's figures by the names an operator reads.
FIGURES = {"goodput": "goodput", "ttft_p50": "TTFT p50", "ttft_p99": "TTFT p99", "tpot_p50": "TPOT p50",
           "tpot_p99": "TPOT p99", "output_tps": "output tokens/s", "throughput": "throughput"}


def fmt_duration(value: float | None) -> str:
    """Milliseconds below a second, seconds above (:func:`syshaxd.schema.duration`); "–" for none."""
    return duration(value, missing="–")


def route_of(record: RequestRecordModel) -> str:
    """``gpu/whole``, ``cpu+gpu/pd_split``, or ``-`` when never routed."""
    d = record.decision
    if d is None or d.device is None:
        return "-"
    return f"{d.engine or d.device}/{d.mode}"


def prompt_cell(record: RequestRecordModel) -> str:
    """The prompt's tokens: the engine's count, or ``~`` and syshaxd's estimate."""
    return f"{'~' if record.prompt_tokens_source == 'estimate' else ''}{record.prompt_tokens}"


def out_of_max(record: RequestRecordModel) -> Text:
    """``out/max``: the engine's count (``~``: counted from the deltas the client got; ``?``:
    unknown); with several choices the maximum is theirs together (``48/4x16``). A count above
    the maximum is a fault in the record: shown, in red, never hidden."""
    most = f"{record.choices}x{record.max_tokens}" if record.choices > 1 else f"{record.max_tokens}"
    if record.output_tokens is None:
        return Text(f"?/{most}")
    mark = "~" if record.output_tokens_source == "counted" else ""
    text = f"{mark}{record.output_tokens}/{most}"
    if record.output_tokens > record.max_tokens * record.choices:
        return Text(f"{text}!", style="bold red")
    return Text(text)


def request_row(record: RequestRecordModel) -> tuple[Text, ...]:
    """One row of the requests view."""
    when = time.strftime("%H:%M:%S", time.localtime(record.arrival))
    outcome = Text(record.outcome, style="green" if record.outcome in OK_OUTCOMES else "bold red")
    reason = record.decision.reason if record.decision is not None else ""
    # The class, marked by whether its own targets were met (none: not answered).
    klass = Text(record.service_class or "-")
    if record.met is not None:
        klass.append(" ✓" if record.met else " ✗", style="green" if record.met else "bold red")
    cells = (when, record.request_id[:12], klass, route_of(record), outcome, prompt_cell(record),
             out_of_max(record), fmt_duration(record.queued), fmt_duration(record.ttft),
             fmt_duration(record.tpot), fmt_duration(record.e2e), reason[:60])
    return tuple(cell if isinstance(cell, Text) else Text(cell) for cell in cells)


def request_detail(record: RequestRecordModel) -> RenderableType:
    """Everything the policy saw for one request, and what happened."""
    d = record.decision
    head = Text.assemble(("request ", "dim"), (record.request_id, "bold"), ("  ", ""),
                         (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.arrival)), ""),
                         (f"  {record.kind}, {'streamed' if record.stream else 'whole'}", "dim"))
    what = Text()
    if d is None:
        what.append("never routed", style="bold red")
        what.append(f" -- outcome {record.outcome}")
    else:
        what.append(f"{d.policy}", style="bold")
        what.append(" sent it to ")
        what.append(route_of(record), style="bold")
        if d.token_limit is not None:
            what.append(f" (CPU token limit {d.token_limit})")
        what.append(f"\nbecause: {d.reason}")
    happened = Table(box=None, show_header=True, header_style="bold", title="estimated vs what happened",
                     title_justify="left")
    for col in ("", "estimated", "happened"):
        happened.add_column(col, justify="right")
    happened.add_row("TTFT", fmt_duration(d.est_ttft if d else None), fmt_duration(record.ttft))
    happened.add_row("e2e", fmt_duration(d.est_e2e if d else None), fmt_duration(record.e2e))
    happened.add_row("queued", "", fmt_duration(record.queued))
    happened.add_row("TPOT", "", fmt_duration(record.tpot))
    out = "?" if record.output_tokens is None else str(record.output_tokens)
    most = f"{record.max_tokens}" + (f" x {record.choices} choices" if record.choices > 1 else "")
    happened.add_row("tokens", f"prompt {prompt_cell(record)} ({record.prompt_tokens_source}), max {most}",
                     f"{out} out ({record.output_tokens_source or 'unknown'}), {record.outcome}")
    return Group(head, what, Text(""), _inputs_table(record), Text(""), happened, Text(""), _service_text(record),
                 _limits_text(record))


def _service_text(record: RequestRecordModel) -> Text:
    """Its class, its own targets, whether it met them, and what it cost."""
    text = Text("class  ", style="bold")
    text.append(record.service_class or "-", style="bold")
    text.append(f"  targets TTFT {fmt_duration(record.ttft_target)}, TPOT {fmt_duration(record.tpot_target)}")
    if record.met is not None:
        text.append("  met" if record.met else "  missed", style="green" if record.met else "bold red")
    if record.gpu_seconds is not None:
        text.append(f"\ncost   {record.gpu_seconds:.3f} GPU-s, {record.cpu_core_seconds or 0.0:.2f} CPU-core-s "
                    "(its share of each engine's time while held)")
    return text


def _inputs_table(record: RequestRecordModel) -> Table:
    table = Table(box=None, show_header=True, header_style="bold", title="the engines as the policy saw them",
                  title_justify="left")
    for col in ("engine", "state", "running", "waiting", "in flight", "KV", "TPOT now", "TTFT now", "prefill tok/s"):
        table.add_column(col, justify="left" if col in ("engine", "state") else "right")
    for view in record.inputs:
        kv = "–" if view.kv_cache_usage is None else f"{view.kv_cache_usage * 100:.0f}%"
        state = view.state if view.usable else f"{view.state} (not usable)"
        table.add_row(f"{view.name} ({view.device})", state, str(view.running), str(view.waiting),
                      str(view.inflight), kv, fmt_duration(view.tpot_recent), fmt_duration(view.ttft_recent),
                      "–" if view.prefill_speed is None else f"{view.prefill_speed:,.0f}")
    if not record.inputs:
        table.add_row("(not routed: nothing was decided)", "", "", "", "", "", "", "", "")
    return table


def _limits_text(record: RequestRecordModel) -> Text:
    limits = record.limits
    keys = [k for k in FIRST_LIMITS if k in limits] + sorted(k for k in limits if k not in FIRST_LIMITS)
    text = Text("limits  ", style="bold")
    text.append("  ".join(f"{k}={limits[k]}" for k in keys) or "–")
    return text


def advice_view(advice: AdviceModel | None) -> RenderableType:
    """The latest advice, or how to get one."""
    if advice is None:
        return Text.from_markup("[b]No advice yet.[/b]\nRun [b]syshax advise[/b]: it replays the traffic this "
                                "daemon recorded under each policy and setting, and leaves its advice here.")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(advice.made_at))
    head = Text.assemble(("advice of ", "dim"), (when, "bold"),
                         (f"  -- {advice.requests} requests over {advice.window_s:.0f} s replayed", "dim"))
    profiles = ", ".join(f"{k}: {v}" for k, v in sorted(advice.profiles.items()))
    refused = advice.refused is not None and not advice.forced
    summary = Text(advice.summary, style="bold yellow" if refused else "bold")
    order = [k for k in FIGURES if k in advice.current_error] + sorted(k for k in advice.current_error
                                                                      if k not in FIGURES)
    error = ", ".join(f"{FIGURES.get(k, k)} {advice.current_error[k] * 100:+.0f}%" for k in order)
    parts: list[RenderableType] = [head, summary]
    if advice.cpu_verdict:
        parts.append(Text(advice.cpu_verdict, style="bold cyan"))
    parts += _class_lines(advice)
    if advice.forced and advice.refused:
        parts.append(Text(f"forced although: {advice.refused}", style="yellow"))
    if error:
        bound = f" (bound {advice.error_bound:.0%})" if advice.error_bound is not None else ""
        parts.append(Text(f"self-check, the current setting predicted vs what happened{bound}: {error}", style="dim"))
    if profiles:
        parts.append(Text(f"profiles: {profiles}", style="dim"))
    parts += [Text(""), _options_table(advice.options, advice.recommended)]
    return Group(*parts)


def _class_lines(advice: AdviceModel) -> list[Text]:
    """One line per service class of the window, first to run first: the recommended option's
    figures (the current one's when none is recommended) beside what happened."""
    shown = advice.recommended if advice.recommended is not None else \
        next((i for i, o in enumerate(advice.options) if o.current), None)
    if shown is None or not advice.classes:
        return []
    option = advice.options[shown]
    which = "recommended" if advice.recommended is not None else "current setting"
    lines = []
    for name in sorted(advice.classes, key=lambda n: (advice.classes[n].priority, n)):
        c = option.classes.get(name)
        if c is None:
            continue
        target = advice.classes[name].ttft
        was: AdviceClass | None = advice.actual_classes.get(name)
        text = Text(f"{name:<12}", style="bold")
        text.append(f" {which}: {c.met}/{c.requests} within its targets, TTFT p99 {fmt_duration(c.ttft_p99)}"
                    + (f" of {fmt_duration(target)}" if target is not None else "")
                    + f", refused {c.refused}; GPU {c.gpu_share:.0%} · CPU {c.cpu_share:.0%} · split {c.split_share:.0%}")
        if was is not None:
            text.append(f"   (happened: {was.met}/{was.requests}, TTFT p99 {fmt_duration(was.ttft_p99)})", style="dim")
        lines.append(text)
    return lines


def _options_table(options: Sequence[AdviceOption], recommended: int | None) -> Table:
    table = Table(box=None, show_header=True, header_style="bold")
    for col in ("", "setting", "goodput req/s", "throughput req/s", "TTFT p50", "TTFT p99", "TPOT p99",
                "output tokens/s", "CPU share"):
        table.add_column(col, justify="left" if col in ("", "setting") else "right")
    for i, option in enumerate(options):
        mark = ("→ " if i == recommended else "= " if option.tied else "  ") + ("now" if option.current else "")
        style = "bold green" if i == recommended else "bold" if option.current else ""
        table.add_row(mark, option.label, f"{option.goodput:.2f}", f"{option.throughput:.2f}",
                      fmt_duration(option.ttft_p50), fmt_duration(option.ttft_p99), fmt_duration(option.tpot_p99),
                      "–" if option.output_tps is None else f"{option.output_tps:,.1f}",
                      f"{option.cpu_share * 100:.0f}%", style=style)
    return table
