"""Which prefill -> decode llama-server pairs may hand off slots: checked at start, again when unsure.

A slot file restored into a server with another model or KV layout fails with a vague
message, or worse, restores "fine" into a model with the same shape and different
weights and decodes garbage. So no split runs between two servers until
:func:`~syshaxd.conductor.handoff.llamacpp_slots.check_pair` said they match. The verdict is kept;
a server that did not answer is asked again before the next split (at most every
``retry_after`` seconds), and a failed handoff step forgets the verdict (a server may have
been restarted with another model).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import httpx

from syshaxd.conductor.handoff.llamacpp_slots import HandoffError, PairMismatch, check_pair

log = logging.getLogger("syshaxd.handoff")


class Engine(Protocol):
    """What a check needs of an engine: its name and a client with its base URL."""

    @property
    def name(self) -> str:
        """The engine's name."""
        ...

    @property
    def http(self) -> httpx.AsyncClient:
        """A client whose base_url is the engine."""
        ...


@dataclass(frozen=True)
class PairVerdict:
    """Whether slots may move from ``prefill`` to ``decode``, and why (or why not)."""

    prefill: str
    decode: str
    #: None: not known, a server did not answer (yet).
    ok: bool | None
    message: str


def _unanswered(exc: HandoffError) -> bool:
    """A transport failure or a 5xx (e.g. 503 while the model loads): ask again later."""
    return isinstance(exc.__cause__, httpx.HTTPError) or (exc.status is not None and exc.status >= 500)


class PairChecks:
    """Verdicts per (prefill, decode) pair, each found by one check at a time."""

    def __init__(self, *, timeout: float = 20.0, retry_after: float = 5.0, probe: bool = True) -> None:
        """Checks are bounded by ``timeout`` s; unknown verdicts are retried after ``retry_after`` s."""
        self.timeout = timeout
        self.retry_after = retry_after
        self.probe = probe
        self._verdicts: dict[tuple[str, str], tuple[PairVerdict, float]] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    def known(self, prefill: str, decode: str) -> PairVerdict | None:
        """The last verdict for a pair, if any (no I/O)."""
        entry = self._verdicts.get((prefill, decode))
        return entry[0] if entry else None

    def _fresh(self, key: tuple[str, str]) -> PairVerdict | None:
        entry = self._verdicts.get(key)
        if entry is None:
            return None
        verdict, at = entry
        if verdict.ok is None and time.monotonic() - at >= self.retry_after:
            return None
        return verdict

    async def verdict(self, prefill: Engine, decode: Engine) -> PairVerdict:
        """The pair's verdict, checking first when there is none (or only an old "unknown")."""
        key = (prefill.name, decode.name)
        verdict = self._fresh(key)
        if verdict is not None:
            return verdict
        async with self._locks.setdefault(key, asyncio.Lock()):
            verdict = self._fresh(key)  # another request may have checked while this one waited
            if verdict is None:
                verdict = await self._check(prefill, decode)
                self._store(key, verdict)
            return verdict

    def forget(self, prefill: str, decode: str) -> None:
        """Drop a pair's verdict: the next split checks again."""
        self._verdicts.pop((prefill, decode), None)

    async def check_all(self, pairs: Iterable[tuple[Engine, Engine]]) -> list[PairVerdict]:
        """Check pairs concurrently (the daemon does this at start); never raises."""
        return list(await asyncio.gather(*(self.verdict(a, b) for a, b in pairs)))

    async def _check(self, prefill: Engine, decode: Engine) -> PairVerdict:
        names = (prefill.name, decode.name)
        try:
            a, _ = await asyncio.wait_for(check_pair(prefill.http, decode.http, probe=self.probe), self.timeout)
        except PairMismatch as exc:
            return PairVerdict(*names, False, f"{exc}".removeprefix("pair: "))
        except HandoffError as exc:
            return PairVerdict(*names, None if _unanswered(exc) else False, str(exc))
        except asyncio.TimeoutError:
            return PairVerdict(*names, None, f"the check took longer than {self.timeout:g} s")
        except (httpx.HTTPError, ValueError) as exc:  # a probe answer that is not JSON, a reset
            return PairVerdict(*names, None, f"{type(exc).__name__}: {exc}")
        return PairVerdict(*names, True, f"same model ({a.model_ftype}, {a.n_params} parameters), "
                                         f"{a.total_slots} slots of {a.slot_n_ctx} tokens, build {a.build_info}")

    def _store(self, key: tuple[str, str], verdict: PairVerdict) -> None:
        previous = self.known(*key)
        self._verdicts[key] = (verdict, time.monotonic())
        if previous is not None and (previous.ok, previous.message) == (verdict.ok, verdict.message):
            return
        pair = f"llamacpp-slots {verdict.prefill} -> {verdict.decode}"
        if verdict.ok:
            log.info("%s can hand off KV caches: %s", pair, verdict.message)
        elif verdict.ok is False:
            log.warning("%s cannot hand off KV caches, so requests split between them run whole on %s "
                        "instead: %s", pair, verdict.decode, verdict.message)
        else:
            log.warning("%s not checked yet (%s); splits between them run whole on %s until a check "
                        "succeeds (tried again before a split, at most every %g s)",
                        pair, verdict.message, verdict.decode, self.retry_after)
