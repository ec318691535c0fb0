"""EventBus: fan-out, bounded queues that drop the oldest and count, and shutdown."""

from __future__ import annotations

import asyncio
import json

import pytest

from syshaxd.control.bus import EventBus
from syshaxd.schema import ConfigChangeModel


async def test_every_subscriber_gets_each_event_in_order() -> None:
    bus = EventBus()
    a, b = bus.subscribe(), bus.subscribe()
    bus.publish("config", ConfigChangeModel(changed={"decider.max_num_seqs": 4}))
    bus.publish("decision", {"request_id": "r1"})
    for sub in (a, b):
        first = await anext(sub)
        second = await anext(sub)
        assert (first.name, second.name) == ("config", "decision")
        assert json.loads(first.data)["changed"] == {"decider.max_num_seqs": 4}
        assert second.seq > first.seq
    assert "event: decision\n" in second.sse() and second.sse().endswith("\n\n")


async def test_a_slow_reader_loses_the_oldest_and_is_told() -> None:
    bus = EventBus()
    slow = bus.subscribe(maxsize=3)
    fast = bus.subscribe(maxsize=100)
    for i in range(10):
        bus.publish("state", {"i": i})
    assert slow.dropped == 7
    assert fast.dropped == 0
    assert bus.dropped_total == 7
    notice = await anext(slow)
    assert notice.name == "dropped"
    assert json.loads(notice.data) == {"count": 7, "total": 7}
    kept = [json.loads((await anext(slow)).data)["i"] for _ in range(3)]
    assert kept == [7, 8, 9]


async def test_publish_never_waits_for_readers() -> None:
    bus = EventBus()
    bus.subscribe(maxsize=1)
    for i in range(1000):  # would block or raise if the publisher waited on a full queue
        bus.publish("state", {"i": i})
    assert bus.dropped_total == 999


async def test_close_ends_every_stream_even_with_full_queues() -> None:
    bus = EventBus()
    sub = bus.subscribe(maxsize=1)
    bus.publish("state", {})

    async def drain() -> int:
        return len([e async for e in sub])

    reader = asyncio.create_task(drain())
    await asyncio.sleep(0)
    bus.close()
    assert await asyncio.wait_for(reader, 60) <= 1
    late = bus.subscribe()
    assert [e async for e in late] == []
    assert bus.subscriber_count == 0


async def test_closing_a_subscription_leaves_the_bus() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    assert bus.subscriber_count == 1
    sub.close()
    assert bus.subscriber_count == 0
    bus.publish("state", {})
    with pytest.raises(StopAsyncIteration):
        await anext(sub)
