"""The decision log's buffer, filter and row diffs."""

from __future__ import annotations

import pytest

from console.decisionlog import DecisionLog, decision_key, diff_rows, matches, row_cells, visible
from syshaxd.schema import DecisionModel
from tests.console.fakedaemon import sample_decision


def test_log_appends_in_time_order_and_caps() -> None:
    log = DecisionLog(cap=3).add(sample_decision(i, 100.0 + i) for i in (2, 0, 1, 3))
    assert [d.request_id for d in log.items] == ["req-00001", "req-00002", "req-00003"]


def test_the_same_decision_twice_is_one_row_and_a_later_outcome_updates_it() -> None:
    first = sample_decision(1, 10.0)
    log = DecisionLog().add([first])
    assert log.add([first]) is log  # nothing new: the very same object, no re-render
    finished = first.model_copy(update={"outcome": "ok", "ttft": 0.3})
    log2 = log.add([finished])
    assert len(log2.items) == 1 and log2.items[0].ttft == 0.3


def test_keys_follow_items_through_adds_and_reorders() -> None:
    log = DecisionLog(cap=4).add(sample_decision(i, float(t)) for i, t in [(1, 5), (2, 3)])
    log = log.add([sample_decision(3, 4.0), sample_decision(4, 9.0), sample_decision(5, 1.0)])
    assert [d.request_id for d in log.items] == ["req-00002", "req-00003", "req-00001", "req-00004"]
    assert log.keys == tuple(decision_key(d) for d in log.items)


def test_one_request_decided_twice_keeps_both_rows() -> None:
    a = sample_decision(1, 10.0)
    b = a.model_copy(update={"time": 11.0, "reason": "token limit reached: ask again"})
    assert len(DecisionLog().add([a, b]).items) == 2
    assert decision_key(a) != decision_key(b)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", True),
        ("cpu", True),
        ("CPU", True),
        ("device:cpu", True),
        ("device:gpu", False),
        ("id:req-0004", True),
        ("id:0004", False),  # id matches by prefix
        ("batch full", True),  # every word must match, anywhere
        ("batch gpu-only", False),
        ("mode:split", False),
        ("outcome:ok", False),
    ],
)
def test_filter(query: str, expected: bool) -> None:
    decision = sample_decision(42, 1.0, "cpu")
    assert matches(decision, query) is expected


def test_queued_decisions_match_device_queued() -> None:
    queued = sample_decision(1, 1.0).model_copy(update={"device": None})
    assert matches(queued, "device:queued")


def test_visible_filters_then_keeps_the_newest() -> None:
    log = DecisionLog().add(sample_decision(i, float(i), "cpu" if i % 2 else "gpu") for i in range(10))
    shown = visible(log, "device:cpu", 3)
    assert [d.request_id for _, d in shown] == ["req-00005", "req-00007", "req-00009"]
    assert [key for key, _ in shown] == [decision_key(d) for _, d in shown]
    assert len(visible(log, "", 100)) == 10 and visible(log, "", 0) == ()


def test_diff_rows_appends_removes_and_updates_by_key() -> None:
    diff = diff_rows(["a", "b", "c"], ["b", "c", "d", "e"], changed=["c", "x"])
    assert diff.remove == ("a",) and diff.add == ("d", "e") and diff.update == ("c",)
    assert diff.append_only


def test_diff_rows_notices_a_row_that_belongs_before_shown_ones() -> None:
    assert not diff_rows(["b", "c"], ["a", "b", "c"]).append_only
    assert diff_rows([], ["a"]).append_only


def test_row_cells_shorten_ids_and_show_real_ttft_and_failures() -> None:
    decision = DecisionModel(time=0, request_id="chatcmpl-0123456789abcdef", device="cpu", mode="pd_split",
                             reason="long prompt", policy="adaptive", est_ttft=0.2, ttft=12.5, outcome="timeout")  # fmt: skip
    _, request, device, mode, ttft, reason = row_cells(decision)
    assert request == "chatcmpl-…" and device == "cpu" and mode == "split"
    assert ttft == "0.20→12" and reason == "[timeout] long prompt"
