"""The import contracts of pyproject.toml (``lint-imports``, run by ``make lint``) hold for the
package, and they break on an import that breaks the layering: a client in the pure core, an
upward import, a cycle between modules of one package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the project's contracts on the package copied to ``tree``."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", str(tree / "pyproject.toml")],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(
        REPO / "pipeline", tmp_path / "pipeline", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _add_import(tree: Path, module: str, line: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    text = path.read_text()
    marker = "from __future__ import annotations\n"
    path.write_text(text.replace(marker, marker + line + "\n", 1))


def test_the_package_keeps_every_contract(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        ("pipeline.worker.streams", "import confluent_kafka", "imports no Kafka"),
        ("pipeline.asr.session", "import redis", "imports no Kafka"),
        ("pipeline.contracts.messages", "import prometheus_client", "imports no Kafka"),
        ("pipeline.worker.intake", "import pipeline.worker.loop", "Layers"),
        ("pipeline.runtime.recovery", "import pipeline.worker.committer", "Layers"),
        ("pipeline.worker.admission", "import pipeline.worker.book", "No import cycle"),
    ],
)
def test_an_import_that_breaks_the_layering_fails_the_lint(
    tree: Path, module: str, line: str, broken: str
) -> None:
    _add_import(tree, module, line)
    result = _lint(tree)
    assert result.returncode != 0
    report = result.stdout
    assert "BROKEN" in report
    assert any(broken in row and "BROKEN" in row for row in report.splitlines()), report
