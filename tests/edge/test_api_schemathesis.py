"""Property-based fuzzing of the conductor's public API from its own OpenAPI schema (schemathesis):
valid and invalid requests alike never get a 500, errors are OpenAI-shaped, nothing is logged
as a traceback, and nothing is left in flight.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis 4 needs Python >= 3.11")
from schemathesis import APIOperation, Case, GenerationMode  # noqa: E402
from schemathesis.core.result import Ok  # noqa: E402

from tests.plugins.stack import Stack  # noqa: E402
from tests.probe import assert_drained, assert_no_traceback  # noqa: E402

#: Per operation and generation mode: about a hundred requests in all, well under a minute.
EXAMPLES = 15
#: By value: under mypy's python_version 3.10, StrEnum members read as plain str.
MODES = [GenerationMode("positive"), GenerationMode("negative")]
#: 5xx answers that report an engine's failure (not the conductor's), with their error types.
UPSTREAM_5XX = {502: "upstream_error", 503: "service_unavailable", 504: "timeout"}


def judge(method: str, path: str, status: int, content_type: str, body: bytes) -> str | None:
    """None when the answer is acceptable, else what is wrong with it."""
    if status == 500:
        return f"{method} {path}: 500 {body[:300]!r}"
    if status < 400:
        return None
    if not content_type.startswith("application/json"):
        return f"{method} {path}: HTTP {status} is not JSON ({content_type})"
    try:
        error = json.loads(body)["error"]
        message, kind = error["message"], error["type"]
    except (ValueError, KeyError, TypeError):
        return f"{method} {path}: HTTP {status} is not an OpenAI error: {body[:300]!r}"
    if not isinstance(message, str) or not message:
        return f"{method} {path}: HTTP {status} without a message"
    if status >= 500 and UPSTREAM_5XX.get(status) != kind:
        return f"{method} {path}: HTTP {status} of type {kind!r}: {message}"
    return None


def fuzz(stack: Stack, operation: APIOperation[Any, Any, Any, Any], mode: GenerationMode,
         problems: list[str]) -> None:
    """Send EXAMPLES generated cases of one operation; record every unacceptable answer."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    def run(case: Case[Any]) -> None:
        response = case.call(base_url=stack.url, timeout=30)
        content_type = response.headers.get("content-type") or [""]
        problem = judge(case.method, case.path, response.status_code, content_type[0], response.content)
        if problem is not None:
            problems.append(f"[{mode.value}] {problem}")

    run()


@pytest.mark.timeout(300)
def test_openapi_operations_never_answer_500(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(policy="classic", gpu_profile="null", cpu_profile="null", speed=100.0)
    schema = schemathesis.openapi.from_url(f"{stack.url}/openapi.json")
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), f"the conductor's OpenAPI schema is invalid: {result}"
        operations.append(result.ok())
    labels = {op.label for op in operations}
    assert {"POST /v1/chat/completions", "POST /v1/completions", "GET /health"} <= labels, labels
    problems: list[str] = []
    for operation in operations:
        for mode in MODES:
            try:
                fuzz(stack, operation, mode, problems)
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.label
                # Nothing to break: the operation takes no parameters and no body.
    assert not problems, "\n".join(problems[:20])
    assert_no_traceback(stack)
    assert_drained(stack)
