"""The verdict rule: paired differences over seeds, a 95% t-interval, one label.

Every "claims" section of the method pages decides its verdicts with
:func:`paired_verdict` (docs/methods/verdicts.md states the rule in words):

1. Pair the two methods' runs by seed (same seed = same split, partitioning and
   initialisation) and take the per-seed difference ``d_s = a_s - b_s`` in points
   (percent), ``a`` being the method the claim names first.
2. Mean ``d`` and its two-sided 95% Student-t interval,
   ``mean +- t(0.975, n - 1) * sd / sqrt(n)`` (``sd`` the sample standard deviation
   of the differences, ``n`` the number of paired seeds).
3. Enough seeds: at least :data:`MIN_SEEDS` (3), and at least
   :data:`MIN_SEEDS_SMALL_EFFECT` (5) when ``|mean| <`` :data:`SMALL_EFFECT` (1
   point). With fewer the verdict is "not resolved", whatever the interval.
4. The label, for a claim in a direction (``"greater"``: a > b; ``"less"``: a < b):
   "reproduced" when the interval excludes 0 on the claim's side, "not reproduced"
   when it excludes 0 on the other side, "not resolved" when it contains 0. For a
   claim of no difference (``"equal"``, within ``margin`` points): "reproduced" when
   the interval lies inside ``[-margin, margin]``, "not reproduced" when it lies
   wholly outside it, "not resolved" otherwise.
5. A claim over several comparisons ("above every baseline"): "reproduced" when
   every comparison is, "not reproduced" when any is, "not resolved" otherwise
   (:func:`all_of`).
6. A second look: a "not resolved" comparison may get one block of more seeds,
   fixed before any of them runs; the verdict over all the seeds (``look=2``) then
   takes a :data:`SECOND_LOOK_CONFIDENCE` (97.5%) interval, so the two looks
   together give a wrong "reproduced" or "not reproduced" at most 5% + 2.5% of the
   time (Bonferroni). No third look.

Pure functions: no I/O, no state. The t quantile is SciPy's.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from scipy.stats import t as student_t

from experiments.lib.tables import paired_interval

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_RESOLVED = "not resolved"
#: The claim directions :func:`paired_verdict` accepts.
DIRECTIONS = ("greater", "less", "equal")
#: Fewest paired seeds for any verdict.
MIN_SEEDS = 3
#: Fewest paired seeds when the mean difference is below :data:`SMALL_EFFECT`.
MIN_SEEDS_SMALL_EFFECT = 5
#: An effect under this many points needs :data:`MIN_SEEDS_SMALL_EFFECT` seeds.
SMALL_EFFECT = 1.0
#: Coverage of the interval.
CONFIDENCE = 0.95
#: Coverage of the interval at the second look (rule 6), the only other one.
SECOND_LOOK_CONFIDENCE = 0.975
#: Interval coverage per look (rule 6).
LOOK_CONFIDENCE = {1: CONFIDENCE, 2: SECOND_LOOK_CONFIDENCE}


@dataclass(frozen=True)
class Verdict:
    """A paired comparison and its label.

    Attributes
    ----------
    label : str
        :data:`REPRODUCED`, :data:`NOT_REPRODUCED` or :data:`NOT_RESOLVED`.
    direction : str
        The claim: ``"greater"`` (a > b), ``"less"`` (a < b) or ``"equal"``.
    seeds : tuple of int
        The paired seeds, sorted.
    differences : tuple of float
        ``a - b`` per seed, in points, in the order of ``seeds``.
    mean, low, high : float
        Mean difference and its 95% t-interval, in points (``low = high = mean``
        with one seed, where no interval exists).
    min_seeds : int
        Seeds this effect size needs (3, or 5 under 1 point).
    reason : str
        Why the label (one sentence).
    margin : float
        The equivalence margin of an ``"equal"`` claim (0 otherwise).
    confidence : float
        Coverage of the interval: 0.95, or 0.975 at a second look (rule 6).
    """

    label: str
    direction: str
    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    mean: float
    low: float
    high: float
    min_seeds: int
    reason: str
    margin: float = 0.0
    confidence: float = CONFIDENCE

    def text(self) -> str:
        """One line for a claims section, e.g. ``reproduced: +1.20 points ...``."""
        interval = paired_interval(
            self.mean, self.low, self.high, confidence=self.confidence
        )
        look = ", second look" if self.confidence != CONFIDENCE else ""
        return f"{self.label}: {interval}, {len(self.seeds)} paired seeds{look}"

    def to_dict(self) -> dict[str, object]:
        """JSON-able form (``summary.json``); a second look adds ``confidence``."""
        second = self.confidence != CONFIDENCE
        return {
            "label": self.label,
            "direction": self.direction,
            "seeds": list(self.seeds),
            "differences": list(self.differences),
            "mean": self.mean,
            ci_key(self.confidence): [self.low, self.high],
            **({"confidence": self.confidence} if second else {}),
            "min_seeds": self.min_seeds,
            "margin": self.margin,
            "reason": self.reason,
        }


def ci_key(confidence: float) -> str:
    """Return the interval's key in :meth:`Verdict.to_dict`: ``ci95``, ``ci97.5``."""
    return f"ci{confidence * 100:g}"


