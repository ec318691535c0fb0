"""A real syshaxd reports its own event-loop lag and memory, and trims memory once idle."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.plugins.daemon import RunningDaemon
from tests.plugins.ports import wait_until


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

    # Idle for 5 s after the request: the daemon trims once (checked every 2 s).
    assert wait_until(lambda: samples(daemon.url)["syshax_memory_trims_total"] >= 1), "no memory trim when idle"
    after = samples(daemon.url)
    assert after["syshax_event_loop_lag_seconds_count"] > before["syshax_event_loop_lag_seconds_count"]

    conductor = daemon.state().conductor
    assert conductor.loop_lag_p99 is not None and conductor.loop_lag_max is not None
    assert 0 <= conductor.loop_lag_p99 <= conductor.loop_lag_max
    # Once per busy spell, not at every check: two more idle checks go by without a trim. The
    # loop-lag probe's timer (every 0.5 s) and the trim check's (every 2 s) run on the same loop,
    # which fires timers in deadline order: nine more probes mean at least 4 s of its time.
    probes = after["syshax_event_loop_lag_seconds_count"]
    assert wait_until(lambda: samples(daemon.url)["syshax_event_loop_lag_seconds_count"] >= probes + 9)
    assert samples(daemon.url)["syshax_memory_trims_total"] == 1
