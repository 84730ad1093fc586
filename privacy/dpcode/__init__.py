"""DPcode: differentially private top-k frequent visual patterns (no Flower).

Paper: Qin, Ren, Yu, Weng, "DPcode: Privacy-preserving Frequent Visual Patterns
Publication on Cloud"
(``../shared/papers/DPcode-private-frequent-visual-patterns.txt``).

* ``primitives.py`` -- frames, patch descriptors, the public Hadamard codebook,
  transactions (also from hash-code chunks);
* ``laplace.py`` -- Laplace draws, per-frame Gamma shares (Eq. 1, exact form),
  the radial Laplace (Eqs. 2-5);
* ``itemsets.py`` -- exact supports, candidates, the mlxtend ground truth;
* ``phase1.py`` -- noisy threshold, frequent words, Alg. 1, Eq. 6;
* ``fptree.py`` -- noisy FP-trees and FP-growth (Algs. 2-3);
* ``baselines.py`` -- the direct approach and NoisyCut;
* ``metrics.py`` -- F-score (Def. 3) and relative error (Def. 4);
* ``release.py`` -- :func:`dpcode_release` (one client), :func:`ground_truth`,
  :func:`merge_releases` (server post-processing).

Every epsilon is per frame (one frame added or removed), delta 0. See
``docs/methods/dpcode.md`` for where the paper's privacy argument was repaired.
"""

from privacy.dpcode.baselines import direct_release, noisycut_release
from privacy.dpcode.metrics import f_score, relative_error
from privacy.dpcode.primitives import (
    Frames,
    HadamardCodebook,
    Transactions,
    code_transactions,
    frames_to_transactions,
    patch_descriptors,
    transactions_from_sets,
)
from privacy.dpcode.release import (
    UNIT_FRAME,
    Release,
    dpcode_budget,
    dpcode_release,
    ground_truth,
    merge_releases,
)

__all__ = [
    "UNIT_FRAME",
    "Frames",
    "HadamardCodebook",
    "Release",
    "Transactions",
    "code_transactions",
    "direct_release",
    "dpcode_budget",
    "dpcode_release",
    "f_score",
    "frames_to_transactions",
    "ground_truth",
    "merge_releases",
    "noisycut_release",
    "patch_descriptors",
    "relative_error",
    "transactions_from_sets",
]
