"""The slowest test files start first under ``make test`` (``tests/conftest.py``)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import SLOWEST_FIRST, file_rank

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


def test_every_listed_file_exists_once():
    # a renamed or deleted file would silently fall back to pytest's order
    missing = [p for p in SLOWEST_FIRST if not (TESTS / p).is_file()]
    assert not missing, f"SLOWEST_FIRST names files that do not exist: {missing}"
    assert len(set(SLOWEST_FIRST)) == len(SLOWEST_FIRST)


def test_listed_files_rank_in_order_before_the_rest():
    ranks = [file_rank(p) for p in SLOWEST_FIRST]
    assert ranks == sorted(ranks) == list(range(len(SLOWEST_FIRST)))
    assert file_rank("unit/test_metrics.py") == len(SLOWEST_FIRST)


def test_the_workers_keep_pytests_file_order():
    # xdist's default (--loadscope-reorder) hands out files by test count, which
    # would undo the order above
    xdist = re.search(r"^XDIST = (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert xdist, "Makefile: no XDIST line"
    assert "--dist loadfile" in xdist.group(1)
    assert "--no-loadscope-reorder" in xdist.group(1)
