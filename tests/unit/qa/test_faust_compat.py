"""The QA app's faust/aiokafka workarounds run only on the versions they were tested with."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

from pipeline.errors import ConfigError
from pipeline.qa.faust_compat import TESTED_VERSIONS, check_versions

REPO = Path(__file__).resolve().parents[3]


def test_the_installed_versions_are_the_tested_ones() -> None:
    check_versions()  # raises otherwise
    for name, version in TESTED_VERSIONS.items():
        assert importlib.metadata.version(name) == version


def test_another_faust_version_is_refused_in_one_clear_line() -> None:
    with pytest.raises(
        ConfigError, match=r"faust-streaming 0\.16\.0 .* install faust-streaming==0\.15\.3"
    ):
        check_versions({**TESTED_VERSIONS, "faust-streaming": "0.16.0"})
    with pytest.raises(ConfigError, match=r"aiokafka \(not installed\)"):
        check_versions({**TESTED_VERSIONS, "aiokafka": None})


def test_pyproject_allows_exactly_the_tested_versions() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = {
        found.group(1): found.group(2)
        for requirement in project["dependencies"]
        if (found := re.fullmatch(r"([a-z-]+)==(\S+)", requirement)) is not None
    }
    for name, version in TESTED_VERSIONS.items():
        assert pins.get(name) == version, f"pyproject.toml must pin {name}=={version}"
