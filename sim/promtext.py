"""Writing Prometheus text exposition (format 0.0.4) the way each engine writes it.

Python engines (vLLM, SGLang) use prometheus_client, which prints ``1.0``-style floats,
``# TYPE name_total counter`` for counters, and (vLLM v1) a ``name_created`` gauge next
to each counter and histogram. llama-server prints its own text: integers without a
decimal point and no labels.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from prometheus_client import utils as _prom_utils

Labels = dict[str, str]


def floatToGoString(value: float) -> str:  # noqa: N802 - prometheus_client's name
    """A float as prometheus_client prints it (``1.0``, ``8.128902e+06``, ``+Inf``)."""
    return str(_prom_utils.floatToGoString(value))  # type: ignore[no-untyped-call]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def llama_number(value: float) -> str:
    """A number as llama-server prints it (``261``, ``0.039569``)."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6g}"


class Histogram:
    """Cumulative buckets, sum and count of observations."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # last = +Inf only
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Record one observation."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, cumulative count) pairs, +Inf last."""
        out: list[tuple[float, int]] = []
        running = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


class Exposition:
    """Accumulates metric families and renders them as text."""

    def __init__(self, *, created: float | None = None, llama: bool = False) -> None:
        self.lines: list[str] = []
        self.created = created  # when set, counters and histograms get _created gauges
        self.llama = llama

    def _num(self, value: float) -> str:
        return llama_number(value) if self.llama else floatToGoString(value)

    def _header(self, name: str, help_text: str, kind: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def _created(self, base: str, help_text: str, labelsets: Sequence[Labels]) -> None:
        if self.created is None:
            return
        self._header(f"{base}_created", help_text, "gauge")
        for labels in labelsets:
            self.lines.append(f"{base}_created{_labels(labels)} {floatToGoString(self.created)}")

    def gauge(self, name: str, help_text: str, samples: Sequence[tuple[Labels, float]]) -> None:
        """A gauge family."""
        self._header(name, help_text, "gauge")
        for labels, value in samples:
            self.lines.append(f"{name}{_labels(labels)} {self._num(value)}")

    def counter(self, name: str, help_text: str, samples: Sequence[tuple[Labels, float]]) -> None:
        """A counter family; ``name`` ends in ``_total``."""
        self._header(name, help_text, "counter")
        for labels, value in samples:
            self.lines.append(f"{name}{_labels(labels)} {self._num(value)}")
        self._created(name.removesuffix("_total"), help_text, [labels for labels, _ in samples])

    def histogram(self, name: str, help_text: str, samples: Sequence[tuple[Labels, Histogram]]) -> None:
        """A histogram family (``le`` first among the bucket labels, as vLLM prints it)."""
        self._header(name, help_text, "histogram")
        for labels, hist in samples:
            for bound, cum in hist.cumulative():
                bucket_labels = {"le": floatToGoString(bound), **labels}
                self.lines.append(f"{name}_bucket{_labels(bucket_labels)} {self._num(cum)}")
            self.lines.append(f"{name}_count{_labels(labels)} {self._num(hist.count)}")
            self.lines.append(f"{name}_sum{_labels(labels)} {self._num(hist.sum)}")
        self._created(name, help_text, [labels for labels, _ in samples])

    def text(self) -> str:
        """The whole exposition."""
        return "\n".join(self.lines) + "\n"
