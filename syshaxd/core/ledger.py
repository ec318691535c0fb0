"""The core's books: what has been sent to each engine and not yet seen finish.

The monitor's scrapes say what an engine reports; the ledger says what the core has placed
there: ``inflight`` (not finished), ``scheduled`` (no first byte yet), the output tokens the
in-flight requests may still write, the prompt tokens still to prefill, and each answer
that has started (when, and its max_tokens). A request with ``n`` choices is booked as the
``n`` sequences the engine runs for it (as vLLM counts them running): ``n`` in flight, ``n``
times its max_tokens to write, ``n`` shares of the engine's time; its prompt once (the
sequences share it: vLLM's prefix cache, llama-server's slots copy it). Policies see both, merged into one
:class:`~syshaxd.snapshot.Snapshot` (:meth:`Ledger.merge`). Every change bumps
:attr:`Ledger.version`, which tells the waiting line that asking the policy again may give
another answer. A ticket undoes exactly what it did: every hold is released once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from syshaxd.core.ticket import Ticket
from syshaxd.snapshot import Device, EngineView, Snapshot

V = TypeVar("V", EngineView, Snapshot)
Flags = Callable[[str], tuple[bool, bool]]


@dataclass(eq=False)
class EngineBook:
    """The core's own counts for one engine."""

    name: str
    device: Device
    url: str = ""
    dialect: str = ""
    inflight: int = 0  # sequences placed here, not finished (pass-through requests included)
    scheduled: int = 0  # sequences placed here, no first byte yet
    decode_tokens: int = 0  # output tokens the in-flight sequences may still write (their max_tokens)
    prompt_tokens: int = 0  # prompt tokens of the scheduled requests (their prefill is still to come)
    #: The answers it has started: the first byte's time and max_tokens, by ticket.
    answers: dict[Hashable, tuple[float, int]] = field(default_factory=dict)
    #: The TPOT targets its requests were placed under, with their counts.
    tpot_targets: Counter[float] = field(default_factory=Counter)
    #: Engine-seconds per sequence so far: the integral of 1 / inflight over the time anything
    #: was in flight (the engine's time split equally among the sequences it holds), and when.
    share: float = 0.0
    share_at: float = 0.0

    def tick(self, now: float) -> None:
        """Bring the share clock to ``now`` (before any change of ``inflight``)."""
        if self.inflight > 0 and now > self.share_at:
            self.share += (now - self.share_at) / self.inflight
        self.share_at = max(self.share_at, now)


def evolve(obj: V, **changes: Any) -> V:
    """``dataclasses.replace`` for the snapshot's frozen dataclasses (plain fields, no
    ``__post_init__``) without running ``__init__`` again: this runs once per engine per
    decision, and ``replace`` was most of its cost."""
    new = object.__new__(type(obj))
    fields = new.__dict__
    fields.update(obj.__dict__)
    fields.update(changes)
    return new


class Ledger:
    """Every engine's counts; one version number for all of them."""

    def __init__(self, engines: Iterable[EngineBook]) -> None:
        self.engines: dict[str, EngineBook] = {book.name: book for book in engines}
        #: Bumped on every change of a count: a held request may be asked again.
        self.version = 0
        self._seen: tuple[Snapshot | None, dict[str, EngineView]] = (None, {})

    def reserve(self, ticket: Ticket, name: str, now: float) -> None:
        """Count ``ticket`` against engine ``name`` until released (once per engine)."""
        if name in ticket.holds:
            return
        book = self.engines[name]
        book.tick(now)
        n = ticket.features.n
        ticket.shares[name] = ticket.shares.get(name, 0.0) - n * book.share
        ticket.holds.add(name)
        ticket.unstarted.add(name)
        book.inflight += n
        book.scheduled += n
        book.decode_tokens += n * ticket.features.max_tokens
        book.prompt_tokens += ticket.features.prompt_tokens
        if ticket.tpot_target is not None:
            book.tpot_targets[ticket.tpot_target] += 1
        self.version += 1

    def start(self, ticket: Ticket, name: str, now: float) -> None:
        """Engine ``name`` started answering ``ticket``: it is no longer merely scheduled."""
        if name not in ticket.unstarted:
            return
        book = self.engines[name]
        ticket.unstarted.discard(name)
        book.scheduled -= ticket.features.n
        book.prompt_tokens -= ticket.features.prompt_tokens
        book.answers[ticket] = (now, ticket.features.max_tokens)
        self.version += 1

    def release(self, ticket: Ticket, name: str, now: float) -> bool:
        """Stop counting ``ticket`` against engine ``name``; False when it was not counted."""
        if name not in ticket.holds:
            return False
        book = self.engines[name]
        book.tick(now)
        n = ticket.features.n
        ticket.shares[name] += n * book.share
        if name in ticket.unstarted:
            ticket.unstarted.discard(name)
            book.scheduled -= n
            book.prompt_tokens -= ticket.features.prompt_tokens
        ticket.holds.discard(name)
        book.inflight -= n
        book.decode_tokens -= n * ticket.features.max_tokens
        book.answers.pop(ticket, None)
        tpot = ticket.tpot_target
        if tpot is not None:
            book.tpot_targets[tpot] -= 1
            if book.tpot_targets[tpot] <= 0:
                del book.tpot_targets[tpot]
        self.version += 1
        return True

    def hold(self, name: str, now: float) -> None:
        """Count a pass-through request (no placement, no tokens) against engine ``name``."""
        book = self.engines[name]
        book.tick(now)
        book.inflight += 1
        self.version += 1

    def unhold(self, name: str, now: float) -> None:
        """A pass-through request on engine ``name`` is over."""
        book = self.engines[name]
        book.tick(now)
        book.inflight -= 1
        self.version += 1

    def inflight(self) -> dict[str, int]:
        """Requests in flight per engine."""
        return {name: book.inflight for name, book in self.engines.items()}

    def merge(self, observed: Snapshot, flags: Flags, now: float) -> Snapshot:
        """The observed snapshot with engine flags and these counts filled in, one view per engine."""
        if self._seen[0] is not observed:
            self._seen = (observed, {e.name: e for e in observed.engines})
        seen = self._seen[1]
        views = []
        for name, book in self.engines.items():
            view = seen.get(name) or EngineView(name, book.device, book.url, book.dialect)
            enabled, draining = flags(name)
            views.append(evolve(view, enabled=enabled, draining=draining, inflight=book.inflight,
                                scheduled=book.scheduled, inflight_decode_tokens=book.decode_tokens,
                                scheduled_prompt_tokens=book.prompt_tokens,
                                answers=tuple([(now - at, most) for at, most in book.answers.values()])
                                if book.answers else (),
                                tightest_tpot=min(book.tpot_targets) if book.tpot_targets else None))
        return evolve(observed, engines=tuple(views))
