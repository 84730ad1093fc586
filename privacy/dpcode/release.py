"""One client's DPcode release, the non-private ground truth, and the server merge.

:func:`dpcode_release` is the pure entry point the Flower glue calls once per
client: frames (or transactions) in, a :class:`Release` out. Its
``epsilon_spent`` is the epsilon of the mechanism as implemented, per frame
(neighbours: one frame, with all its primitives, added or removed), delta 0:
the sum of the steps that ran (``components``), each calibrated to the
sensitivity it really has (``phase1.py``, ``fptree.py``). It is at most the
``epsilon`` asked for. The frame count is not part of the release.

:func:`merge_releases` is server-side post-processing of per-client releases.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from privacy.dpcode.fptree import noisy_supports
from privacy.dpcode.itemsets import (
    Pattern,
    exact_top_k,
    kth_support,
    n_candidates,
    pattern_order,
)
from privacy.dpcode.phase1 import run_phase1
from privacy.dpcode.primitives import (
    Frames,
    HadamardCodebook,
    Transactions,
    frames_to_transactions,
)
from privacy.noise import NoiseSource

UNIT_FRAME = "per frame"
"""Neighbouring clients differ by one frame (all its primitives) added or removed."""

PRIMITIVE_NOISE = ("paper", "off")
INFREQUENT = ("laplace", "prune")

ClientData = Transactions | Frames | NDArray[Any] | Sequence[NDArray[Any]]


@dataclass(frozen=True)
class Release:
    """A published top-k pattern list with its privacy guarantee.

    Attributes
    ----------
    patterns : tuple of tuple of int
        Published patterns (sorted word ids), by noisy support descending.
    supports : tuple of float
        Their noisy supports.
    epsilon_spent : float
        Epsilon of the release as implemented, in ``unit``.
    unit : str
        ``"per frame"``.
    delta : float
        0 (pure DP).
    mechanism : str
        ``"dpcode"``, ``"direct"``, ``"noisycut"`` or ``"merged"``.
    vocabulary : str
        The public codebook's name.
    k : int
        Patterns asked for (fewer may be published).
    max_length : int
        Longest pattern considered.
    components : dict
        Step -> epsilon it spent (they add up to ``epsilon_spent``).
    """

    patterns: tuple[Pattern, ...]
    supports: tuple[float, ...]
    epsilon_spent: float
    unit: str
    delta: float
    mechanism: str
    vocabulary: str
    k: int
    max_length: int
    components: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form (lists instead of tuples)."""
        return {
            "patterns": [list(p) for p in self.patterns],
            "supports": list(self.supports),
            "epsilon_spent": self.epsilon_spent,
            "unit": self.unit,
            "delta": self.delta,
            "mechanism": self.mechanism,
            "vocabulary": self.vocabulary,
            "k": self.k,
            "max_length": self.max_length,
            "components": dict(self.components),
        }

    @classmethod
    def per_frame(
        cls,
        mechanism: str,
        patterns: tuple[Pattern, ...],
        supports: tuple[float, ...],
        *,
        components: dict[str, float],
        vocabulary: str,
        k: int,
        max_length: int,
    ) -> Release:
        """Build a pure-DP release per frame whose epsilon is the sum of its steps."""
        return cls(
            patterns=patterns,
            supports=supports,
            epsilon_spent=float(sum(components.values())),
            unit=UNIT_FRAME,
            delta=0.0,
            mechanism=mechanism,
            vocabulary=vocabulary,
            k=k,
            max_length=max_length,
            components=components,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Release:
        """Inverse of :meth:`as_dict`."""
        return cls(
            patterns=tuple(tuple(int(w) for w in p) for p in data["patterns"]),
            supports=tuple(float(v) for v in data["supports"]),
            epsilon_spent=float(data["epsilon_spent"]),
            unit=str(data["unit"]),
            delta=float(data["delta"]),
            mechanism=str(data["mechanism"]),
            vocabulary=str(data["vocabulary"]),
            k=int(data["k"]),
            max_length=int(data["max_length"]),
            components={str(a): float(b) for a, b in data["components"].items()},
        )


def check_positive_int(name: str, value: object) -> int:
    """Return ``value`` if it is an integer >= 1, else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} {value!r}: accepted are integers >= 1")
    return int(value)


def check_epsilon(epsilon: object) -> float:
    """Return ``epsilon`` as a float if finite and > 0, else raise ``ValueError``."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float | np.floating):
        raise ValueError(f"epsilon {epsilon!r}: accepted are finite numbers > 0")
    value = float(epsilon)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"epsilon {epsilon!r}: accepted are finite numbers > 0")
    return value


