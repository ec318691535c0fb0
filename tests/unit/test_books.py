"""The conductor's books as the policy sees them: each answer an engine has started, with its age."""

from __future__ import annotations

import asyncio
import time

from syshaxd.conductor.books import Books
from syshaxd.conductor.flight import BookedFlight
from syshaxd.conductor.stats import Stats
from syshaxd.config.model import EngineSpec
from syshaxd.engines.client import EngineClient
from syshaxd.request import ParsedRequest
from syshaxd.routing import Decision, RequestFeatures
from syshaxd.snapshot import Snapshot

SPEC = EngineSpec("gpu0", "gpu", "http://127.0.0.1:9", "vllm-v1", "syshax")


class NoRouter:
    """A flight here never asks to be routed again."""

    def reask(self, features: RequestFeatures) -> Decision:
        raise AssertionError("not asked in this test")

    def other_engine(self, failed: EngineClient) -> EngineClient | None:
        return None


def _flight(books: Books, rid: str, max_tokens: int) -> BookedFlight:
    parsed = ParsedRequest("chat", {}, b"{}", "m", True, False, max_tokens, 100, False)
    features = RequestFeatures(prompt_tokens=100, max_tokens=max_tokens, request_id=rid)
    return BookedFlight(rid, parsed, features, deadline=time.monotonic() + 60, books=books, router=NoRouter())


def _answers(books: Books) -> tuple[tuple[float, int], ...]:
    return books.merge(Snapshot(taken_at=0.0), lambda name: (True, False)).engines[0].answers


def test_an_answer_is_seen_from_its_first_byte_until_its_engine_is_released() -> None:
    async def scenario() -> None:
        books = Books([SPEC], Stats())
        engine = EngineClient(SPEC)
        try:
            first, second = _flight(books, "a", 400), _flight(books, "b", 50)
            first.reserve(engine)
            second.reserve(engine)
            assert _answers(books) == ()  # routed, not started: their prompts count, not their growth
            before = time.monotonic()
            first.first_byte(engine)
            after = time.monotonic()
            await asyncio.sleep(0.05)
            start = time.monotonic()
            (age, most), = _answers(books)
            end = time.monotonic()
            # The age is the time since the first byte, bracketed by the test's own readings.
            assert most == 400 and start - after <= age <= end - before
            second.first_byte(engine)
            assert sorted(most for _, most in _answers(books)) == [50, 400]
            first.release(engine)
            second.release(engine)
            second.release(engine)  # released once: the second call changes nothing
            assert _answers(books) == ()
        finally:
            await engine.aclose()

    asyncio.run(scenario())
