"""A failed discovery says why nodes refused: most common reasons first, cut short."""

from collections import Counter

from server.discovery import refusal_summary


def test_no_refusals_add_nothing() -> None:
    assert refusal_summary(Counter()) == ""


def test_reasons_most_common_first_with_counts_and_the_rest_counted() -> None:
    reasons = Counter({"rare": 1, "common": 98, "middle": 5, "odd": 2, "last": 1})
    text = refusal_summary(reasons)
    assert text.startswith(": 98 x common; 5 x middle; 2 x odd")
    assert text.endswith("; and 2 other reason(s) in the log")


def test_a_long_multiline_reason_is_one_short_line() -> None:
    reason = "pathological partitioning is impossible\n" + "x" * 5000
    text = refusal_summary(Counter({reason: 100}))
    assert "\n" not in text
    assert text.startswith(": 100 x pathological partitioning is impossible x")
    assert text.endswith("...") and len(text) < 700