def check_split(split: object) -> float:
    """Return ``split`` if it is a number strictly between 0 and 1."""
    if isinstance(split, bool) or not isinstance(split, int | float | np.floating):
        raise ValueError(f"split {split!r}: accepted are numbers in (0, 1)")
    value = float(split)
    if not 0.0 < value < 1.0:
        raise ValueError(
            f"split {split!r}: accepted are numbers in (0, 1) (the share of epsilon "
            "spent in phase 1)"
        )
    return value


def prepare(
    data: ClientData, codebook: HadamardCodebook | None
) -> tuple[Transactions, Frames | None]:
    """Validate a client's input; return its transactions (and frames, if given).

    Raises
    ------
    ValueError
        No frames; frames without a codebook; a codebook whose dim is not the
        descriptor size; transactions of another vocabulary than ``codebook``.
    """
    if isinstance(data, Transactions):
        if data.n_frames == 0:
            raise ValueError("empty client: no frames; accepted is at least one frame")
        if codebook is not None and codebook.name != data.vocabulary:
            raise ValueError(
                f"codebook {codebook.name} does not match the transactions' "
                f"vocabulary {data.vocabulary}: accepted is the same codebook or none"
            )
        return data, None
    if isinstance(data, np.ndarray) and data.ndim == 3 and data.shape[0] == 0:
        raise ValueError("empty client: no frames; accepted is at least one frame")
    if not isinstance(data, Frames | np.ndarray) and len(data) == 0:
        raise ValueError("empty client: no frames; accepted is at least one frame")
    frames = data if isinstance(data, Frames) else Frames.from_arrays(data)
    if frames.n_frames == 0:
        raise ValueError("empty client: no frames; accepted is at least one frame")
    if codebook is None:
        raise ValueError(
            "frames need a codebook: accepted is a public codebook "
            "(e.g. HadamardCodebook(dim)) whose dim is the descriptor size"
        )
    codebook.check_dim(frames.dim)
    return frames_to_transactions(frames, codebook), frames


def check_common(
    *,
    k: object,
    epsilon: object,
    max_length: object,
    max_words: object | None,
    n_words: int,
) -> tuple[int, float, int, int]:
    """Validate the parameters every mechanism shares; return them normalised."""
    k_ = check_positive_int("k", k)
    eps = check_epsilon(epsilon)
    length = check_positive_int("max_length", max_length)
    words = n_words if max_words is None else check_positive_int("max_words", max_words)
    words = min(words, n_words)
    total = n_candidates(n_words, length)
    if k_ > total:
        raise ValueError(
            f"k {k_}: accepted are 1..{total}, the number of candidate patterns "
            f"of length <= {length} over {n_words} words"
        )
    return k_, eps, length, words


def dpcode_budget(
    epsilon: float, split: float, *, infrequent: str = "laplace"
) -> dict[str, float]:
    """Split epsilon into the steps of the mechanism, as the paper does.

    Phase 1 gets ``eps_1 = split * epsilon``: half for the threshold (the paper's
    ``Lap(2 / eps_1)``), the other half for the frequent part (``eps_1f``: words
    and patterns, a quarter of ``eps_1`` each) or, with Eq. 6 on, shared equally
    between the frequent part and Eq. 6 (``eps_1f`` and ``eps_1f-bar``). Phase 2
    gets ``eps_2 = (1 - split) * epsilon``.
    """
    eps1 = split * epsilon
    rest = eps1 / 2
    if infrequent == "laplace":
        parts = {"words": rest / 4, "patterns": rest / 4, "infrequent": rest / 2}
    else:
        parts = {"words": rest / 2, "patterns": rest / 2, "infrequent": 0.0}
    return {"threshold": eps1 / 2, **parts, "supports": (1 - split) * epsilon}


