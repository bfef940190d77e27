"""Building ``django-memoryhub`` the way a user of the repository would, from a copy of its
source: setuptools writes its ``build/`` directory inside the tree it builds, so two
builds of the working tree at once (two test workers) remove each other's files."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: What is not source: the embedded servers' data (written while the suite runs, so a
#: build walking the tree could meet a file that vanishes), environments, builds.
NOT_SOURCE = shutil.ignore_patterns(
    ".memoryhub",
    ".venv",
    "build",
    "dist",
    "site",
    "*.egg-info",
    "test-artifacts",
    "mutants",
    "__pycache__",
    ".git",
)


def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory holding the wheel and the sdist built from a private copy of the tree."""
    out = tmp_path_factory.mktemp("dist")
    source = tmp_path_factory.mktemp("source") / "tree"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    return out
