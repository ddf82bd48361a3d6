"""The exception tree drawn in ``pipeline.errors`` is the tree the package raises."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pipeline
from pipeline import errors


def _drawn_parents() -> dict[str, str]:
    """Each class drawn in the docstring's tree → the class drawn above it, one level up."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (column, name) of the open branches
    for line in (errors.__doc__ or "").splitlines():
        drawn = re.match(r"[\s│]*(?:[├└]── )?([A-Z]\w*Error)\b", line)
        if drawn is None:
            continue
        column = drawn.start(1)
        while stack and stack[-1][0] >= column:
            stack.pop()
        if stack:
            parents[drawn.group(1)] = stack[-1][1]
        stack.append((column, drawn.group(1)))
    return parents


def _public_subclasses(root: type[Exception]) -> set[type[Exception]]:
    found: set[type[Exception]] = set()
    for sub in root.__subclasses__():
        if not sub.__name__.startswith("_"):
            found |= {sub} | _public_subclasses(sub)
    return found


def test_every_public_error_class_is_drawn_under_its_parent() -> None:
    for module in pkgutil.walk_packages(pipeline.__path__, "pipeline."):
        if module.name != "pipeline.__main__":
            importlib.import_module(module.name)
    drawn = _drawn_parents()
    for error in _public_subclasses(errors.StreamscribeError):
        assert drawn.get(error.__name__) == error.__mro__[1].__name__, error.__name__
