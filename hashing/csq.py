"""Central Similarity Quantization (CSQ) loss: a per-sample supervised hashing loss.

Yuan et al., CVPR 2020 ("Central similarity quantization for efficient image and
video retrieval", the FedHAP paper's [37]): every class c gets a fixed, data-
independent hash centre t_c in {-1, +1}^K; each sample is pulled towards the centre
of its class by a binary cross-entropy per bit, plus a quantization term. Every term
depends on one sample only, which is what DP-SGD's per-sample clipping needs (the
in-batch pairwise DPSH loss does not qualify; see docs/methods/dp-sgd.md).

Centres: rows of a Hadamard matrix and their negations when K is a power of two and
C <= 2K (as CSQ), else seeded random +-1 codes. A multi-label sample's centre is the
sign of the sum of its labels' centres (ties +1; CSQ breaks ties randomly).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


def hash_centers(num_classes: int, bits: int, *, seed: int = 0) -> torch.Tensor:
    """(C, K) float32 +-1 class centres, independent of any data."""
    if bits & (bits - 1) == 0 and num_classes <= 2 * bits:
        from scipy.linalg import hadamard  # here: scipy.linalg costs 0.5 s to import

        h = hadamard(bits).astype(np.float32)
        return torch.from_numpy(np.concatenate([h, -h])[:num_classes].copy())
    rng = np.random.default_rng([seed, num_classes, bits])
    return torch.from_numpy(
        rng.choice([-1.0, 1.0], size=(num_classes, bits)).astype(np.float32)
    )


def sample_centers(labels: torch.Tensor, centers: torch.Tensor) -> torch.Tensor:
    """Centre of each sample: (n,) class ids or (n, C) multi-hot -> (n, K)."""
    if labels.dim() == 1:
        return centers[labels]
    summed = labels.to(centers.dtype) @ centers
    return torch.where(summed >= 0, 1.0, -1.0).to(centers.dtype)


def csq_loss(
    u: torch.Tensor,
    labels: torch.Tensor,
    centers: torch.Tensor,
    *,
    quantization_weight: float,
) -> torch.Tensor:
    """Mean over samples of the per-sample CSQ loss.

    Parameters
    ----------
    u : torch.Tensor
        (n, K) network outputs; tanh(u) is the relaxed code.
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot.
    centers : torch.Tensor
        (C, K) +-1 class centres (:func:`hash_centers`).
    quantization_weight : float
        Weight of mean (|tanh(u)| - 1)^2.

    Returns
    -------
    torch.Tensor
        Scalar: mean_i [ mean_k BCE((tanh u_ik + 1)/2, (t_ik + 1)/2) + w q_i ].
        Zero (with a graph) for an empty batch.
    """
    if len(u) == 0:
        return u.sum() * 0.0
    t = (sample_centers(labels, centers.to(u.device)) + 1) / 2
    # (tanh(u) + 1) / 2 = sigmoid(2u): BCE with logits 2u is the stable form
    bce = F.binary_cross_entropy_with_logits(2 * u, t, reduction="none").mean(1)
    quant = (torch.tanh(u).abs() - 1).pow(2).mean(1)
    return (bce + quantization_weight * quant).mean()
