"""The decision log's pure side: a capped, keyed buffer, the filter, and row diffs.

The widget only turns these into DataTable calls, so what is shown, in which order and
what a filter matches are all testable without a terminal.
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from syshaxd.schema import DecisionModel


def decision_key(decision: DecisionModel) -> str:
    """A decision's row key: one request may be decided more than once (PD, token limits)."""
    return f"{decision.request_id}@{decision.time:.6f}"


@dataclass(frozen=True)
class DecisionLog:
    """The most recent decisions, oldest first, at most ``cap`` of them, with their row keys."""

    cap: int = 500
    items: tuple[DecisionModel, ...] = ()
    keys: tuple[str, ...] = field(default=(), init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", tuple(decision_key(d) for d in self.items))

    def add(self, decisions: Iterable[DecisionModel]) -> DecisionLog:
        """This log with new decisions appended; a known key is updated in place (its outcome).

        Returns this very log when nothing is new, so callers can skip a redraw.
        """
        new = [(decision_key(d), d) for d in decisions]
        if not new:
            return self
        known = dict(zip(self.keys, range(len(self.keys)), strict=True))
        items = list(self.items)
        keys = list(self.keys)
        changed = False
        for key, decision in new:
            pos = known.get(key)
            if pos is None:
                known[key] = len(items)
                items.append(decision)
                keys.append(key)
                changed = True
            elif items[pos] != decision:
                items[pos] = decision
                changed = True
        if not changed:
            return self
        start = max(len(self.items) - 1, 0)  # only appended decisions can be out of order
        if any(items[i].time > items[i + 1].time for i in range(start, len(items) - 1)):
            # Decisions can arrive out of order (state snapshots and events interleave).
            order = sorted(range(len(items)), key=lambda i: items[i].time)
            items = [items[i] for i in order]
            keys = [keys[i] for i in order]
        return DecisionLog._of(self.cap, tuple(items[-self.cap :]), tuple(keys[-self.cap :]))

    @classmethod
    def _of(cls, cap: int, items: tuple[DecisionModel, ...], keys: tuple[str, ...]) -> DecisionLog:
        # Keys are already known: skip recomputing them in __post_init__.
        log = cls.__new__(cls)
        object.__setattr__(log, "cap", cap)
        object.__setattr__(log, "items", items)
        object.__setattr__(log, "keys", keys)
        return log


def matches(decision: DecisionModel, query: str) -> bool:
    """Whether a decision matches a filter: every word must match.

    A word is ``field:value`` (fields: id, device, mode, engine, policy, reason, outcome;
    the value is a prefix for id and a substring otherwise) or plain text found in any of
    those fields. Case-insensitive; an empty query matches everything.
    """
    fields = {
        "id": decision.request_id,
        "device": decision.device or "queued",
        "mode": decision.mode,
        "engine": decision.engine or "",
        "policy": decision.policy,
        "reason": decision.reason,
        "outcome": decision.outcome or "",
    }
    lowered = {k: v.lower() for k, v in fields.items()}
    for word in query.lower().split():
        name, sep, value = word.partition(":")
        if sep and name in lowered:
            text = lowered[name]
            if not (text.startswith(value) if name == "id" else value in text):
                return False
        elif not any(word in text for text in lowered.values()):
            return False
    return True


def visible(log: DecisionLog, query: str, limit: int) -> tuple[tuple[str, DecisionModel], ...]:
    """The newest ``limit`` decisions that match ``query`` with their keys, oldest first."""
    if limit <= 0:
        return ()
    pairs = zip(log.keys, log.items, strict=True)
    chosen = [(k, d) for k, d in pairs if matches(d, query)] if query.strip() else list(pairs)
    return tuple(chosen[-limit:])


@dataclass(frozen=True)
class RowDiff:
    """What turns the rows shown into the rows wanted."""

    remove: tuple[str, ...]
    add: tuple[str, ...]  # in display order, appended at the end
    update: tuple[str, ...]  # keys shown and wanted whose content changed
    append_only: bool  # False: an added row belongs before a shown one (re-sort needed)


def diff_rows(
    shown: Sequence[str], wanted: Sequence[str], changed: Iterable[str] = ()
) -> RowDiff:
    """The row operations from ``shown`` keys to ``wanted`` keys (both in display order)."""
    wanted_set = set(wanted)
    shown_set = set(shown)
    remove = tuple(k for k in shown if k not in wanted_set)
    add = tuple(k for k in wanted if k not in shown_set)
    update = tuple(k for k in changed if k in shown_set and k in wanted_set)
    kept = [k for k in wanted if k in shown_set]
    append_only = True
    if add and kept:
        first_new = wanted.index(add[0])
        last_kept = wanted.index(kept[-1])
        append_only = first_new > last_kept
    return RowDiff(remove, add, update, append_only)


def row_cells(decision: DecisionModel, id_width: int = 10) -> tuple[str, str, str, str, str, str]:
    """A decision as the log's text cells: time, request, device, mode, TTFT, reason."""
    clock = _time.strftime("%H:%M:%S", _time.localtime(decision.time))
    request = decision.request_id
    if len(request) > id_width:
        request = request[: id_width - 1] + "…"
    device = decision.device or "queue"
    mode = "split" if decision.mode == "pd_split" else decision.mode
    ttft = _seconds(decision.est_ttft)
    if decision.ttft is not None:
        ttft = f"{ttft}→{_seconds(decision.ttft)}"
    reason = decision.reason
    if decision.outcome and decision.outcome != "ok":
        reason = f"[{decision.outcome}] {reason}"
    return clock, request, device, mode, ttft, reason


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}" if value < 10 else f"{value:.0f}"
