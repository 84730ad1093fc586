"""Hashing losses as pure functions of a batch.

DPSH (Li, Wang, Kang, IJCAI 2016, "Feature Learning based Deep Supervised Hashing
with Pairwise Labels"): with relaxed codes u_i and pairwise similarity s_ij,
theta_ij = 1/2 u_i^T u_j and the negative log-likelihood of the pairs is
sum_ij softplus(theta_ij) - s_ij theta_ij; the quantization term is
eta * ||u_i - sign(u_i)||^2. The original keeps a dataset-sized matrix U of codes;
this implementation uses the pairs inside each mini-batch (no dataset-sized buffer)
and averages both terms (per pair and per bit), so ``quantization-weight`` (eta)
does not depend on the batch size or code length.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F


def pairwise_similarity(labels: torch.Tensor) -> torch.Tensor:
    """Similarity s_ij in {0, 1} of a batch.

    Parameters
    ----------
    labels : torch.Tensor
        (n,) integer class ids, or (n, C) multi-hot; multi-label samples are similar
        when they share at least one label.

    Returns
    -------
    torch.Tensor
        (n, n) float32, 1.0 where similar.
    """
    if labels.dim() == 1:
        return (labels[:, None] == labels[None, :]).float()
    multi_hot = labels.float()
    return (multi_hot @ multi_hot.T > 0).float()


def balance_weights(s: torch.Tensor) -> torch.Tensor:
    """Pair weights |S| / |S_1| (similar) and |S| / |S_0| (dissimilar) of a batch.

    HashNet's and DCH's balance of similar against dissimilar pairs: each group then
    weighs as much as all pairs together. A group the batch lacks gets weight 0 (its
    pairs do not occur).

    Parameters
    ----------
    s : torch.Tensor
        (n, n) similarity in {0, 1} (:func:`pairwise_similarity`).

    Returns
    -------
    torch.Tensor
        (n, n) float32 weights.
    """
    n_all = float(s.numel())
    n_sim = float(s.sum())
    n_dis = n_all - n_sim
    w_sim = n_all / n_sim if n_sim else 0.0
    w_dis = n_all / n_dis if n_dis else 0.0
    return torch.where(s > 0, w_sim, w_dis)


def dpsh_loss(
    u: torch.Tensor, labels: torch.Tensor, *, quantization_weight: float
) -> torch.Tensor:
    """DPSH pairwise likelihood + quantization loss over one mini-batch.

    Parameters
    ----------
    u : torch.Tensor
        (n, bits) real-valued network outputs (relaxed codes).
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot labels.
    quantization_weight : float
        eta, weight of the mean squared distance between u and sign(u).

    Returns
    -------
    torch.Tensor
        Scalar loss: mean over the n*n ordered pairs of
        softplus(theta_ij) - s_ij * theta_ij, plus eta * mean((u - sign(u))^2).
    """
    s = pairwise_similarity(labels)
    theta = 0.5 * (u @ u.T)
    likelihood = (F.softplus(theta) - s * theta).mean()
    quantization = (u - torch.sign(u).detach()).pow(2).mean()
    return likelihood + quantization_weight * quantization


def proximal_term(
    params: list[torch.Tensor], global_params: list[torch.Tensor]
) -> torch.Tensor:
    """FedProx's ||w - w_global||^2 summed over parameter tensors (no mu/2 factor)."""
    # sum() starts at int 0 (returned as is only for empty lists: no parameters)
    return cast(
        torch.Tensor,
        sum(((p - g) ** 2).sum() for p, g in zip(params, global_params, strict=True)),
    )
