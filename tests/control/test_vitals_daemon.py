"""A real syshaxd reports its own event-loop lag and memory, and trims memory once idle."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.plugins.daemon import RunningDaemon


def samples(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


def test_daemon_reports_loop_lag_memory_and_trims_after_a_busy_spell(
    start_daemon: Callable[..., RunningDaemon],
) -> None:
    daemon = start_daemon()
    before = samples(daemon.url)
    assert before["process_resident_memory_bytes"] > 10 * 2**20
    assert before["process_open_fds"] > 3
    assert before["syshax_memory_trims_total"] == 0  # nothing served, nothing to hand back

    body = {"model": "ds-32b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    assert httpx.post(f"{daemon.url}/v1/chat/completions", json=body, timeout=60).status_code == 200

    # Idle for 5 s after the request: the daemon trims once (checked every second).
    deadline = time.monotonic() + 30
    while samples(daemon.url)["syshax_memory_trims_total"] < 1:
        assert time.monotonic() < deadline, "no memory trim after 30 s idle"
        time.sleep(0.5)
    after = samples(daemon.url)
    assert after["syshax_event_loop_lag_seconds_count"] > before["syshax_event_loop_lag_seconds_count"]

    conductor = daemon.state().conductor
    assert conductor.loop_lag_p99 is not None and conductor.loop_lag_max is not None
    assert 0 <= conductor.loop_lag_p99 <= conductor.loop_lag_max
    time.sleep(2)
    assert samples(daemon.url)["syshax_memory_trims_total"] == 1  # once per busy spell, not every second
