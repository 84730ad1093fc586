"""The verdict rule (experiments/lib/verdict.py): paired t-interval and its labels."""

from __future__ import annotations

import math

import pytest

from experiments.lib.verdict import (
    NOT_REPRODUCED,
    NOT_RESOLVED,
    REPRODUCED,
    all_of,
    paired_verdict,
    seeds_needed,
    t_interval,
)


def test_t_interval_matches_the_textbook_value() -> None:
    # differences 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.302652729911275
    mean, low, high = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)
    assert mean == pytest.approx(2.0)
    assert (low, high) == pytest.approx((2.0 - half, 2.0 + half))


def test_pairs_by_seed_not_by_position() -> None:
    a = {0: 50.0, 1: 60.0, 2: 70.0}
    b = {2: 68.0, 0: 48.0, 1: 58.0}  # every seed: a - b = 2
    v = paired_verdict(a, b, "greater")
    assert v.differences == (2.0, 2.0, 2.0)
    assert v.label == REPRODUCED
    # unpaired seeds are ignored, not guessed
    v = paired_verdict({**a, 7: 0.0}, b, "greater")
    assert v.seeds == (0, 1, 2)


def test_large_consistent_effect_with_three_seeds() -> None:
    a = {0: 40.0, 1: 41.5, 2: 39.0}
    b = {0: 37.0, 1: 38.0, 2: 36.5}
    assert paired_verdict(a, b, "greater").label == REPRODUCED
    assert paired_verdict(a, b, "less").label == NOT_REPRODUCED


def test_interval_containing_zero_is_not_resolved() -> None:
    a = {0: 40.0, 1: 38.0, 2: 43.0, 3: 37.0, 4: 42.0}
    b = {0: 39.0, 1: 40.0, 2: 40.0, 3: 38.0, 4: 41.0}
    v = paired_verdict(a, b, "greater")
    assert v.low < 0 < v.high
    assert v.label == NOT_RESOLVED


def test_small_effect_needs_five_seeds() -> None:
    # +0.5 on every seed: the interval excludes 0, but 3 seeds are too few
    a3 = {s: 30.5 + s for s in range(3)}
    b3 = {s: 30.0 + s for s in range(3)}
    v = paired_verdict(a3, b3, "greater")
    assert v.min_seeds == 5
    assert v.label == NOT_RESOLVED
    assert "needs 5" in v.reason
    a5 = {s: 30.5 + s + 0.01 * (s % 2) for s in range(5)}
    b5 = {s: 30.0 + s for s in range(5)}
    assert paired_verdict(a5, b5, "greater").label == REPRODUCED
    assert seeds_needed(1.0) == 3 and seeds_needed(-0.99) == 5


def test_two_seeds_never_decide() -> None:
    v = paired_verdict({0: 90.0, 1: 91.0}, {0: 10.0, 1: 11.0}, "greater")
    assert v.label == NOT_RESOLVED


def test_equal_claim_uses_the_margin() -> None:
    a = {s: 50.0 + 0.1 * (s % 2) for s in range(5)}
    b = {s: 50.0 for s in range(5)}
    assert paired_verdict(a, b, "equal", margin=1.0).label == REPRODUCED
    far = {s: 55.0 + 0.1 * (s % 2) for s in range(5)}
    assert paired_verdict(far, b, "equal", margin=1.0).label == NOT_REPRODUCED
    noisy = {0: 51.5, 1: 49.0, 2: 50.8, 3: 49.5, 4: 50.2}
    assert paired_verdict(noisy, b, "equal", margin=1.0).label == NOT_RESOLVED


def test_text_and_dict() -> None:
    v = paired_verdict({0: 3.0, 1: 4.0, 2: 5.0}, {0: 1.0, 1: 1.0, 2: 1.0}, "greater")
    assert v.text().startswith("reproduced: +3.00 points, 95% CI [")
    assert v.to_dict()["ci95"] == [v.low, v.high]


@pytest.mark.parametrize(
    ("a", "b", "direction", "margin", "match"),
    [
        ({0: 1.0}, {0: 1.0}, "better", 0.0, "direction='better'"),
        ({0: 1.0}, {0: 1.0}, "equal", 0.0, "margin=0.0"),
        ({0: 1.0}, {0: 1.0}, "greater", 1.0, "only an 'equal' claim"),
        ({0: 1.0}, {1: 1.0}, "greater", 0.0, "no seed in both"),
        ({0: math.nan}, {0: 1.0}, "greater", 0.0, "must be finite"),
    ],
)
def test_bad_input_names_the_value(a, b, direction, margin, match) -> None:
    with pytest.raises(ValueError, match=match):
        paired_verdict(a, b, direction, margin=margin)


