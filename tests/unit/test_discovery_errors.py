"""A failed discovery says why nodes refused: most common reasons first, cut short."""

from collections import Counter

from server.discovery import refusal_reason, refusal_summary


def test_no_refusals_add_nothing() -> None:
    assert refusal_summary(Counter()) == ""


def test_reasons_most_common_first_with_counts_and_the_rest_counted() -> None:
    reasons = Counter({"rare": 1, "common": 98, "middle": 5, "odd": 2, "last": 1})
    text = refusal_summary(reasons)
    assert text.startswith(": 98 x common; 5 x middle; 2 x odd")
    assert text.endswith("; and 2 other reason(s) in the log")


def test_a_long_traceback_keeps_its_message_and_counts_as_one_reason() -> None:
    """Each node's traceback starts with its own pid; the message ends it."""
    message = "pathological partitioning ... is impossible for this data"

    def traceback(pid: int) -> str:
        return f"ray::ClientAppActor.run() (pid={pid})\n" + "  File x\n" * 300 + message

    short = refusal_reason(traceback(1))
    assert "\n" not in short and short.startswith("...") and len(short) == 400
    assert short.endswith(message)
    reasons = Counter(refusal_reason(traceback(pid)) for pid in range(100))
    assert refusal_summary(reasons) == f": 100 x {short}"
    assert refusal_reason("short\n  reason") == "short reason"
