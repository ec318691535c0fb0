"""What a real syshaxd serves on /metrics, as sample names with their types and labels."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = frozenset({"instance", "job"})


@dataclass(frozen=True)
class Served:
    """What a real daemon's /metrics holds: sample name -> (family type, label names)."""

    samples: dict[str, tuple[str, frozenset[str]]]

    @classmethod
    def parse(cls, text: str) -> Served:
        """From Prometheus text exposition."""
        samples: dict[str, tuple[str, frozenset[str]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                kind, labels = samples.get(sample.name, (family.type, frozenset()))
                samples[sample.name] = (kind, labels | set(sample.labels))
        return cls(samples)

    def labels(self, name: str) -> frozenset[str]:
        """The label names a sample carries, with those Prometheus adds."""
        return self.samples[name][1] | TARGET_LABELS