def top_k_release(
    supports: Mapping[Pattern, float], k: int
) -> tuple[tuple[Pattern, ...], tuple[float, ...]]:
    """Return the k patterns with the largest (noisy) support, tie-stable."""
    ranked = sorted(supports.items(), key=lambda kv: pattern_order(kv[0], kv[1]))[:k]
    return tuple(p for p, _ in ranked), tuple(float(v) for _, v in ranked)


def maximal_patterns(frequent: Mapping[Pattern, float], limit: int) -> list[Pattern]:
    """Maximal elements of ``frequent``; at most ``limit``, by phase-1 count."""
    covered: set[Pattern] = set()
    for p in frequent:
        for j in range(1, len(p)):
            covered.update(itertools.combinations(p, j))
    maximal = [p for p in frequent if p not in covered]
    maximal.sort(key=lambda p: pattern_order(p, frequent[p]))
    return maximal[:limit]


def phase2(
    matrix: NDArray[np.bool_],
    frequent: Mapping[Pattern, float],
    *,
    order: Sequence[int],
    k: int,
    epsilon: float,
    noise: NoiseSource,
) -> tuple[tuple[Pattern, ...], tuple[float, ...], float]:
    """Noisy FP-trees of the (at most k) maximal patterns, then the top k.

    Returns the published patterns, their noisy supports and the epsilon spent
    (0 when there is no pattern to count).
    """
    maximal = maximal_patterns(frequent, k)
    if not maximal:
        return (), (), 0.0
    words = {w for p in maximal for w in p}
    full_order = [w for w in order if w in words] + sorted(words - set(order))
    estimates = noisy_supports(
        matrix, maximal, order=full_order, epsilon=epsilon, noise=noise
    )
    patterns, supports = top_k_release(estimates, k)
    return patterns, supports, epsilon


def dpcode_release(
    data: ClientData,
    *,
    k: int,
    epsilon: float,
    noise: NoiseSource,
    split: float = 0.65,
    codebook: HadamardCodebook | None = None,
    max_length: int = 3,
    max_words: int | None = None,
    primitive_noise: Literal["paper", "off"] = "paper",
    infrequent: Literal["laplace", "prune"] = "laplace",
    per_frame_shares: bool = False,
) -> Release:
    """DPcode for one client: the top-k frequent patterns with noisy supports.

    Parameters
    ----------
    data : Frames, (frames, n, d) array, list of (n_i, d) arrays, or Transactions
        The client's frames (primitives) or, for data without primitives (tags,
        hash-code chunks), its transactions.
    k : int
        Patterns to publish, >= 1 and at most the number of candidates.
    epsilon : float
        Total budget, > 0 (per frame).
    noise : NoiseSource
        Every privacy draw comes from it (``NoiseSource.secure()`` outside
        simulations).
    split : float
        Share of epsilon for phase 1, in (0, 1) (the paper finds 0.6-0.7 best).
    codebook : HadamardCodebook, optional
        Public codebook; required with frames, its dim the descriptor size.
    max_length : int
        Longest pattern (public), default 3.
    max_words : int, optional
        Public bound L on a frame's words; frames with more keep their L lowest
        word ids. Default: the codebook size (always valid, loosest).
    primitive_noise : {"paper", "off"}
        "paper": Alg. 1's perturbation of frequent primitives before the pattern
        counts (frames only). "off": count the words as mapped. Same epsilon.
    infrequent : {"laplace", "prune"}
        "laplace": Eq. 6 on every candidate with an infrequent word (a quarter of
        phase 1's budget). "prune": skip it (anti-monotonicity), no budget.
    per_frame_shares : bool
        Draw count noise as per-frame Gamma shares (same distribution, slower).

    Returns
    -------
    Release
        ``epsilon_spent`` per frame, ``delta = 0``.

    Raises
    ------
    ValueError
        k <= 0 or above the candidate count, epsilon <= 0, split outside (0, 1),
        an empty client, frames without a codebook or with one of another
        descriptor size, an unknown option.
    """
    split_ = check_split(split)
    if primitive_noise not in PRIMITIVE_NOISE:
        raise ValueError(
            f"primitive_noise {primitive_noise!r}: accepted are {PRIMITIVE_NOISE}"
        )
    if infrequent not in INFREQUENT:
        raise ValueError(f"infrequent {infrequent!r}: accepted are {INFREQUENT}")
    check_epsilon(epsilon)
    check_positive_int("k", k)
    tx, frames = prepare(data, codebook)
    k_, eps, length, words = check_common(
        k=k,
        epsilon=epsilon,
        max_length=max_length,
        max_words=max_words,
        n_words=tx.n_words,
    )
    budget = dpcode_budget(eps, split_, infrequent=infrequent)
    matrix = tx.truncated(words)
    one = run_phase1(
        matrix,
        rho_k=kth_support(tx, k_, length, words),
        k=k_,
        max_length=length,
        max_words=words,
        budget=budget,
        noise=noise,
        frames=frames if primitive_noise == "paper" else None,
        codebook=codebook,
        per_frame_shares=per_frame_shares,
        gram=tx.gram(words) if infrequent == "laplace" and length >= 2 else None,
    )
    patterns, supports, eps2 = phase2(
        matrix,
        one.frequent,
        order=one.frequent_words,
        k=k_,
        epsilon=budget["supports"],
        noise=noise,
    )
    components = dict(one.spent)
    if eps2 > 0:
        components["supports"] = eps2
    return Release.per_frame(
        "dpcode",
        patterns,
        supports,
        components=components,
        vocabulary=tx.vocabulary,
        k=k_,
        max_length=length,
    )


