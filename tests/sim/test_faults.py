"""Every fault of the /sim/faults contract, switched on and off against a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sim.faults import FaultError, Faults, apply_patch, parse_assignments
from sim.launch import EngineHandle, start_engine
from tests.plugins.ports import wait_until

CHAT = {"model": "ds-32b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "ignore_eos": True}


_http: list[httpx.Client] = []  # one pooled client for the module (a new client per call costs ~70 ms)


@pytest.fixture(scope="module", autouse=True)
def http_client() -> Iterator[None]:
    with httpx.Client() as client:
        _http.append(client)
        yield
        _http.clear()


def chat(engine: EngineHandle, timeout: float = 10.0, **extra: object) -> httpx.Response:
    return _http[0].post(f"{engine.url}/v1/chat/completions", json={**CHAT, **extra}, timeout=timeout)


def metric_values(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.fixture(scope="module")
def shared() -> Iterator[EngineHandle]:
    with start_engine("tiny", speed=50.0) as (_, handle):
        yield handle


@pytest.fixture
def engine(shared: EngineHandle) -> Iterator[EngineHandle]:
    """One engine for the faults that do not end the process; every test leaves it fault-free."""
    shared.clear_faults()
    yield shared
    shared.clear_faults()


def test_error_rate_and_status_on_and_off(engine: EngineHandle) -> None:
    assert engine.set_faults(error_rate=1.0)["error_rate"] == 1.0
    r = chat(engine)
    assert r.status_code == 500
    assert r.json()["error"]["code"] == 500 and r.json()["error"]["type"] == "InternalServerError"
    engine.set_faults(error_status=503)
    assert chat(engine, stream=True).status_code == 503
    assert engine.clear_faults() == Faults().to_json()
    assert chat(engine).status_code == 200


def test_error_rate_half_fails_some_not_all(engine: EngineHandle) -> None:
    engine.set_faults(error_rate=0.5)
    codes = [chat(engine).status_code for _ in range(30)]
    assert 500 in codes and 200 in codes
    engine.set_faults(error_rate=0.0)
    assert {chat(engine).status_code for _ in range(5)} == {200}


def test_garbage_body_on_and_off(engine: EngineHandle) -> None:
    engine.set_faults(garbage_body=True)
    r = chat(engine)
    assert r.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.content)
    streamed = chat(engine, stream=True)
    assert streamed.status_code == 200 and not streamed.text.startswith("data:")
    engine.set_faults(garbage_body=False)
    assert chat(engine).json()["choices"][0]["finish_reason"] == "length"


def test_added_latency_on_and_off(engine: EngineHandle) -> None:
    engine.set_faults(added_latency=5.0)
    with pytest.raises(httpx.ReadTimeout):
        chat(engine, timeout=0.5)
    engine.set_faults(added_latency=0)
    assert chat(engine, timeout=5.0).status_code == 200


def test_die_after_off_then_on(sim_engine) -> None:  # type: ignore[no-untyped-def]
    engine = sim_engine("tiny", speed=50.0)
    engine.set_faults(die_after=1)
    engine.set_faults(die_after=None)  # switched off again before it fired
    assert [chat(engine).status_code for _ in range(3)] == [200, 200, 200]
    engine.set_faults(die_after=1)
    assert chat(engine).status_code == 200
    with pytest.raises(httpx.TransportError):
        chat(engine)
    proc = sim_engine.process(engine)
    assert proc.proc.wait(10) == 1


def test_die_mid_stream_off_then_on(sim_engine) -> None:  # type: ignore[no-untyped-def]
    engine = sim_engine("tiny", speed=5.0)
    engine.set_faults(die_mid_stream=True)
    engine.set_faults(die_mid_stream=False)
    whole = chat(engine, stream=True, max_tokens=20)
    assert whole.text.rstrip().endswith("data: [DONE]")
    engine.set_faults(die_mid_stream=True)
    events: list[str] = []
    with pytest.raises(httpx.TransportError):
        with httpx.stream("POST", f"{engine.url}/v1/chat/completions", json={**CHAT, "max_tokens": 200, "stream": True},
                          timeout=10) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    events.append(line)
    assert len(events) == 3
    assert sim_engine.process(engine).proc.wait(10) == 1


def _events(raw: str) -> list[str]:
    return [block for block in raw.split("\n\n") if block]


def test_truncate_stream_ends_every_stream_cleanly_without_done(engine: EngineHandle) -> None:
    engine.set_faults(truncate_stream=1)
    r = chat(engine, stream=True, stream_options={"include_usage": True})
    # the body was read to its end: the chunked response completed normally
    assert r.status_code == 200 and r.headers["transfer-encoding"] == "chunked"
    events = _events(r.text)
    assert "[DONE]" not in r.text and all(e.startswith("data: {") for e in events)
    assert len(events) == 1 + 5 + 1  # role chunk, one chunk per token, usage chunk
    assert json.loads(events[-1][len("data: "):])["usage"]["completion_tokens"] == 5
    completion = _http[0].post(f"{engine.url}/v1/completions", json={"prompt": "hi", "max_tokens": 4, "ignore_eos": True,
                                                                       "stream": True})
    events = _events(completion.text)
    assert len(events) == 4 and json.loads(events[-1][len("data: "):])["choices"][0]["finish_reason"] == "length"
    assert chat(engine).json()["choices"][0]["finish_reason"] == "length"  # a non-streamed answer is whole
    engine.set_faults(truncate_stream=0)
    assert chat(engine, stream=True).text.endswith("data: [DONE]\n\n")


def test_truncate_stream_rate_truncates_some_streams(engine: EngineHandle) -> None:
    engine.set_faults(truncate_stream=0.5)
    ends = {chat(engine, stream=True, max_tokens=1).text.endswith("data: [DONE]\n\n") for _ in range(30)}
    assert ends == {True, False}


def test_paused_holds_requests_with_the_clock_stopped_and_resumes_where_it_stopped(engine: EngineHandle) -> None:
    engine.set_faults(paused=True)
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(chat, engine, 30.0, max_tokens=8)
        assert wait_until(lambda: engine.stats()["waiting"] == 1)  # accepted, not computed
        before = engine.stats()
        metrics = metric_values(httpx.get(f"{engine.url}/metrics", timeout=5).text)  # still answers
        assert metrics["vllm:num_requests_waiting"] == 1
        after = engine.stats()
        assert after["virtual_time"] == before["virtual_time"]
        assert after["generation_tokens"] == before["generation_tokens"]
        assert not answer.done()
        assert engine.set_faults(paused=False)["paused"] is False
        done = answer.result(timeout=30)
    assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 8
    assert engine.stats()["virtual_time"] > before["virtual_time"]


def test_metrics_hang_and_slow_on_and_off(engine: EngineHandle) -> None:
    for mode in ("hang", "slow"):
        engine.set_faults(metrics=mode)
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(f"{engine.url}/metrics", timeout=0.5)
        engine.set_faults(metrics="ok")
        assert "vllm:num_requests_running" in metric_values(httpx.get(f"{engine.url}/metrics", timeout=5).text)
    assert chat(engine).status_code == 200  # generation was never affected


def test_metrics_garbage_on_and_off(engine: EngineHandle) -> None:
    engine.set_faults(metrics="garbage")
    r = httpx.get(f"{engine.url}/metrics")
    assert r.status_code == 200
    with pytest.raises(ValueError):
        metric_values(r.text)
    engine.clear_faults()
    assert metric_values(httpx.get(f"{engine.url}/metrics").text)


def test_metrics_contradictory_on_and_off(engine: EngineHandle) -> None:
    engine.set_faults(metrics="contradictory")
    values = metric_values(httpx.get(f"{engine.url}/metrics").text)
    assert values["vllm:num_requests_running"] == -1
    assert values["vllm:kv_cache_usage_perc"] == 1.7
    engine.set_faults(metrics="ok")
    values = metric_values(httpx.get(f"{engine.url}/metrics").text)
    assert values["vllm:num_requests_running"] == 0
    assert 0 <= values["vllm:kv_cache_usage_perc"] <= 1


def test_faults_given_at_start(sim_engine) -> None:  # type: ignore[no-untyped-def]
    engine = sim_engine("tiny", faults={"metrics": "garbage", "error_rate": 1, "error_status": 502})
    assert httpx.get(f"{engine.url}/sim/faults").json()["metrics"] == "garbage"
    assert chat(engine).status_code == 502
    engine.clear_faults()
    assert chat(engine).status_code == 200


def test_bad_fault_patch_is_400_and_changes_nothing(engine: EngineHandle) -> None:
    engine.set_faults(error_rate=0.25)
    for patch in ({"error_rate": 2}, {"metrics": "sideways"}, {"die_after": -1}, {"nope": 1}, [1, 2]):
        r = httpx.post(f"{engine.url}/sim/faults", json=patch)
        assert r.status_code == 400 and r.json()["error"]["message"]
    assert httpx.get(f"{engine.url}/sim/faults").json()["error_rate"] == 0.25


def test_fault_assignments_parse_like_the_json_contract() -> None:
    faults = parse_assignments(["metrics=hang", "error_rate=0.5", "die_after=null", "garbage_body=true"])
    assert faults == Faults(metrics="hang", error_rate=0.5, garbage_body=True)
    assert parse_assignments(["truncate_stream=1"]) == parse_assignments(["truncate_stream=true"])
    assert parse_assignments(["truncate_stream=1"]).truncate_stream == 1.0
    with pytest.raises(FaultError, match="truncate_stream must be"):
        parse_assignments(["truncate_stream=2"])
    with pytest.raises(FaultError, match="KEY=VALUE"):
        parse_assignments(["metrics"])
    with pytest.raises(FaultError, match="unknown fault"):
        apply_patch(Faults(), {"explode": True})


def test_cli_reports_a_bad_fault_without_a_traceback() -> None:
    run = subprocess.run([sys.executable, "-m", "sim", "--profile", "tiny", "--port", "0", "--fault", "metrics=sideways"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "metrics must be one of" in run.stderr and "Traceback" not in run.stderr
