"""DCH loss: Deep Cauchy Hashing (a FedAvg baseline of FedHAP's Table 2).

Cao, Long, Liu, Wang, CVPR 2018 ("Deep Cauchy Hashing for Hamming Space
Retrieval"). The Hamming distance of two continuous codes is estimated from their
angle, d(h_i, h_j) = (K / 2) (1 - cos(h_i, h_j)) (the paper's Eq. 6), and a pair is
similar with the Cauchy probability sigma(d) = gamma / (gamma + d), which falls much
faster than a sigmoid of the inner product once d exceeds gamma: similar pairs are
pulled into a small Hamming ball. The weighted negative log-likelihood of a batch
(Eq. 8) is

    L = sum_ij w_ij (s_ij log(1 + d_ij / gamma) + (1 - s_ij) log(1 + gamma / d_ij))

with w_ij = |S| / |S_1| for similar pairs and |S| / |S_0| for dissimilar ones
(:func:`hashing.losses.balance_weights`; S_1 / S_0 the similar / dissimilar pairs of
the batch, the same balance as HashNet's), and the Cauchy quantization loss (Eq. 9)

    Q = sum_i log(1 + d(|h_i|, 1) / gamma)

pulls each code towards a vertex of the hypercube. The batch loss is
mean_ij(w_ij * ...) + lambda * mean_i(...), with gamma = 20 and lambda = 0.1 (the
authors' released settings).

Two numerical choices, both ours: the cosine is clipped at 0.99 (so d >= 0.005 K
> 0 and log(1 + gamma / d) stays finite for a dissimilar pair with parallel codes;
the diagonal pairs i = i are kept, as in the paper's sum, and contribute only this
floor), and the code norms at 1e-4 (an all-zero output has no direction).

Like DPSH's and HashNet's, the pairs couple the samples of a batch: DCH is not a
per-sample loss, and DP-SGD refuses it.
"""

from __future__ import annotations

import torch

from hashing.losses import balance_weights, pairwise_similarity

#: Cauchy scale gamma and quantization weight lambda (the authors' settings).
DEFAULT_GAMMA = 20.0
DEFAULT_QUANTIZATION_WEIGHT = 0.1
#: Largest cosine used in d (keeps d > 0: module docstring).
MAX_COSINE = 0.99


def cauchy_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(n, m) estimated Hamming distances (K / 2)(1 - cos) of rows of a and b."""
    norms = a.norm(dim=1, keepdim=True) @ b.norm(dim=1, keepdim=True).T
    cos = (a @ b.T) / norms.clamp_min(1e-4)
    return (1.0 - cos.clamp(max=MAX_COSINE)) * (a.shape[1] / 2.0)


def dch_loss(
    u: torch.Tensor,
    labels: torch.Tensor,
    *,
    gamma: float = DEFAULT_GAMMA,
    quantization_weight: float = DEFAULT_QUANTIZATION_WEIGHT,
) -> torch.Tensor:
    """DCH's weighted Cauchy cross-entropy + Cauchy quantization over one batch.

    Parameters
    ----------
    u : torch.Tensor
        (n, bits) network outputs.
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot (similar = share a label).
    gamma : float
        Cauchy scale (> 0).
    quantization_weight : float
        lambda of the quantization loss (>= 0).

    Returns
    -------
    torch.Tensor
        Scalar: mean_ij w_ij l_ij + lambda mean_i q_i. Zero (with a graph) for an
        empty batch.
    """
    if len(u) == 0:
        return u.sum() * 0.0
    s = pairwise_similarity(labels)
    d = cauchy_distance(u, u)
    pair = s * torch.log1p(d / gamma) + (1.0 - s) * torch.log1p(gamma / d)
    loss = (balance_weights(s) * pair).mean()
    if quantization_weight:
        ones = torch.ones_like(u[:1])
        q = torch.log1p(cauchy_distance(u.abs(), ones).squeeze(1) / gamma)
        loss = loss + quantization_weight * q.mean()
    return loss