def t_interval(
    differences: list[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """Mean and two-sided Student-t interval (95% by default) of paired differences.

    Returns ``(mean, low, high)``; with one value the interval is the point.

    Raises
    ------
    ValueError
        No value, or a value that is not finite.
    """
    if not differences:
        raise ValueError("no paired differences: need at least one seed in both")
    if not all(math.isfinite(d) for d in differences):
        raise ValueError(f"paired differences {differences!r}: all must be finite")
    n = len(differences)
    mean = statistics.fmean(differences)
    if n == 1:
        return mean, mean, mean
    half = (
        float(student_t.ppf(0.5 + confidence / 2, n - 1))
        * statistics.stdev(differences)
        / math.sqrt(n)
    )
    return mean, mean - half, mean + half


def seeds_needed(mean: float) -> int:
    """Paired seeds an effect of ``mean`` points needs (rule 3)."""
    return MIN_SEEDS_SMALL_EFFECT if abs(mean) < SMALL_EFFECT else MIN_SEEDS


def paired_verdict(
    a: Mapping[int, float],
    b: Mapping[int, float],
    direction: str,
    *,
    margin: float = 0.0,
    look: int = 1,
) -> Verdict:
    """Decide a claim about ``a`` against ``b`` from per-seed scores in points.

    Parameters
    ----------
    a, b : mapping of int to float
        Seed -> score in points (e.g. mAP in percent) of the method the claim
        names first (``a``) and of the other (``b``). Only seeds in both count.
    direction : str
        ``"greater"``: the claim is a > b; ``"less"``: a < b; ``"equal"``: a and b
        differ by less than ``margin`` points.
    margin : float
        The equivalence margin in points, > 0, for ``"equal"`` only.
    look : int
        1, or 2 for the verdict after one block of seeds added to a "not resolved"
        one (rule 6: a 97.5% interval).

    Returns
    -------
    Verdict

    Raises
    ------
    ValueError
        Unknown direction, a margin that does not fit the direction, no common
        seed, or a score that is not finite.
    """
    if direction not in DIRECTIONS:
        raise ValueError(
            f"direction={direction!r}: accepted are {', '.join(DIRECTIONS)}"
        )
    if direction == "equal" and not (math.isfinite(margin) and margin > 0):
        raise ValueError(
            f"margin={margin!r}: an 'equal' claim needs a finite margin > 0 points"
        )
    if direction != "equal" and margin != 0.0:
        raise ValueError(
            f"margin={margin!r}: only an 'equal' claim takes a margin (got "
            f"direction={direction!r})"
        )
    if look not in LOOK_CONFIDENCE:
        raise ValueError(
            f"look={look!r}: accepted are 1 and 2 (one block of seeds added, no more)"
        )
    confidence = LOOK_CONFIDENCE[look]
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        raise ValueError(
            f"no seed in both: a has {sorted(a)}, b has {sorted(b)}; pair runs by seed"
        )
    diffs = tuple(float(a[s]) - float(b[s]) for s in seeds)
    mean, low, high = t_interval(list(diffs), confidence)
    need = seeds_needed(mean)
    if len(seeds) < need:
        label = NOT_RESOLVED
        reason = (
            f"{len(seeds)} paired seeds; an effect of {abs(mean):.2f} points needs "
            f"{need}"
        )
    elif direction == "equal":
        if -margin < low and high < margin:
            label, reason = REPRODUCED, f"the interval lies within +-{margin:g} points"
        elif low >= margin or high <= -margin:
            label, reason = NOT_REPRODUCED, f"the interval lies beyond +-{margin:g}"
        else:
            label, reason = NOT_RESOLVED, f"the interval straddles +-{margin:g} points"
    else:
        sign = 1.0 if direction == "greater" else -1.0
        if sign * low > 0 and sign * high > 0:
            label, reason = REPRODUCED, "the interval excludes 0 on the claim's side"
        elif sign * low < 0 and sign * high < 0:
            label, reason = NOT_REPRODUCED, "the interval excludes 0 on the other side"
        else:
            label, reason = NOT_RESOLVED, "the interval contains 0"
    return Verdict(
        label=label,
        direction=direction,
        seeds=seeds,
        differences=diffs,
        mean=mean,
        low=low,
        high=high,
        min_seeds=need,
        reason=reason,
        margin=margin,
        confidence=confidence,
    )


def all_of(verdicts: Mapping[str, Verdict]) -> tuple[str, str]:
    """Combine the comparisons of one claim (rule 5); return ``(label, why)``.

    Parameters
    ----------
    verdicts : mapping of str to Verdict
        Comparison name (e.g. the baseline) -> its verdict.

    Raises
    ------
    ValueError
        No comparison.
    """
    if not verdicts:
        raise ValueError("no comparison to combine")
    against = {name: v.label for name, v in verdicts.items()}
    failed = [n for n, label in against.items() if label == NOT_REPRODUCED]
    if failed:
        return NOT_REPRODUCED, f"not reproduced against {', '.join(failed)}"
    open_ = [n for n, label in against.items() if label == NOT_RESOLVED]
    if open_:
        return NOT_RESOLVED, f"not resolved against {', '.join(open_)}"
    return REPRODUCED, "reproduced against every comparison"
