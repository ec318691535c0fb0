"""The idle recycle's parts: when it is due, what is handed over, and how a bad handover is met."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from syshaxd.config import load_config
from syshaxd.recycle import HANDOVER_ENV, Handover, IdleRecycle, config_data, take_handover
from syshaxd.schema import DecisionModel, RecycleModel
from syshaxd.stats import Stats

MB = 2**20


class World:
    """A fake daemon for :class:`IdleRecycle`: busy flag, served count, RSS, clock."""

    def __init__(self) -> None:
        self.busy = False
        self.served = 0
        self.rss = 100 * MB
        self.now = 0.0

    def watch(self, idle_s: float = 30.0, ratio: float = 1.25) -> IdleRecycle:
        return IdleRecycle(busy=lambda: self.busy, served=lambda: self.served, rss=lambda: self.rss,
                           rss_start=60 * MB, idle_s=idle_s, ratio=ratio, clock=lambda: self.now)

    def run(self, watch: IdleRecycle, seconds: float) -> list[float]:
        """Tick once a second; the times at which a recycle was due."""
        due = []
        for _ in range(int(seconds)):
            self.now += 1
            if watch.tick():
                due.append(self.now)
        return due


def test_a_fresh_daemon_that_served_nothing_never_recycles() -> None:
    world = World()
    assert world.run(world.watch(), 120) == []


def test_due_once_after_the_idle_time_following_a_busy_spell() -> None:
    world = World()
    watch = world.watch(idle_s=30)
    world.busy = True
    world.run(watch, 10)
    world.busy = False
    world.served = 500
    due = world.run(watch, 100)
    assert due == [41.0]  # idle seen at t=11, due 30 s later, and only once


def test_requests_shorter_than_a_poll_count_as_traffic() -> None:
    world = World()
    watch = world.watch(idle_s=5)
    world.served = 1  # never seen busy, but a request came and went
    assert world.run(watch, 20) == [6.0]


def test_new_traffic_restarts_the_idle_clock() -> None:
    world = World()
    watch = world.watch(idle_s=10)
    world.served = 1
    world.run(watch, 8)
    world.served = 2  # another request before the 10 s passed
    assert world.run(watch, 30) == [19.0]


def test_no_recycle_below_the_ratio_and_the_spell_is_not_looked_at_again() -> None:
    world = World()
    world.rss = 70 * MB  # 1.17 x the 60 MB start
    watch = world.watch(idle_s=5, ratio=1.25)
    world.served = 1
    assert world.run(watch, 20) == []
    world.rss = 90 * MB  # grows while idle (nothing served): still no recycle
    assert world.run(watch, 20) == []
    world.served = 2  # the next spell is judged on its own
    assert world.run(watch, 10) == [46.0]


def decision(i: int) -> DecisionModel:
    return DecisionModel(request_id=f"r{i}", time=1000.0 + i, policy="classic", device="gpu", mode="whole",
                         engine="gpu0", reason="gpu free", est_ttft=0.1)


def test_stats_carry_counters_decisions_windows_and_prometheus_counters() -> None:
    old = Stats()
    for i in range(250):
        d = decision(i)
        old.record_decision(d)
        old.record_finish(d, "ok" if i % 10 else "error", ttft=0.1 + i / 1000, e2e=1.0, now=10_000.0 + i)
    old.resubmits_total = 3
    old.m_resubmits.inc(3)
    data = json.loads(json.dumps(old.export(now=10_250.0)))  # what crosses the exec

    new = Stats()
    new.restore(data)
    assert new.requests_total == old.requests_total == 250
    assert new.by_outcome == old.by_outcome and new.by_route == old.by_route and new.by_reason == old.by_reason
    assert (new.accurate, new.estimated, new.resubmits_total) == (old.accurate, old.estimated, 3)
    assert list(new.decisions) == list(old.decisions) and len(new.decisions) == 200
    # Only the windows' live part (the last 60 s) crosses over.
    assert list(new.ttfts) == [x for x in old.ttfts if x[0] >= 10_190.0]
    assert new.ttft_quantiles(now=10_250.0) == old.ttft_quantiles(now=10_250.0)
    text = generate_latest(new.registry).decode()
    assert 'syshax_requests_total{device="gpu",mode="whole",outcome="ok"} 225.0' in text
    assert 'syshax_requests_total{device="gpu",mode="whole",outcome="error"} 25.0' in text
    assert "syshax_resubmits_total 3.0" in text
    assert 'syshax_decisions_total{device="gpu",mode="whole",policy="classic",reason="gpu free"} 250.0' in text


def handover(tmp_path: Path) -> Handover:
    path = tmp_path / "config.yaml"
    path.write_text("services:\n  conductor:\n    api_key: s3cret-key\n  gpu:\n    port: 9001\n")
    loaded = load_config(path)
    return Handover(config=config_data(loaded.config), config_path=str(path), sources=loaded.sources,
                    started_monotonic=5.0, rss_start=60 * MB, recycles=1,
                    recent_recycles=[RecycleModel(at=1.0, rss_before=90 * MB)], began_monotonic=100.0)


def test_handover_round_trips_the_running_config_with_its_secret(tmp_path: Path) -> None:
    sent = handover(tmp_path)
    again = Handover.model_validate_json(sent.model_dump_json())
    loaded = again.loaded_config()
    original = load_config(tmp_path / "config.yaml")
    assert loaded.config == original.config
    assert loaded.config.services.conductor.api_key is not None
    assert loaded.config.services.conductor.api_key.get_secret_value() == "s3cret-key"
    assert loaded.sources == original.sources and loaded.path == tmp_path / "config.yaml"


def memfd_with(data: bytes) -> int:
    fd = os.memfd_create("test-handover", 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_take_handover_reads_and_closes_the_memfd_and_clears_the_variable(tmp_path: Path) -> None:
    sent = handover(tmp_path)
    fd = memfd_with(sent.model_dump_json().encode())
    env = {HANDOVER_ENV: str(fd)}
    got = take_handover(env)
    assert got == sent
    assert env == {} and not fd_open(fd)
    assert take_handover(env) is None  # nothing handed over: a cold start


@pytest.mark.parametrize(("payload", "message"), [
    (b"{not json", "cannot read the handover"),
    (b'{"format": 99}', "another format"),
    (b"[1, 2]", "another format"),
    (b'{"format": 1, "config": {}}', "invalid handover"),
])
def test_a_bad_handover_is_logged_and_ignored(payload: bytes, message: str, caplog: pytest.LogCaptureFixture) -> None:
    fd = memfd_with(payload)
    env = {HANDOVER_ENV: str(fd)}
    assert take_handover(env) is None
    assert message in caplog.text
    assert env == {} and not fd_open(fd)


def test_a_handover_variable_naming_no_descriptor_is_ignored(caplog: pytest.LogCaptureFixture) -> None:
    assert take_handover({HANDOVER_ENV: "three"}) is None
    assert "not a descriptor" in caplog.text
    closed = os.open("/dev/null", os.O_RDONLY)
    os.close(closed)
    assert take_handover({HANDOVER_ENV: str(closed)}) is None
    assert "cannot read the handover" in caplog.text


def test_a_handover_whose_config_this_version_rejects_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    data = json.loads(handover(tmp_path).model_dump_json())
    data["config"]["services"]["gpu"]["port"] = "not a port"  # e.g. a key whose type changed in an upgrade
    fd = memfd_with(json.dumps(data).encode())
    assert take_handover({HANDOVER_ENV: str(fd)}) is None
    assert "invalid handover" in caplog.text


def test_a_handover_from_another_version_is_taken_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    sent = handover(tmp_path).model_copy(update={"version": "0.0.1"})
    fd = memfd_with(sent.model_dump_json().encode())
    assert take_handover({HANDOVER_ENV: str(fd)}) == sent
    assert "the code on disk changed since syshaxd started" in caplog.text
