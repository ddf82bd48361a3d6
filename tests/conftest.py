"""Shared test configuration: repository paths and the schema validator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = REPO / "schemas"
FIXTURES = REPO / "tests" / "fixtures"


def load_schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    return schema


def validate(name: str, record: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError if ``record`` breaks ``schemas/<name>.schema.json``."""
    Draft202012Validator(load_schema(name)).validate(record)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
