"""The box's load as a cluster router reads it: both engines, the conductor's queue, one KV share."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from syshaxd.conductor import get_load_body
from syshaxd.conductor.boxload import VllmGauges, box_load
from syshaxd.snapshot import EngineMetrics, EngineState, EngineView, Snapshot


def _view(name: str, device: str, *, running: int | None = None, waiting: int | None = None,
          kv: float | None = None, inflight: int = 0, scheduled: int = 0, state: EngineState = EngineState.UP,
          draining: bool = False) -> EngineView:
    return EngineView(name, device, f"http://{name}", "vllm-v1", state=state,  # type: ignore[arg-type]
                      metrics=EngineMetrics(running=running, waiting=waiting, kv_cache_usage=kv),
                      inflight=inflight, scheduled=scheduled, draining=draining,
                      inflight_decode_tokens=100 * inflight, scheduled_prompt_tokens=10 * scheduled)


def test_the_box_counts_both_engines_and_its_own_queue() -> None:
    snap = Snapshot(0.0, (_view("gpu0", "gpu", running=6, waiting=2, kv=0.9, inflight=8),
                          _view("cpu0", "cpu", running=1, waiting=0, kv=0.2, inflight=3, scheduled=1)))
    load = box_load(snap, queued=5)
    assert load.waiting == 5 + 2  # the conductor's queue plus what the GPU engine holds back
    # GPU: its scrape says 6, the conductor has 8 started there (fresher): 8. CPU: 1 vs 3-1=2: 2.
    assert load.running == 8 + 2
    assert load.load == 17
    assert load.kv_usage == 0.9  # the GPU's: what runs out first
    assert load.tokens == 100 * 11 + 10 * 1
    assert get_load_body(load, "vllm-router") == {"load": 17}
    assert get_load_body(load, "sglang") == [{"dp_rank": 0, "num_reqs": 17, "num_waiting_reqs": 7,
                                              "num_tokens": 1110}]


def test_kv_usage_falls_back_to_the_cpu_when_no_gpu_engine_can_serve() -> None:
    down = Snapshot(0.0, (_view("gpu0", "gpu", kv=0.95, state=EngineState.DOWN), _view("cpu0", "cpu", kv=0.3)))
    assert box_load(down, 0).kv_usage == 0.3
    drained = Snapshot(0.0, (_view("gpu0", "gpu", kv=0.95, draining=True), _view("cpu0", "cpu", kv=0.4)))
    assert box_load(drained, 0).kv_usage == 0.4
    unknown = Snapshot(0.0, (_view("gpu0", "gpu"), _view("cpu0", "cpu")))
    assert box_load(unknown, 0).kv_usage is None


def test_vllm_gauges_have_vllms_names_labels_and_no_false_zero() -> None:
    registry = CollectorRegistry()
    gauges = VllmGauges(registry, "ds-32b")
    snap = Snapshot(0.0, (_view("gpu0", "gpu", running=3, waiting=1, kv=0.5), _view("cpu0", "cpu", running=1)))
    gauges.update(box_load(snap, queued=2))
    samples = {s.name: s for f in text_string_to_metric_families(generate_latest(registry).decode())
               for s in f.samples}
    assert samples["vllm:num_requests_waiting"].value == 3
    assert samples["vllm:num_requests_running"].value == 4
    assert samples["vllm:kv_cache_usage_perc"].value == 0.5
    assert samples["vllm:num_requests_running"].labels == {"engine": "0", "model_name": "ds-32b"}
    gauges.update(box_load(Snapshot(0.0, (_view("gpu0", "gpu"),)), queued=0))
    names = {s.name for f in text_string_to_metric_families(generate_latest(registry).decode()) for s in f.samples}
    assert "vllm:kv_cache_usage_perc" not in names  # unknown is absent, not 0
    assert "vllm:num_requests_waiting" in names
