"""Metric names out of PromQL expressions, to check alerts and dashboards against the catalogue.

Not a PromQL parser: it blanks strings, label matchers, range selectors, grouping clauses and
Grafana variables, then takes every remaining identifier that is neither a function call nor a
keyword. That is enough for the expressions we write, and it errs towards finding too many names.
"""

from __future__ import annotations

import re

from pipeline.ingress.metrics import INGRESS_CATALOGUE
from pipeline.qa.metrics import QA_CATALOGUE
from pipeline.runtime.metrics import CATALOGUE

# Series Prometheus itself makes for every target.
PROMETHEUS_SERIES = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})

KNOWN_SERIES = frozenset(
    {name for spec in (*CATALOGUE, *QA_CATALOGUE, *INGRESS_CATALOGUE) for name in spec.series_names}
    | PROMETHEUS_SERIES
)

_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
    | {"group_left", "group_right", "inf", "nan"}
)
_BLANKED = (
    re.compile(r'"(?:[^"\\]|\\.)*"'),
    re.compile(r"'(?:[^'\\]|\\.)*'"),
    re.compile(r"\$\{[^}]*\}|\$\w+"),
    re.compile(r"\{[^}]*\}"),
    re.compile(r"\[[^\]]*\]"),
    re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"),
)
_IDENTIFIER = re.compile(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Every metric (series) name an expression selects."""
    text = expr
    for pattern in _BLANKED:
        text = pattern.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        if text[match.end() :].lstrip().startswith("("):
            continue
        if match.group().lower() in _KEYWORDS:
            continue
        names.add(match.group())
    return names
