"""The service class table and its rules: what is accepted, what is refused and why, what a request gets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from syshaxd.config.classes import RequestFields, ServiceLevels, classify, reachable
from syshaxd.routing import ServiceLevel


def _request(**kw: object) -> RequestFields:
    fields = {"model": "ds-32b", "max_tokens": 100, "stream": True, "messages": 1, "temperature": None}
    return RequestFields(**{**fields, **kw})  # type: ignore[arg-type]


def test_the_shipped_table_keeps_the_deciders_targets_for_the_default_class() -> None:
    levels = ServiceLevels().levels()
    assert levels["interactive"] == ServiceLevel("interactive")  # no targets of its own: the decider's
    assert levels["batch"] == ServiceLevel("batch", ttft=60.0, tpot=1.0, priority=1)
    assert levels["sheddable"].sheddable and levels["sheddable"].late == "refuse"


def test_the_first_matching_rule_picks_the_class_else_the_default() -> None:
    levels = ServiceLevels.model_validate({"rules": [
        {"class": "sheddable", "api_key": "evals"},
        {"class": "batch", "max_tokens_at_least": 2000},
        {"class": "batch", "model": "summar*", "stream": False},
    ]})
    assert classify(levels, _request()) == "interactive"
    assert classify(levels, _request(max_tokens=4000)) == "batch"
    assert classify(levels, _request(max_tokens=4000, api_key="evals")) == "sheddable"
    assert classify(levels, _request(model="summarizer", stream=False)) == "batch"
    assert classify(levels, _request(model="summarizer", stream=True)) == "interactive"


@pytest.mark.parametrize(("data", "says"), [
    ({"default_class": "gold"}, "default_class 'gold' is not in the table"),
    ({"rules": [{"class": "gold"}]}, "rule 0 names class 'gold'"),
    ({"classes": {"x": {"tpot_ms": 100, "deadline_s": 60}}, "default_class": "x"}, "tpot_ms or deadline_s"),
    ({"classes": {"x": {"ttft_ms": 2}}, "default_class": "x"}, "greater than or equal to 10"),
    ({"classes": {"x": {"tpot_ms": 0}}, "default_class": "x"}, "greater than or equal to 1"),
    ({"classes": {"x y": {}}, "default_class": "x y"}, "letters, digits"),
    ({"classes": {"x": {"ttft_ms": 5000, "deadline_s": 4}}, "default_class": "x"}, "no time after the first"),
    ({"classes": {"x": {"priority": "high"}}, "default_class": "x"}, "valid integer"),
])
def test_a_table_no_one_could_serve_is_refused_with_the_reason(data: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        ServiceLevels.model_validate(data)


def test_a_tpot_target_faster_than_every_engine_is_named() -> None:
    levels = ServiceLevels.model_validate({"classes": {"interactive": {}, "fast": {"tpot_ms": 5}}})
    assert reachable(levels, {}) is None  # nothing measured yet: nothing to say
    assert reachable(levels, {"gpu0": 0.004, "cpu0": 0.09}) is None
    why = reachable(levels, {"gpu0": 0.012, "cpu0": 0.09})
    assert why == "class 'fast' asks for 5 ms per token; the fastest engine (gpu0) decodes one request at 12 ms per token"
