"""mypy --strict on the package (skipped where mypy is not installed)."""

from __future__ import annotations

import os

import pytest

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_mypy_strict() -> None:
    api = pytest.importorskip("mypy.api")
    stdout, stderr, status = api.run(["--strict", "--cache-dir", os.devnull, PACKAGE])
    assert status == 0, stdout + stderr
