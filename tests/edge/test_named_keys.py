"""Named API keys through a real daemon: the key a request came with picks its class by name
(``{class: batch, api_key: nightly-evals}``), its record names the key, a wrong key is a 401 in
OpenAI's shape, no secret shows anywhere, a bad key table stops the daemon before it starts or
is refused by ``syshax set``; and all of it in a worker process too (``workers: 2``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from syshaxd.api.guard import Guard
from syshaxd.api.request import Request
from tests.plugins.stack import Stack

EVALS, CHAT = "sk-evals-4f1c9a0e", "sk-chat-77b2e05d"
KEYS = {"nightly-evals": EVALS, "chat": CHAT}
RULES = [{"class": "batch", "api_key": "nightly-evals"}]
CONFIG = {"services": {"conductor": {"api_keys": KEYS}}, "service": {"rules": RULES}}
MESSAGES = [{"role": "user", "content": "Name the river and the stone."}]
#: New connections tried before the test gives up on the kernel reaching the worker.
TRIES = 40


def _client(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0, timeout=60)


def _class_of(client: openai.OpenAI, **kwargs: Any) -> tuple[str | None, str]:
    """The class an answer says it ran in, and its request id (headers read by the official client)."""
    raw = client.chat.completions.with_raw_response.create(model="ds-32b", messages=MESSAGES, max_tokens=2,
                                                           **kwargs)
    parsed = raw.parse()
    if kwargs.get("stream"):
        assert sum(1 for _ in parsed) >= 2
    else:
        assert parsed.choices[0].finish_reason == "length"
    return raw.headers.get("x-syshax-class"), raw.headers["x-request-id"]


def _control(stack: Stack, path: str) -> httpx.Response:
    transport = httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock"))
    with httpx.Client(transport=transport, base_url="http://syshax", timeout=10) as control:
        return control.get(path)


def _records(stack: Stack) -> dict[str, dict[str, Any]]:
    return {r["request_id"]: r for r in _control(stack, "/v1/requests").json()}


def _syshax(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYSHAX_")}
    return subprocess.run([str(Path(sys.executable).parent / "syshax"), *args], capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.fixture(scope="module")
def keyed(make_module_stack: Callable[..., Stack]) -> Stack:
    """One daemon with two named keys and a rule by key name."""
    return make_module_stack(policy="gpu-only", speed=10.0, config=CONFIG)


def test_the_key_a_request_came_with_picks_its_class_and_is_in_its_record(keyed: Stack) -> None:
    with _client(keyed, EVALS) as evals, _client(keyed, CHAT) as chat:
        by_evals, evals_id = _class_of(evals)
        streamed, streamed_id = _class_of(evals, stream=True)
        by_chat, chat_id = _class_of(chat)
        named, named_id = _class_of(chat, extra_headers={"x-syshax-class": "sheddable"})  # a named class wins
    assert (by_evals, streamed, by_chat, named) == ("batch", "batch", "interactive", "sheddable")
    records = _records(keyed)
    assert [(records[i]["api_key_name"], records[i]["service_class"]) for i in (evals_id, streamed_id, chat_id, named_id)] == [
        ("nightly-evals", "batch"), ("nightly-evals", "batch"), ("chat", "interactive"), ("chat", "sheddable")]
    assert (records[evals_id]["ttft_target"], records[evals_id]["tpot_target"]) == (60.0, 1.0)


@pytest.mark.parametrize("key", [EVALS[:-1], EVALS + "0", EVALS.upper(), f"{EVALS} {CHAT}", "default"])
def test_a_wrong_key_is_a_401_in_openai_shape(keyed: Stack, key: str) -> None:
    with _client(keyed, key) as client, pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=2)
    assert caught.value.status_code == 401
    assert caught.value.response.headers["www-authenticate"] == "Bearer"
    error = caught.value.response.json()["error"]
    assert (error["code"], error["type"]) == ("invalid_api_key", "invalid_request_error")
    assert "missing or invalid API key" in error["message"] and key not in error["message"]
    bare = httpx.post(f"{keyed.url}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2}, timeout=30)
    assert bare.status_code == 401 and bare.json()["error"]["code"] == "invalid_api_key"


def test_no_secret_shows_in_state_records_metrics_logs_or_the_cli(keyed: Stack) -> None:
    with _client(keyed, EVALS) as evals, _client(keyed, "sk-wrong-1234") as wrong:
        _class_of(evals)
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
    shown = _syshax("config", "services.conductor.api_keys", "--config", str(keyed.config_path))
    assert shown.returncode == 0, shown.stderr
    assert yaml.safe_load(shown.stdout) == {"nightly-evals": "********", "chat": "********"}
    status = _syshax("status", "--socket", str(keyed.tmp / "run" / "control.sock"))
    assert status.returncode == 0, status.stderr
    texts = {"/v1/state": _control(keyed, "/v1/state").text, "/v1/requests": _control(keyed, "/v1/requests").text,
             "/metrics": httpx.get(f"{keyed.url}/metrics", timeout=10).text, "log": keyed.log_text(),
             "syshax config": shown.stdout + shown.stderr, "syshax status": status.stdout + status.stderr}
    assert "nightly-evals" in texts["/v1/requests"]  # the name is what is kept
    for where, text in texts.items():
        for secret in (EVALS, CHAT):
            assert secret not in text, f"a secret shows in {where}"


def test_syshax_set_refuses_a_rule_naming_an_unknown_key_and_the_table_stays(keyed: Stack) -> None:
    sock = str(keyed.tmp / "run" / "control.sock")
    refused = _syshax("set", "service.rules", '[{"class": "batch", "api_key": "nightly"}]', "--socket", sock)
    assert refused.returncode != 0
    assert ("service.rules[0] names API key 'nightly', which is not configured; the keys are: chat, nightly-evals; "
            "the table in use is kept") in refused.stderr
    assert _control(keyed, "/v1/state").json()["config"]["service.rules"][0]["api_key"] == "nightly-evals"
    with _client(keyed, EVALS) as evals:
        assert _class_of(evals)[0] == "batch"


@pytest.mark.parametrize(("conductor", "rules", "says"), [
    ({"api_keys": {"nightly-evals": EVALS, "chat": EVALS}}, [],
     ":7: API keys services.conductor.api_keys.chat and services.conductor.api_keys.nightly-evals have the same "
     "secret"),
    ({"api_keys": KEYS}, [{"class": "batch", "api_key": "weekly-evals"}],
     ": service.rules[0] names API key 'weekly-evals', which is not configured; the keys are: chat, nightly-evals"),
    ({"api_key": CHAT, "api_keys": {"default": EVALS}}, [],
     ":7: services.conductor.api_key is the key named 'default': set it or services.conductor.api_keys.default, "
     "not both"),
])
def test_a_key_table_that_cannot_name_requests_stops_the_daemon_before_it_starts(
        tmp_path: Path, conductor: dict[str, Any], rules: list[dict[str, str]], says: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"control": {"socket": str(tmp_path / "control.sock"), "state_dir": str(tmp_path)},
                                    "services": {"conductor": conductor}, "service": {"rules": rules}},
                                   sort_keys=True))  # services.conductor: line 7
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYSHAX_")}
    run = subprocess.run([sys.executable, "-m", "syshaxd", "--config", str(path)], capture_output=True, text=True,
                         timeout=60, env=env)
    assert run.returncode == 2
    assert f"syshaxd: {path}{says}" in run.stderr
    assert EVALS not in run.stderr + run.stdout and CHAT not in run.stderr + run.stdout
    assert not (tmp_path / "control.sock").exists()


def _taken(stack: Stack) -> dict[str, float]:
    return {p: stack.metric("syshax_process_requests_total", process=p) for p in ("0", "1")}


def test_a_worker_process_names_the_key_and_the_rule_holds_there(make_stack: Callable[..., Stack]) -> None:
    two = make_stack(policy="gpu-only", speed=10.0,
                     config={**CONFIG, "services": {"conductor": {"api_keys": KEYS, "workers": 2}}})
    seen: dict[str, list[tuple[str | None, str | None, str]]] = {"0": [], "1": []}
    for _ in range(TRIES):
        before = _taken(two)
        with _client(two, EVALS) as evals:  # one connection: one process takes both its requests
            answers = [_class_of(evals), _class_of(evals, stream=True)]
        with _client(two, "sk-wrong-1234") as wrong, pytest.raises(openai.AuthenticationError):
            wrong.chat.completions.create(model="ds-32b", messages=MESSAGES, max_tokens=2)
        after = _taken(two)
        process = next(p for p in after if after[p] > before[p])
        with _client(two, CHAT) as chat:
            answers.append(_class_of(chat))
        records = _records(two)
        seen[process] += [(cls, records[rid]["api_key_name"], rid) for cls, rid in answers[:2]]
        assert [(cls, records[rid]["api_key_name"]) for cls, rid in answers] == [
            ("batch", "nightly-evals"), ("batch", "nightly-evals"), ("interactive", "chat")]
        if seen["0"] and seen["1"]:
            break
    assert seen["1"], f"{TRIES} connections never reached the worker: {seen}"


def test_the_guard_compares_every_key_and_names_the_one_that_matched() -> None:
    guard = Guard(KEYS)

    def request(token: bytes | None, path: str = "/v1/chat/completions") -> Request:
        headers = [(b"authorization", b"Bearer " + token)] if token is not None else []
        return Request("POST", path.encode(), path, b"", "1.1", headers, b"", None, None)

    for name, secret in KEYS.items():
        passed = request(secret.encode())
        assert guard.check(passed) is None and passed.api_key_name == name
    for token in (None, b"", EVALS[:-1].encode(), b"chat", b"nightly-evals"):
        refused = request(token)
        denied = guard.check(refused)
        assert denied is not None and denied.status == 401 and refused.api_key_name is None
    opened = Guard(None).check(request(None))
    assert opened is None
