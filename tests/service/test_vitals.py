"""The daemon's loop-lag probe and idle memory trim, driven directly."""

from __future__ import annotations

import asyncio
import platform
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from syshaxd.service.vitals import IdleTrim, LoopLag, Vitals, trim_memory


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_loop_lag_window_keeps_the_last_minute_and_reports_p99_and_max() -> None:
    clock = FakeClock()
    lag = LoopLag(CollectorRegistry(), window_s=60.0, clock=clock)
    assert lag.quantiles() == (None, None)
    lag.record(2.0)  # an old stall
    clock.now += 61
    for i in range(100):
        lag.record(0.001 * i)
    p99, worst = lag.quantiles()
    assert worst == pytest.approx(0.099)
    assert p99 == pytest.approx(0.099)  # the old 2 s stall has left the window
    lag.record(-0.5)  # a timer cannot fire early: clamped, not negative
    assert min(v for _, v in lag._recent) == 0.0


def test_loop_lag_histogram_is_exposed() -> None:
    registry = CollectorRegistry()
    lag = LoopLag(registry)
    lag.record(0.3)
    text = generate_latest(registry).decode()
    assert 'syshax_event_loop_lag_seconds_bucket{le="0.25"} 0.0' in text
    assert 'syshax_event_loop_lag_seconds_bucket{le="0.5"} 1.0' in text


def test_loop_lag_sees_a_blocked_loop() -> None:
    async def scenario() -> tuple[float | None, float | None]:
        lag = LoopLag(CollectorRegistry(), interval=0.02)
        task = asyncio.create_task(lag.run())
        await asyncio.sleep(0.1)
        time.sleep(0.3)  # noqa: ASYNC251 - a handler that blocks the loop, on purpose
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return lag.quantiles()

    _, worst = asyncio.run(scenario())
    assert worst is not None and worst >= 0.25  # at least the time the loop was held


def test_idle_trim_runs_once_after_each_busy_spell() -> None:
    clock = FakeClock()
    busy = [False]
    registry = CollectorRegistry()
    served = [0]
    trim = IdleTrim(registry, lambda: busy[0], lambda: served[0], idle_s=5.0, clock=clock)
    assert not trim.tick()  # never served anything: nothing to hand back
    busy[0] = True
    assert not trim.tick()
    busy[0] = False
    assert not trim.tick()  # idle from now
    clock.now += 4.9
    assert not trim.tick()
    clock.now += 0.2
    assert trim.tick()
    clock.now += 30
    assert not trim.tick()  # once per spell
    busy[0] = True
    trim.tick()
    busy[0] = False
    trim.tick()
    clock.now += 2
    busy[0] = True  # busy again before the idle time: the clock restarts
    trim.tick()
    busy[0] = False
    trim.tick()
    clock.now += 4
    assert not trim.tick()
    clock.now += 1.5
    assert trim.tick()
    served[0] += 1  # a request that came and went between two checks still counts
    assert not trim.tick()
    clock.now += 5.1
    assert trim.tick()
    assert "syshax_memory_trims_total 3.0" in generate_latest(registry).decode()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_memory_returns_freed_heap_to_the_os() -> None:
    import psutil

    process = psutil.Process()
    trim_memory()
    before = process.memory_info().rss
    # Buffers of a few KB come from glibc's heap; one kept in every 64 pins the heap's top,
    # so free() alone cannot shrink it (what a burst of connections leaves behind).
    junk = [bytes(4000 + i % 7) for i in range(40_000)]
    keep = junk[::64]
    grown = process.memory_info().rss
    del junk
    assert trim_memory()
    after = process.memory_info().rss
    assert len(keep) == 625
    assert grown - before > 100 * 2**20
    assert after - before < (grown - before) / 4


def test_vitals_start_and_stop_cleanly() -> None:
    async def scenario() -> str:
        registry = CollectorRegistry()
        vitals = Vitals(registry, busy=lambda: False, served=lambda: 0)
        vitals.start()
        await asyncio.sleep(0.25)
        await vitals.stop()
        assert all(t.done() for t in asyncio.all_tasks() if t is not asyncio.current_task())
        return generate_latest(registry).decode()

    text = asyncio.run(scenario())
    assert "process_resident_memory_bytes" in text
    assert "process_open_fds" in text
    assert "syshax_event_loop_lag_seconds_count" in text
