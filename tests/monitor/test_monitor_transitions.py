"""Monitor rounds against engines behind httpx.MockTransport: states, rates, slots, listeners.

The same transitions against real simulator processes are in test_monitor_sim.py. A round
waits for its scrapes up to ``monitor.interval``: rounds a test runs by hand wait up to a
minute, so an answer is never a miss because the machine was slow to deliver it; rounds
meant to miss a hanging engine are short.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from syshaxd.config import EngineSpec
from syshaxd.config import Monitor as MonitorSettings
from syshaxd.monitor.monitor import Monitor
from syshaxd.snapshot import EngineState, Snapshot

SETTINGS = MonitorSettings(interval=60.0, scrape_timeout=30.0, stale_after=2, down_after=4, startup_check=False)
#: Rounds that do not wait for a hanging engine, whose scrape is never timed out in a test.
SHORT = SETTINGS.model_copy(update={"interval": 0.05, "scrape_timeout": 600.0})
HANG = 3600.0  # how long a hanging fake takes to answer (the monitor's stop cancels it)


def vllm_text(running: int = 2, generated: float = 0.0) -> str:
    return (
        f"vllm:num_requests_running{{engine=\"0\"}} {running}\n"
        "vllm:num_requests_waiting{engine=\"0\"} 1\n"
        "vllm:kv_cache_usage_perc{engine=\"0\"} 0.25\n"
        f"vllm:generation_tokens_total{{engine=\"0\"}} {generated}\n"
    )


class Fake:
    """Per-engine behaviour: ok, garbage, error, hang, refuse."""

    def __init__(self) -> None:
        self.mode: dict[str, str] = {}
        self.generated: dict[str, float] = {}
        self.calls: list[str] = []

    async def handler(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host
        self.calls.append(f"{host}{request.url.path}")
        mode = self.mode.get(host, "ok")
        if mode == "refuse":
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        if mode == "hang":
            await asyncio.sleep(HANG)
        if mode == "garbage":
            return httpx.Response(200, text="<html>oops</html>")
        if mode == "error":
            return httpx.Response(503, text="busy")
        if request.url.path == "/slots":
            if mode == "no-slots":
                return httpx.Response(501, json={"error": "slots disabled"})
            # a busy slot's n_prompt_tokens holds its prompt and what it decoded (30 + 10)
            return httpx.Response(200, json=[{"id": 0, "n_ctx": 100, "is_processing": True, "n_prompt_tokens": 40,
                                              "next_token": [{"n_decoded": 10}]}])
        if request.url.path in ("/v1/models", "/health"):
            return httpx.Response(200, json={"data": []})
        if host.startswith("llama"):
            return httpx.Response(200, text="llamacpp:requests_processing 1\nllamacpp:tokens_predicted_total 5\n")
        if host.startswith("wrong"):
            return httpx.Response(200, text="sglang:num_running_reqs 3\n")
        return httpx.Response(200, text=vllm_text(generated=self.generated.get(host, 0.0)))


@pytest.fixture
def fake() -> Fake:
    return Fake()


def spec(name: str, dialect: str = "vllm-v1", device: str = "gpu") -> EngineSpec:
    return EngineSpec(name, device, f"http://{name}:8000", dialect, "recompute")  # type: ignore[arg-type]


Make = Callable[..., Monitor]


@pytest.fixture
async def make(fake: Fake) -> AsyncIterator[Make]:
    """Build monitors on the fake transport; every one is stopped and its client closed."""
    built: list[tuple[Monitor, httpx.AsyncClient]] = []

    def build(*specs: EngineSpec, settings: MonitorSettings = SETTINGS) -> Monitor:
        client = httpx.AsyncClient(transport=httpx.MockTransport(fake.handler))
        monitor = Monitor(list(specs), settings, client=client, sample_host=False)
        built.append((monitor, client))
        return monitor

    yield build
    for monitor, client in built:
        await monitor.stop()
        await client.aclose()


def state(s: Snapshot, name: str) -> EngineState:
    view = s.engine(name)
    assert view is not None
    return view.state


async def test_unknown_before_the_first_round_then_up_with_numbers(make: Make, fake: Fake) -> None:
    m = make(spec("gpu0"))
    assert state(m.snapshot(), "gpu0") is EngineState.UNKNOWN
    s = await m.poll_once()
    view = s.engine("gpu0")
    assert view is not None and view.state is EngineState.UP
    assert (view.metrics.running, view.metrics.waiting, view.metrics.kv_cache_usage) == (2, 1, 0.25)
    assert view.scraped_at is not None and view.last_error is None
    assert m.snapshot() is s


async def test_missed_scrapes_go_stale_then_down_then_recover(make: Make, fake: Fake) -> None:
    m = make(spec("gpu0"))
    await m.poll_once()
    fake.mode["gpu0"] = "garbage"
    seen = [state(await m.poll_once(), "gpu0") for _ in range(4)]
    assert seen == [EngineState.UP, EngineState.STALE, EngineState.STALE, EngineState.DOWN]
    view = m.snapshot().engine("gpu0")
    assert view is not None and "unreadable answer" in (view.last_error or "")
    assert view.metrics.running == 2  # the last good numbers are kept, marked by the state
    fake.mode["gpu0"] = "ok"
    assert state(await m.poll_once(), "gpu0") is EngineState.UP


async def test_an_engine_still_answering_requests_stays_stale_not_down(make: Make, fake: Fake) -> None:
    m = make(spec("gpu0"))
    answered: dict[str, float | None] = {"gpu0": time.monotonic()}
    m.answered_at = answered.get
    await m.poll_once()
    fake.mode["gpu0"] = "garbage"  # /metrics is useless, but answers keep streaming
    seen = []
    for _ in range(6):
        answered["gpu0"] = time.monotonic()
        seen.append(state(await m.poll_once(), "gpu0"))
    assert seen == [EngineState.UP, EngineState.STALE, *[EngineState.STALE] * 4]
    view = m.snapshot().engine("gpu0")
    assert view is not None and "still answering requests" in (view.last_error or "")
    # Answers stop (the last one longer ago than the span a DOWN verdict covers): down.
    span = SETTINGS.down_after * SETTINGS.interval + SETTINGS.scrape_timeout
    answered["gpu0"] = time.monotonic() - span - 1
    assert state(await m.poll_once(), "gpu0") is EngineState.DOWN
    # A refused connection is down at once, whatever was answered a moment ago.
    fake.mode["gpu0"] = "ok"
    await m.poll_once()
    answered["gpu0"] = time.monotonic()
    fake.mode["gpu0"] = "refuse"
    assert state(await m.poll_once(), "gpu0") is EngineState.DOWN


async def test_http_error_status_is_a_miss(make: Make, fake: Fake) -> None:
    m = make(spec("gpu0"))
    fake.mode["gpu0"] = "error"
    for _ in range(2):
        s = await m.poll_once()
    view = s.engine("gpu0")
    assert view is not None and view.state is EngineState.STALE and "HTTP 503" in (view.last_error or "")


async def test_refused_connection_is_down_at_once(make: Make, fake: Fake) -> None:
    m = make(spec("gpu0"))
    await m.poll_once()
    fake.mode["gpu0"] = "refuse"
    s = await m.poll_once()
    view = s.engine("gpu0")
    assert view is not None and view.state is EngineState.DOWN
    assert "cannot connect" in (view.last_error or "")


async def test_a_hanging_engine_does_not_hold_up_the_others(make: Make, fake: Fake) -> None:
    # Short rounds, and a hang that outlasts the test: every round is one the hanging engine did
    # not hold up. A slow machine may make the other engine's answer a round late, not absent.
    m = make(spec("gpu0"), spec("cpu0", device="cpu"), settings=SHORT)
    fake.mode["gpu0"] = "hang"
    s = await m.poll_once()
    assert state(s, "gpu0") is EngineState.UNKNOWN  # one miss: not yet stale
    scraped: set[float] = set()
    for _ in range(200):
        s = await m.poll_once()
        cpu = s.engine("cpu0")
        assert cpu is not None
        if cpu.scraped_at is not None:
            scraped.add(cpu.scraped_at)
        if len(scraped) >= 3:
            break
    assert len(scraped) >= 3 and state(s, "cpu0") is EngineState.UP
    gpu = s.engine("gpu0")
    assert gpu is not None and state(s, "gpu0") is EngineState.DOWN
    assert gpu.last_error == "no answer to /metrics yet after 0.05s"
    assert fake.calls.count("gpu0/metrics") == 1  # the one scrape, still out


async def test_a_scrape_still_running_is_not_started_twice(make: Make, fake: Fake) -> None:
    m = make(spec("gpu0"), settings=SHORT)
    fake.mode["gpu0"] = "hang"
    for _ in range(3):
        await m.poll_once()
    assert fake.calls.count("gpu0/metrics") == 1
    assert state(m.snapshot(), "gpu0") is EngineState.STALE


async def test_rates_from_counter_deltas_across_rounds(make: Make, fake: Fake) -> None:
    m = make(spec("gpu0"))
    await m.poll_once()
    fake.generated["gpu0"] = 1_000_000.0
    await asyncio.sleep(0.02)
    s = await m.poll_once()
    view = s.engine("gpu0")
    assert view is not None and view.metrics.decode_tps is not None and view.metrics.decode_tps > 1000


async def test_llamacpp_kv_usage_comes_from_slots(make: Make, fake: Fake) -> None:
    m = make(spec("llama0", "llamacpp", "cpu"))
    view = (await m.poll_once()).engine("llama0")
    assert view is not None and view.metrics.kv_cache_usage == pytest.approx(0.4)
    assert view.metrics.running == 1
    fake.mode["llama0"] = "no-slots"
    view = (await m.poll_once()).engine("llama0")
    assert view is not None and view.state is EngineState.UP
    assert view.metrics.kv_cache_usage is None and "HTTP 501" in (view.last_error or "")


async def test_openai_dialect_is_probed_for_health_only(make: Make, fake: Fake) -> None:
    m = make(spec("plain0", "openai"))
    view = (await m.poll_once()).engine("plain0")
    assert view is not None and view.state is EngineState.UP
    assert "plain0/v1/models" in fake.calls and "plain0/metrics" not in fake.calls


async def test_wrong_dialect_is_up_with_a_warning(make: Make, fake: Fake) -> None:
    m = make(spec("wrong0", "vllm-v1"))
    view = (await m.poll_once()).engine("wrong0")
    assert view is not None and view.state is EngineState.UP
    assert "no vllm-v1 numbers" in (view.last_error or "")


async def test_background_loop_notifies_listeners_until_removed(
    make: Make, fake: Fake, caplog: pytest.LogCaptureFixture
) -> None:
    m = make(spec("gpu0"))

    def broken(snapshot: Snapshot) -> None:
        raise ZeroDivisionError("listener bug")

    m.add_listener(broken)  # a broken listener must not stop the ones after it
    got: list[Snapshot] = []
    remove = m.add_listener(got.append)
    rounds: asyncio.Queue[Snapshot] = asyncio.Queue()
    m.add_listener(rounds.put_nowait)
    m.set_interval(0.05)
    await m.start()
    first = await asyncio.wait_for(rounds.get(), 60)
    second = await asyncio.wait_for(rounds.get(), 60)
    assert second.taken_at > first.taken_at
    for _ in range(100):  # a busy machine may answer a round or two late
        if state(second, "gpu0") is EngineState.UP:
            break
        second = await asyncio.wait_for(rounds.get(), 60)
    assert state(second, "gpu0") is EngineState.UP
    remove()
    count = len(got)
    while not rounds.empty():  # rounds published before remove()
        rounds.get_nowait()
    await asyncio.wait_for(rounds.get(), 60)
    assert len(got) == count and count >= 2
    assert "monitor listener failed" in caplog.text
    await m.stop()
    assert m._loop_task is None


async def test_interval_can_change_at_run_time(make: Make, fake: Fake) -> None:
    m = make(spec("gpu0"))
    m.set_interval(0.2)
    assert m.settings.interval == 0.2 and m.settings.stale_after == SETTINGS.stale_after


async def test_owned_fetcher_is_created_and_closed() -> None:
    m = Monitor([spec("gpu0")], SETTINGS, sample_host=False)
    with pytest.raises(RuntimeError, match="start"):
        await m.poll_once()
    await m.start()
    assert m._fetcher is not None
    await m.stop()
    assert m._fetcher is None
