"""A plain OpenAI-compatible engine without /metrics.

The monitor only checks that it answers (``GET /v1/models``); the conductor's own
in-flight accounting is then all a policy knows about it.
"""

from __future__ import annotations

from syshaxd.engines.base import Dialect
from syshaxd.snapshot import EngineMetrics


def parse(text: str) -> EngineMetrics:
    """No metrics to read: an empty record whatever the text."""
    return EngineMetrics()


OPENAI = Dialect(
    name="openai",
    metrics_path=None,
    parse=parse,
    description="any OpenAI-compatible server (no /metrics: health only)",
)