def test_a_claim_over_several_comparisons_needs_every_one() -> None:
    up = paired_verdict({0: 3.0, 1: 4.0, 2: 5.0}, {0: 1.0, 1: 1.0, 2: 1.0}, "greater")
    down = paired_verdict({0: 1.0, 1: 1.0, 2: 1.0}, {0: 3.0, 1: 4.0, 2: 5.0}, "greater")
    open_ = paired_verdict({0: 1.0, 1: 2.0}, {0: 0.0, 1: 0.0}, "greater")
    assert all_of({"CSQ": up, "DPSH": up}) == (
        REPRODUCED,
        "reproduced against every comparison",
    )
    assert all_of({"CSQ": up, "DCH": open_})[0] == NOT_RESOLVED
    assert all_of({"CSQ": up, "DCH": open_, "X": down}) == (
        NOT_REPRODUCED,
        "not reproduced against X",
    )
    with pytest.raises(ValueError, match="no comparison"):
        all_of({})


def test_claims_pick_rows_by_filters_and_read_nested_metrics() -> None:
    from experiments.claims import claim, parse_filter

    rows = [
        {
            "method": m,
            "partitioning": "iid",
            "seed": s,
            "map_all": v + s / 100,
            "map_per_round": {"5": v - 0.1 + s / 100},
        }
        for m, v in (("FedHAP", 0.72), ("DCH (FedAvg)", 0.70))
        for s in (0, 1, 2)
    ]
    rows.append(
        {"method": "FedHAP", "partitioning": "non-iid", "seed": 0, "map_all": 0.1}
    )
    where = [parse_filter("partitioning=iid")]
    a, b = [parse_filter("method=FedHAP")], [parse_filter("method=DCH (FedAvg)")]
    v = claim(rows, a, b, where=where)
    assert v.differences == pytest.approx((2.0, 2.0, 2.0))
    assert claim(rows, a, b, where=where, metric="map_per_round.5").seeds == (0, 1, 2)
    # a first look's seeds, in a folder that holds more
    assert claim(rows, a, b, where=where, seeds=[0, 2]).seeds == (0, 2)
    with pytest.raises(ValueError, match="two rows match"):
        claim(rows, a, b)  # without the partitioning FedHAP has two rows at seed 0
    with pytest.raises(ValueError, match="accepted is key=value"):
        parse_filter("FedHAP")


def test_a_second_look_takes_a_wider_interval() -> None:
    # five more seeds after a not-resolved verdict: the same differences that a
    # first look calls reproduced are not resolved at the second look's 97.5%
    diffs = [0.83, 0.03, 0.53, -0.27, 0.43, 0.73, -0.07, 0.63, -0.17, 0.33]
    a = {s: 50.0 + d for s, d in enumerate(diffs)}
    b = dict.fromkeys(range(10), 50.0)
    first = paired_verdict(a, b, "greater")
    second = paired_verdict(a, b, "greater", look=2)
    assert first.mean == second.mean
    assert second.low < first.low and second.high > first.high
    assert first.label == REPRODUCED and second.label == NOT_RESOLVED
    assert second.text().startswith("not resolved: +0.30 points, 97.5% CI [")
    assert second.text().endswith("10 paired seeds, second look")
    assert second.to_dict()["ci97.5"] == [second.low, second.high]
    assert second.to_dict()["confidence"] == 0.975
    assert "confidence" not in first.to_dict()
    with pytest.raises(ValueError, match="look=3: accepted are 1 and 2"):
        paired_verdict(a, b, "greater", look=3)


def test_claims_cli_refuses_seeds_that_are_not_integers(tmp_path, capsys) -> None:
    from experiments.claims import main

    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"method": "a", "seed": 0, "map_all": 0.5}\n')
    with pytest.raises(SystemExit):
        main([str(rows), "--a", "method=a", "--b", "method=b", "--seeds", "0,x"])
    assert (
        "--seeds: 'x' in '0,x'; accepted: comma-separated integers >= 0"
        in capsys.readouterr().err
    )
