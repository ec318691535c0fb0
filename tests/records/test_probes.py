"""calibrate's probes pass through syshaxd as any request does, and are never recorded.

A probe measured an engine; it is not traffic. calibrate marks each one (an ``x-syshax-probe``
header, a ``syshax-probe-`` request id, :mod:`sim.calibrate.identity`); syshaxd serves it and
leaves it out of ``GET /v1/requests`` and the requests file, counting it instead
(``syshax_probe_requests_total``, ``probe_requests_total`` in the state) so nothing is lost
silently. Also through an API worker, where the probe's mark crosses the ledger.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from sim.calibrate.identity import PROBE_HEADER, probe_request_id
from tests.plugins.ports import wait_until
from tests.plugins.stack import Stack
from tests.records._client import ask, record


def _control(stack: Stack) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(stack.tmp / "run" / "control.sock")),
                        base_url="http://syshaxd", timeout=10)


def _probes_metric(stack: Stack) -> float:
    text = httpx.get(f"{stack.url}/metrics", timeout=10).text
    found = re.search(r"^syshax_probe_requests_total (\S+)$", text, flags=re.M)
    assert found is not None, text
    return float(found.group(1))


@pytest.mark.parametrize("workers", [1, 2])
def test_probes_are_served_and_counted_but_never_recorded(make_stack: Callable[..., Stack], tmp_path: Path,
                                                          workers: int) -> None:
    file = tmp_path / "requests.jsonl"
    stack = make_stack(config={"logging": {"requests_file": str(file)},
                               "services": {"conductor": {"workers": workers}}})
    client = stack.openai()
    header, value = PROBE_HEADER
    # calibrate's own probe: both marks; either mark alone is a probe too.
    marked = [{header: value, "X-Request-Id": probe_request_id()}, {header: value, "X-Request-Id": "rec-probe-header"},
              {"X-Request-Id": probe_request_id()}]
    for headers in marked:
        answer = client.chat.completions.create(model="ds-32b", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=3, extra_headers=headers)
        assert answer.usage is not None and answer.usage.completion_tokens >= 1  # served as any request
    streamed = httpx.post(f"{stack.url}/v1/completions", headers={header: value},
                          json={"model": "ds-32b", "prompt": "hi", "max_tokens": 3, "stream": True}, timeout=30)
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    traffic = ask(client, "chat", stream=False, max_tokens=2, tag="after-probes")
    record(stack.tmp / "run" / "control.sock", traffic.request_id)
    with _control(stack) as control:
        # A worker tells the daemon a request ended after its client had the answer: wait for all four.
        assert wait_until(lambda: control.get("/v1/state").raise_for_status().json()["conductor"]
                          ["probe_requests_total"] >= 4, timeout=30)
        records = control.get("/v1/requests").raise_for_status().json()
        state = control.get("/v1/state").raise_for_status().json()
    assert [r["request_id"] for r in records] == [traffic.request_id]
    assert state["conductor"]["probe_requests_total"] == 4
    assert _probes_metric(stack) == 4.0
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    assert [line["request_id"] for line in lines] == [traffic.request_id]
