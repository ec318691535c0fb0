"""The Grafana dashboards (deploy/grafana) read only series a real syshaxd serves.

A daemon on simulated engines answers one request (labelled histograms show up only once
observed), then its /metrics is the reference: every metric name in every panel's PromQL,
every label a selector matches on or a clause groups by, and every rate() over a counter or
histogram. Names are compared as samples, so ``syshax_requests`` (the family) or a gauge
written with ``_total`` fails where Prometheus would show an empty panel.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.promql import reads, template_reads
from tests.deploy.served import Served

GRAFANA = Path(__file__).resolve().parents[2] / "deploy" / "grafana"
DASHBOARDS = sorted(GRAFANA.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    """A dashboard as JSON (fails the test if it is not)."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside rows included."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel."""
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def problems(dashboard: dict[str, Any], served: Served) -> list[str]:
    """Every series, label or rate in ``dashboard`` that the daemon's /metrics does not back."""
    found = []
    for title, expr in expressions(dashboard):
        read = reads(expr)
        if not read.metrics:
            found.append(f"{title}: reads no metric: {expr}")
        for name in sorted(read.metrics - served.samples.keys()):
            found.append(f"{title}: {name} is not on /metrics")
        for name, labels in read.matchers.items():
            if name in served.samples and labels - served.labels(name):
                found.append(f"{title}: {name} has no label {sorted(labels - served.labels(name))}")
        known = {label for name in read.metrics if name in served.samples for label in served.labels(name)}
        if read.grouping - known:
            found.append(f"{title}: groups by {sorted(read.grouping - known)}, which none of its series has")
        for name in read.rated & served.samples.keys():
            if served.samples[name][0] not in ("counter", "histogram"):
                found.append(f"{title}: rate of {name}, a {served.samples[name][0]}")
        if "histogram_quantile" in expr and not all(n.endswith("_bucket") for n in read.metrics):
            found.append(f"{title}: histogram_quantile over {sorted(read.metrics)}, not only _bucket series")
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            metrics, label = template_reads(query)
            for name in sorted(metrics - served.samples.keys()):
                found.append(f"variable {variable['name']}: {name} is not on /metrics")
            if label and any(name in served.samples and label not in served.labels(name) for name in metrics):
                found.append(f"variable {variable['name']}: no label {label}")
    return found


def test_there_is_a_dashboard_for_one_box_and_one_for_the_fleet() -> None:
    assert {load(path)["uid"] for path in DASHBOARDS} == {"syshax-box", "syshax-fleet"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_the_dashboard_is_json_with_unique_panel_ids_and_a_query_in_every_panel(path: Path) -> None:
    dashboard = load(path)
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    for panel in panels(dashboard):
        assert panel["type"] == "row" or panel.get("targets"), f"{panel['title']} queries nothing"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_is_templated_by_instance(path: Path) -> None:
    dashboard = load(path)
    assert "instance" in {v["name"] for v in dashboard["templating"]["list"]}
    for title, expr in expressions(dashboard):
        for name in reads(expr).metrics:
            assert expr.count('instance=~"$instance"') >= expr.count(name), f"{title}: {name} not filtered by $instance"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_series_the_dashboard_reads_is_served_by_a_real_daemon(path: Path, served: Served) -> None:
    assert not problems(load(path), served), "\n".join(problems(load(path), served))


def test_the_check_names_a_family_a_misspelt_label_a_gauge_rate_and_a_foreign_series(served: Served) -> None:
    dashboard = {"templating": {"list": []}, "panels": [{"id": 1, "title": "t", "targets": [
        {"expr": 'sum(rate(syshax_requests{instance=~"$instance"}[5m]))'},
        {"expr": 'syshax_inflight{instance=~"$instance", device="gpu"}'},
        {"expr": 'sum by (device) (syshax_queue_depth{instance=~"$instance"})'},
        {"expr": 'rate(syshax_queue_depth{instance=~"$instance"}[5m])'},
        {"expr": 'up{instance=~"$instance"}'},
    ]}]}
    found = "\n".join(problems(dashboard, served))
    for expected in ("syshax_requests is not on", "syshax_inflight has no label ['device']", "groups by ['device']",
                     "rate of syshax_queue_depth, a gauge", "up is not on"):
        assert expected in found, found
