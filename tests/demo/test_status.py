"""The headless status line and the summary, read from the conductor's real metrics exposition."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console

from demo.load import Tally
from demo.loadgen import Result
from demo.status import build_summary, parse_metrics, status_line, summary_tables
from syshaxd.conductor.stats import Stats
from syshaxd.schema import ConductorStatsModel, DecisionModel, EngineStateModel, StateModel


def _decision(i: int, device: str, mode: str, reason: str) -> DecisionModel:
    return DecisionModel(time=time.time(), request_id=f"r{i}", device=device, mode=mode,  # type: ignore[arg-type]
                         reason=reason, policy="adaptive")


def _exposition() -> str:
    stats = Stats()
    routes = [("gpu", "whole", "gpu has room: est 0.2s")] * 5 + [("cpu", "whole", "gpu busy: 16/16")] * 2
    routes += [("cpu", "pd_split", "gpu busy: prefill there")] * 3
    for i, (device, mode, reason) in enumerate(routes):
        d = _decision(i, device, mode, reason)
        stats.record_decision(d)
        stats.record_finish(d, "ok", ttft=0.5 if device == "gpu" else 1.5, e2e=4.0)
    failed = _decision(99, "cpu", "whole", "gpu busy: 16/16")
    stats.record_decision(failed)
    stats.record_finish(failed, "error", ttft=None, e2e=1.0)
    cut = _decision(100, "gpu", "whole", "gpu has room: est 0.2s")
    stats.record_decision(cut)
    stats.record_finish(cut, "client_disconnect", ttft=0.5, e2e=2.0)
    return stats.exposition().decode()


def test_metrics_give_finished_requests_per_device_and_mode() -> None:
    numbers = parse_metrics(_exposition())
    assert numbers.routes["gpu/whole"].ok == 5
    assert numbers.routes["cpu/whole"].ok == 2 and numbers.routes["cpu/whole"].failed == 1
    assert numbers.routes["gpu/whole"].cancelled == 1
    assert numbers.done("cpu") == 5 and numbers.done(mode="pd_split") == 3
    assert numbers.routes["cpu/pd_split"].ttft_mean == 1.5
    assert numbers.reasons == {"gpu has room": 6, "gpu busy": 6}


def _state() -> StateModel:
    return StateModel(
        version="0", uptime=1.0, time=time.time(),
        engines=[
            EngineStateModel(name="gpu0", device="gpu", url="u", dialect="vllm-v1", state="up",
                             running=16, batch_limit=16, waiting=3, kv_cache_usage=0.91, decode_tps=812.0),
            EngineStateModel(name="cpu0", device="cpu", url="u", dialect="vllm-v1", state="stale", running=4),
        ],
        conductor=ConductorStatsModel(queue_depth=7, inflight={"gpu0": 16, "cpu0": 4}, policy="classic",
                                      auto_pd_offload=True),
    )


def test_status_line_shows_routes_queue_engines_and_client() -> None:
    tally = Tally()
    now = time.monotonic()
    tally.add(Result(ok=True, ttft=0.3, chunks=40), now)
    line = status_line(12.0, parse_metrics(_exposition()), _state(), tally, now)
    for part in ("12s", "gpu/whole 5", "cpu/pd_split 3", "queue 7", "in flight 20",
                 "gpu0 run 16/16 wait 3 kv 91% 812 tok/s", "cpu0 STALE run 4/-", "classic +pd", "client ok 1 err 0"):
        assert part in line, part
    assert "none yet" in status_line(1.0, parse_metrics(""), None, Tally(), now)


def test_summary_json_and_tables(tmp_path: Path) -> None:
    tally = Tally()
    now = time.monotonic()
    tally.add(Result(ok=True, ttft=0.3, chunks=40), now)
    tally.add(Result(ok=False, status=429, error="queue full: 200 waiting"), now)
    summary = build_summary(duration=20.0, policy="adaptive", handoff="syshax", load=0.5, speed=10.0,
                            trace="sample", numbers=parse_metrics(_exposition()), tally=tally)
    path = tmp_path / "s.json"
    summary.write(path)
    data = json.loads(path.read_text())
    assert data["done_gpu"] == 5 and data["done_cpu"] == 5 and data["splits"] == 3
    assert data["client"]["errors"] == 1 and data["client"]["error_kinds"] == {"queue full": 1}
    console = Console(width=120, record=True)
    for table in summary_tables(summary):
        console.print(table)
    text = console.export_text()
    assert "cpu/pd_split" in text and "gpu busy" in text and "policy adaptive" in text
    assert "cancelled at stop" in text
