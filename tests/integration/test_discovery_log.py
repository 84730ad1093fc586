"""Discovery's log line stays one short line with 1,000 nodes."""

from __future__ import annotations

from server.discovery import _ranges, _sizes


def test_partition_ids_collapse_into_runs() -> None:
    assert _ranges(list(range(1000))) == "[0..999]"
    assert _ranges([0, 1, 2, 4, 6, 7]) == "[0..2, 4, 6..7]"
    assert _ranges([]) == "[]"


def test_sizes_are_listed_for_few_nodes_and_summarised_for_many() -> None:
    assert _sizes([3, 4, 5]) == "[3, 4, 5]"
    assert _sizes([1] * 563 + [2] * 437) == "min 1, mean 1.4, max 2"
