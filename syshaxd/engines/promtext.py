"""Prometheus text -> a queryable set of samples, on top of prometheus_client's parser.

Dialects read engine numbers through :class:`MetricSet`, which knows how to add up series
that differ only in labels (vLLM's ``engine``, SGLang's ``dp_rank``) and how to count once
the series that every tensor/pipeline rank reports again (SGLang's ``tp_rank``/``pp_rank``).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from syshaxd.snapshot import HistogramData

Labels = tuple[tuple[str, str], ...]


class MetricsParseError(ValueError):
    """A /metrics body that is not Prometheus text; the message says what was wrong."""


@dataclass(frozen=True)
class _Sample:
    labels: Labels
    value: float


def _strip_elisions(text: str) -> str:
    # Documentation excerpts mark cut text with a bare "..." line, which no parser accepts.
    return "\n".join(line for line in text.splitlines() if line.strip() != "...") + "\n"


def _keep(text: str, wanted: Collection[str]) -> str:
    """The sample lines of ``wanted`` names; the rest must look like samples or comments.

    Comments (HELP, TYPE) are dropped too: a sample without its TYPE reads as untyped, which
    is all a lookup by sample name needs.

    Raises:
        MetricsParseError: a line that is neither a comment nor ``name[{labels}] value``.
    """
    kept = []
    for line in text.split("\n"):
        if not line or line[0] == "#" or line.strip() in ("", "..."):
            continue
        brace, space = line.find("{"), line.find(" ")
        end = brace if brace >= 0 and (space < 0 or brace < space) else space
        if end <= 0:
            raise MetricsParseError(f"not Prometheus text: {line[:60]!r} is not a sample")
        if line[:end] in wanted:
            kept.append(line)
            continue
        try:
            float(line.rsplit(" ", 1)[1])  # the value (or a timestamp after it): a number either way
        except (ValueError, IndexError):
            raise MetricsParseError(f"not Prometheus text: {line[:60]!r} has no value") from None
    kept.append("")
    return "\n".join(kept)


def wanted_samples(plain: Iterable[str], histograms: Iterable[str] = ()) -> frozenset[str]:
    """The sample names a dialect reads: ``plain`` as they are, each histogram's three series."""
    return frozenset(plain) | frozenset(f"{base}_{part}" for base in histograms for part in ("bucket", "sum", "count"))


def _sum(values: Iterable[float]) -> float:
    """Exact sum of finite values; a sum beyond the float range is infinite (then rejected)."""
    items = list(values)
    try:
        return math.fsum(items)
    except OverflowError:  # fsum raises where plain addition would give +-inf
        return sum(items)


def _describe(exc: Exception) -> str:
    text = str(exc).strip().replace("\n", " ")
    if len(text) > 120:
        text = text[:117] + "..."
    return text or type(exc).__name__


class MetricSet:
    """The samples of one /metrics body, by sample name (``_created`` series dropped)."""

    def __init__(self, samples: dict[str, list[_Sample]]) -> None:
        self._samples = samples

    @classmethod
    def parse(cls, text: str, only: Collection[str] | None = None) -> MetricSet:
        """Parse Prometheus text exposition format.

        ``only``: the sample names wanted (a histogram's ``_bucket``/``_sum``/``_count``, a
        counter's ``_total``). An engine's /metrics holds hundreds of series a dialect never
        reads; only the wanted lines go through the parser (a quarter of the cost for vLLM's),
        the rest is only checked to be sample lines.

        Raises:
            MetricsParseError: the text is not valid Prometheus text.
        """
        if only is not None:
            text = _keep(text, only)
        samples: dict[str, list[_Sample]] = {}
        try:
            for family in text_string_to_metric_families(_strip_elisions(text)):
                for sample in family.samples:
                    name = sample.name
                    # *_created holds a timestamp, not a quantity: summing it would be nonsense.
                    if name.endswith("_created"):
                        continue
                    labels = tuple(sorted((str(k), str(v)) for k, v in sample.labels.items()))
                    samples.setdefault(name, []).append(_Sample(labels, float(sample.value)))
        # The parser raises ValueError for most bad input, but odd bytes can also surface as
        # IndexError/KeyError/TypeError from inside it: all mean "not Prometheus text".
        except Exception as exc:
            raise MetricsParseError(f"not Prometheus text: {_describe(exc)}") from None
        return cls(samples)

    def names(self) -> frozenset[str]:
        """Every sample name present."""
        return frozenset(self._samples)

    def has(self, name: str) -> bool:
        """Whether any finite sample of ``name`` is present."""
        return any(math.isfinite(s.value) for s in self._samples.get(name, ()))

    def first_present(self, *names: str) -> str | None:
        """The first of ``names`` that has samples (for metrics renamed across versions)."""
        for name in names:
            if self.has(name):
                return name
        return None

    def _groups(self, name: str, collapse: Collection[str]) -> dict[Labels, float]:
        """Finite samples of ``name``, deduplicated over the ``collapse`` labels (max)."""
        groups: dict[Labels, float] = {}
        for sample in self._samples.get(name, ()):
            if not math.isfinite(sample.value):
                continue
            key = tuple((k, v) for k, v in sample.labels if k not in collapse)
            groups[key] = max(groups.get(key, -math.inf), sample.value)
        return groups

    def total(self, name: str, collapse: Collection[str] = ()) -> float | None:
        """Sum over all series of ``name``; series that differ only in ``collapse`` count once."""
        groups = self._groups(name, collapse)
        return _sum(groups.values()) if groups else None

    def mean(self, name: str, collapse: Collection[str] = ()) -> float | None:
        """Mean over the series of ``name`` (for fractions such as KV-cache usage)."""
        groups = self._groups(name, collapse)
        return _sum(groups.values()) / len(groups) if groups else None

    def histogram(self, base: str, collapse: Collection[str] = ()) -> HistogramData | None:
        """The histogram ``base`` summed over its series, or None when it has no buckets.

        A missing ``+Inf`` bucket is filled in from ``_count``; a missing ``_sum`` is NaN.
        """
        per_le: dict[float, dict[Labels, float]] = {}
        for sample in self._samples.get(f"{base}_bucket", ()):
            labels = dict(sample.labels)
            try:
                bound = float(labels.pop("le"))
            except (KeyError, ValueError):
                continue
            if not math.isfinite(sample.value) or math.isnan(bound):
                continue
            key = tuple((k, v) for k, v in sorted(labels.items()) if k not in collapse)
            slot = per_le.setdefault(bound, {})
            slot[key] = max(slot.get(key, -math.inf), sample.value)
        if not per_le:
            return None
        buckets = [(bound, _sum(series.values())) for bound, series in sorted(per_le.items())]
        count = self.total(f"{base}_count", collapse)
        if count is None:
            count = buckets[-1][1]
        if buckets[-1][0] != math.inf:
            buckets.append((math.inf, max(count, buckets[-1][1])))
        total = self.total(f"{base}_sum", collapse)
        return HistogramData(
            buckets=tuple(buckets), count=count, sum=total if total is not None else math.nan
        )


def histograms(
    metrics: MetricSet, names: Iterable[tuple[str, tuple[str, ...]]], collapse: Collection[str] = ()
) -> tuple[tuple[str, HistogramData], ...]:
    """Collect histograms under common names: ``[("ttft", (candidate, ...)), ...]``.

    The first candidate that exists wins (engines rename histograms across versions).
    """
    found: list[tuple[str, HistogramData]] = []
    for common, candidates in names:
        for candidate in candidates:
            data = metrics.histogram(candidate, collapse)
            if data is not None:
                found.append((common, data))
                break
    return tuple(found)
