"""Which series a PromQL expression reads: metric names, the labels it matches on and groups by.

Enough of PromQL for the dashboards' expressions (selectors, ranges, aggregations with
``by``/``without``, vector matching, functions, strings, Grafana's ``$variables``); not a
full parser. A name is taken as written: ``rate(x_total[5m])`` reads the sample name
``x_total``, ``histogram_quantile(0.9, ... x_bucket ...)`` reads ``x_bucket``, so they are
compared with the *sample* names of an exposition, where a counter's samples end in
``_total`` and a histogram's in ``_bucket``, ``_sum`` and ``_count``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SELECTOR = re.compile(rf"({_NAME})?\s*\{{([^}}]*)\}}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_TOKEN = re.compile(rf"(?<![\w.:$]){_NAME}")
_RATE = re.compile(rf"\b(?:rate|irate|increase|delta|idelta|deriv)\s*\(\s*({_NAME})")
#: Words that are not metric names where a name could stand.
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                      "group_left", "group_right", "inf", "nan", "atan2", "start", "end"})


@dataclass
class Reads:
    """What one expression reads."""

    #: Metric (sample) names, as written.
    metrics: set[str] = field(default_factory=set)
    #: Metric name -> label names its selectors match on.
    matchers: dict[str, set[str]] = field(default_factory=dict)
    #: Label names in by/without/on/ignoring/group_left/group_right clauses.
    grouping: set[str] = field(default_factory=set)
    #: Names whose rate, increase (or the like) is taken.
    rated: set[str] = field(default_factory=set)


def reads(expr: str) -> Reads:
    """The metric names, matcher labels and grouping labels of ``expr``."""
    found = Reads()
    text = _STRING.sub('""', expr)
    found.rated = set(_RATE.findall(text))

    def selector(match: re.Match[str]) -> str:
        name = match.group(1) or ""
        labels = set(_MATCHER.findall(match.group(2)))
        if name:
            found.matchers.setdefault(name, set()).update(labels)
        return f" {name} "

    text = _SELECTOR.sub(selector, text)
    text = _RANGE.sub(" ", text)

    def grouping(match: re.Match[str]) -> str:
        found.grouping.update(label.strip() for label in match.group(2).split(",") if label.strip())
        return " "

    text = _GROUPING.sub(grouping, text)
    for token in _TOKEN.finditer(text):
        name = token.group(0)
        if name.lower() in KEYWORDS or text[token.end() :].lstrip().startswith("("):
            continue
        found.metrics.add(name)
    return found


_LABEL_VALUES = re.compile(rf"label_values\(\s*({_NAME})?\s*(\{{[^}}]*\}})?\s*,\s*([a-zA-Z_]\w*)\s*\)")


def template_reads(query: str) -> tuple[set[str], str | None]:
    """A Grafana variable's ``label_values(metric{...}, label)``: the metrics it reads and the label."""
    match = _LABEL_VALUES.search(query)
    if match is None:
        return reads(query.replace("query_result(", "(")).metrics, None
    selector = f"{match.group(1) or ''}{match.group(2) or ''}"
    return reads(selector).metrics, match.group(3)