def ground_truth(
    data: ClientData,
    *,
    k: int,
    max_length: int = 3,
    codebook: HadamardCodebook | None = None,
) -> tuple[list[Pattern], list[int]]:
    """Non-private top-k patterns and exact supports (mlxtend FP-growth).

    Same inputs as :func:`dpcode_release`; no truncation (the real data).
    """
    tx, _ = prepare(data, codebook)
    k_ = check_positive_int("k", k)
    return exact_top_k(
        tx, k=k_, max_length=check_positive_int("max_length", max_length)
    )


def merge_releases(releases: Sequence[Release], k: int) -> Release:
    """Server side: one top-k list from several clients' releases.

    Each pattern's merged support is the sum of its noisy supports over the
    clients that published it; a client that did not publish it adds 0 (its
    support there was below that client's top k, so the sum is biased low for
    patterns frequent only in some clients). The k largest sums are kept.

    Guarantee: this reads only the releases, so it is post-processing. A frame
    lives on one client, and the merged list is ``eps_c``-DP for the frames of
    client ``c`` (``eps_c`` its ``epsilon_spent``); ``epsilon_spent`` of the
    result is the largest ``eps_c``, per frame (parallel composition over
    disjoint clients). It is not a bound for someone whose frames are on several
    clients: their epsilons add.

    Raises
    ------
    ValueError
        No releases, k < 1, or releases of different units, vocabularies or
        pattern lengths.
    """
    k_ = check_positive_int("k", k)
    if not releases:
        raise ValueError("no releases to merge: accepted is at least one release")
    first = releases[0]
    for r in releases[1:]:
        for name in ("unit", "vocabulary", "max_length"):
            if getattr(r, name) != getattr(first, name):
                raise ValueError(
                    f"releases with {name} {getattr(first, name)!r} and "
                    f"{getattr(r, name)!r}: accepted are releases of one {name}"
                )
    total: dict[Pattern, float] = {}
    for r in releases:
        for p, v in zip(r.patterns, r.supports, strict=True):
            total[p] = total.get(p, 0.0) + v
    patterns, supports = top_k_release(total, k_)
    return Release(
        patterns=patterns,
        supports=supports,
        epsilon_spent=max(r.epsilon_spent for r in releases),
        unit=first.unit,
        delta=max(r.delta for r in releases),
        mechanism="merged",
        vocabulary=first.vocabulary,
        k=k_,
        max_length=first.max_length,
        components={"max over clients": max(r.epsilon_spent for r in releases)},
    )
