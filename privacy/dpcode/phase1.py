"""Phase 1: noisy frequent-pattern identification (the paper's Sec. III-A, Alg. 1).

Unit everywhere: *per frame*, i.e. neighbouring clients differ by adding or
removing one frame with all its primitives (the paper's Definition 1). ``L`` is
the public bound on a frame's words (frames are truncated to it) and ``l`` the
public maximal pattern length.

Steps as implemented, each an eps-DP release composed sequentially:

1. **Threshold** (``eps_thr``): ``rho^_k = rho_k + Lap(1 / eps_thr)``, ``rho_k`` the
   k-th largest support over all candidates. Adding a frame raises every support
   by 0 or 1, so ``rho_k`` moves by at most 1: sensitivity 1, as the paper says.
   With the paper's ``eps_thr = eps_1 / 2`` this is its ``Lap(2 / eps_1)``.
   ``rho^_k`` is used inside the release and never published.
2. **Frequent words** (``eps_words``): the paper takes ``{W}_f`` (the words of the
   true top-k) as a free system parameter, but it is computed from the data with
   the exact ``rho_k``. We select it: every codebook word's support gets
   ``Lap(L / eps_words)`` (a frame holds at most ``L`` words: L1 sensitivity
   ``L``), drawn as per-frame Gamma shares (Eq. 1, exact form), and ``{W}_f`` is the
   set of words whose noisy support reaches ``rho^_k``.
3. **Noisy visual-word conversion** (Alg. 1, no budget of its own): a primitive
   whose word is frequent is moved by the radial Laplace and mapped again; it
   keeps the new word if that is frequent, else it is dropped (the truncation).
   Calibration as the paper: per-primitive epsilon ``eps_1f / (2 |W_f|)`` with
   the scale factor ``beta = 2 r_max sqrt(B)``, ``B ~ Beta(1, s - 1)`` (Eq. 5 writes
   ``2 r_max / sqrt(B)``, the reciprocal of Eq. 1's share). This step is not
   counted in the per-frame epsilon: it randomises where a frame's frequent
   words land, but a frame added or removed still adds or removes one noisy
   transaction, so the Laplace of step 4 must cover any transaction it can have.
4. **Frequent patterns** (``eps_patterns``): candidates of length 2..l over
   ``{W}_f``, counted in the converted transactions, each count plus
   ``Lap(D / eps_patterns)`` with ``D = sum_{j=2..l} C(min(L, |W_f|), j)`` (the most
   candidates one frame contains); a candidate is frequent if its noisy count
   reaches ``rho^_k``. The paper instead rounds each frame's noisy indicator
   (``x > 0.5``) before summing, which is not DP (see ``laplace.py``).
5. **Infrequent candidates** (Eq. 6, ``eps_infrequent``; optional): every other
   candidate (a word outside ``{W}_f``) gets ``Lap(D' / eps_infrequent)`` on its
   exact support, ``D' = sum_{j=1..l} C(L, j)``; Eq. 6's ``2(|C| - k) / eps`` bounds
   the same sensitivity by the candidate count. ``infrequent="prune"`` skips the
   step and its budget: by anti-monotonicity no pattern with a word whose
   (noisy) support is below the threshold can be frequent, a decision on DP
   outputs only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from privacy.dpcode.itemsets import (
    CANDIDATE_LIMIT,
    Pattern,
    combinations,
    count_supports,
    frame_patterns,
    truncate,
)
from privacy.dpcode.laplace import gamma_shares, laplace, radial_laplace
from privacy.dpcode.primitives import Frames, HadamardCodebook
from privacy.noise import NoiseSource


@dataclass(frozen=True)
class Phase1Result:
    """What phase 1 hands to phase 2 (all of it DP outputs or public values).

    Attributes
    ----------
    threshold : float
        The noisy threshold ``rho^_k`` (internal, never published).
    frequent_words : tuple of int
        ``{W}_f``, by noisy support descending (the FP-tree word order).
    frequent : dict
        Pattern -> its phase-1 noisy count, for every pattern judged frequent.
    spent : dict
        Step name -> epsilon spent by that step (per frame).
    """

    threshold: float
    frequent_words: tuple[int, ...]
    frequent: dict[Pattern, float]
    spent: dict[str, float]


def noisy_counts(
    counts: NDArray[np.integer],
    *,
    scale: float,
    n_frames: int,
    noise: NoiseSource,
    per_frame_shares: bool,
) -> NDArray[np.float64]:
    """Return ``counts + Lap(scale)``, optionally summed from per-frame Gamma shares.

    Both give the same distribution (Gamma additivity); the shares are what each
    frame would add in a distributed setting and cost ``n_frames`` times more draws.
    """
    c = np.asarray(counts, dtype=np.float64)
    if per_frame_shares:
        return c + gamma_shares(n_frames, scale, c.shape, noise).sum(axis=0)
    return c + laplace(scale, c.shape, noise)


def noisy_threshold(rho_k: int, *, epsilon: float, noise: NoiseSource) -> float:
    """``rho_k + Lap(1 / epsilon)`` (sensitivity 1)."""
    return float(rho_k + laplace(1.0 / epsilon, 1, noise)[0])


def noisy_word_conversion(
    frames: Frames,
    codebook: HadamardCodebook,
    frequent_words: NDArray[np.int64],
    *,
    primitive_epsilon: float,
    noise: NoiseSource,
) -> NDArray[np.bool_]:
    """Alg. 1 restricted to frequent words: perturb, map again, truncate.

    Parameters
    ----------
    frames : Frames
        The client's primitives.
    codebook : HadamardCodebook
        Public codebook.
    frequent_words : ndarray of int
        ``{W}_f``.
    primitive_epsilon : float
        The paper's per-primitive epsilon ``eps_1f / (2 |W_f|)``.
    noise : NoiseSource
        Where the noise comes from.

    Returns
    -------
    ndarray of bool, shape (frames, len(frequent_words))
        Column ``j``: frame has frequent word ``frequent_words[j]`` after conversion.
    """
    s = frames.n_frames
    words = codebook.quantise(frames.descriptors)
    col = np.full(codebook.n_words, -1, dtype=np.int64)
    col[frequent_words] = np.arange(len(frequent_words))
    hit = frames.mask & (col[words] >= 0)
    rng = noise.numpy_generator()
    share = float(rng.beta(1.0, s - 1.0)) if s > 1 else 1.0  # common B of Eq. 1
    beta = 2.0 * codebook.cell_radius * np.sqrt(share)
    frame_idx = np.broadcast_to(np.arange(s)[:, None], words.shape)[hit]
    out = np.zeros((s, len(frequent_words)), dtype=bool)
    if frame_idx.size:
        moved = radial_laplace(frames.descriptors[hit], beta / primitive_epsilon, noise)
        new = col[codebook.quantise(moved)]
        keep = new >= 0
        out[frame_idx[keep], new[keep]] = True
    return out


def run_phase1(
    matrix: NDArray[np.bool_],
    *,
    rho_k: int,
    k: int,
    max_length: int,
    max_words: int,
    budget: dict[str, float],
    noise: NoiseSource,
    frames: Frames | None = None,
    codebook: HadamardCodebook | None = None,
    per_frame_shares: bool = False,
    gram: NDArray[np.int64] | None = None,
) -> Phase1Result:
    """Run steps 1-5 of the module docstring on truncated transactions ``matrix``.

    ``budget`` holds ``threshold``, ``words``, ``patterns`` and ``infrequent``
    (0 to skip Eq. 6). With ``frames`` and ``codebook`` the frequent-pattern
    counts use Alg. 1's converted transactions; without, the words as given.
    """
    s, n_words = matrix.shape
    spent = {"threshold": budget["threshold"]}
    threshold = noisy_threshold(rho_k, epsilon=budget["threshold"], noise=noise)

    word_counts = matrix.sum(axis=0)
    noisy_words = noisy_counts(
        word_counts,
        scale=max_words / budget["words"],
        n_frames=s,
        noise=noise,
        per_frame_shares=per_frame_shares,
    )
    spent["words"] = budget["words"]
    chosen = np.flatnonzero(noisy_words >= threshold)
    chosen = chosen[np.argsort(-noisy_words[chosen], kind="stable")]
    frequent: dict[Pattern, float] = {(int(w),): float(noisy_words[w]) for w in chosen}

    if len(chosen) >= 2 and max_length >= 2:
        if frames is not None and codebook is not None:
            eps_f = budget["words"] + budget["patterns"]
            converted = noisy_word_conversion(
                frames,
                codebook,
                chosen,
                primitive_epsilon=eps_f / (2 * len(chosen)),
                noise=noise,
            )
            local = truncate(converted, max_words)
        else:
            local = matrix[:, chosen]
        ids = np.arange(len(chosen))
        cands = [
            combinations(ids, j) for j in range(2, min(max_length, len(chosen)) + 1)
        ]
        sens = frame_patterns(min(max_words, len(chosen)), max_length, min_length=2)
        for cand in cands:
            counts = count_supports(local, cand)
            noisy = noisy_counts(
                counts,
                scale=sens / budget["patterns"],
                n_frames=s,
                noise=noise,
                per_frame_shares=per_frame_shares,
            )
            for row in np.flatnonzero(noisy >= threshold):
                pattern = tuple(sorted(int(chosen[i]) for i in cand[row]))
                frequent[pattern] = float(noisy[row])
        spent["patterns"] = budget["patterns"]

    if budget.get("infrequent", 0.0) > 0:
        frequent.update(
            _infrequent(
                matrix,
                chosen,
                max_length=max_length,
                max_words=max_words,
                threshold=threshold,
                epsilon=budget["infrequent"],
                noise=noise,
                gram=gram,
            )
        )
        spent["infrequent"] = budget["infrequent"]

    return Phase1Result(threshold, tuple(int(w) for w in chosen), frequent, spent)


def _infrequent(
    matrix: NDArray[np.bool_],
    chosen: NDArray[np.int64],
    *,
    max_length: int,
    max_words: int,
    threshold: float,
    epsilon: float,
    noise: NoiseSource,
    gram: NDArray[np.int64] | None,
) -> dict[Pattern, float]:
    """Eq. 6: Laplace on every candidate with a word outside ``{W}_f``."""
    n_words = matrix.shape[1]
    in_f = np.zeros(n_words, dtype=bool)
    in_f[chosen] = True
    cand_lists = []
    total = 0
    for j in range(1, max_length + 1):
        cand = combinations(np.arange(n_words), j)
        cand = cand[~in_f[cand].all(axis=1)]
        total += len(cand)
        if total > CANDIDATE_LIMIT:
            raise ValueError(
                f"Eq. 6 would perturb more than {CANDIDATE_LIMIT:,} infrequent "
                f"candidates ({n_words} words, max_length {max_length}): accepted "
                "is a smaller codebook or max_length, or infrequent='prune'"
            )
        cand_lists.append(cand)
    sens = min(frame_patterns(max_words, max_length), max(total, 1))
    out: dict[Pattern, float] = {}
    for cand in cand_lists:
        counts = count_supports(matrix, cand, gram=gram)
        noisy = counts + laplace(sens / epsilon, len(cand), noise)
        for row in np.flatnonzero(noisy >= threshold):
            out[tuple(int(w) for w in cand[row])] = float(noisy[row])
    return out
