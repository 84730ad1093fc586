"""HashNet loss: weighted pairwise likelihood with continuation (a FedAvg baseline).

Cao, Long, Wang, Yu, ICCV 2017 ("HashNet: Deep Learning to Hash by Continuation"):
the activation is h = tanh(beta * z), with beta raised during training so that h
approaches sign(z) (continuation), and the pairs of a mini-batch are fitted by a
weighted maximum likelihood:

    L = sum_ij w_ij * (log(1 + exp(a <h_i, h_j>)) - a * s_ij * <h_i, h_j>)

with a = ``alpha`` (the paper's adaptive sigmoid parameter, 10 / bits by default as
in the authors' released code) and w_ij = c_ij * |S| / |S_1| for similar pairs and
|S| / |S_0| for dissimilar ones (S_1 / S_0: the similar / dissimilar pairs of the
batch), which balances the two. For multi-label data c_ij is the Jaccard overlap of
the two label sets for similar pairs (the paper's continuous similarity weight), 1
otherwise. The sum is divided by |S|, so the loss is a weighted mean over pairs.

The continuation schedule is the authors' code's: beta_t = (1 + gamma * t) ** 0.5
with gamma = 0.005 and t the optimisation step. Under FedAvg a client's step count
continues across rounds (t = (round - 1) * steps per round + local step), so every
client follows the schedule of the run, not one restarted each round.

Like DPSH's, the pairs couple the samples of a batch: HashNet is not a per-sample
loss, and DP-SGD refuses it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hashing.losses import balance_weights, pairwise_similarity

#: gamma and power of beta_t = (1 + gamma * t) ** power (the authors' code).
CONTINUATION_GAMMA = 0.005
CONTINUATION_POWER = 0.5


def continuation_beta(step: int) -> float:
    """Beta of tanh(beta * z) at optimisation step ``step`` (0-based)."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return float((1.0 + CONTINUATION_GAMMA * step) ** CONTINUATION_POWER)


def default_alpha(bits: int) -> float:
    """Return the sigmoid parameter a = 10 / bits of the authors' code."""
    return 10.0 / bits


def _pair_weights(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(similarity s_ij in {0, 1}, weight w_ij) of a batch's ordered pairs."""
    s = pairwise_similarity(labels)
    if labels.dim() == 1:
        overlap = torch.ones_like(s)
    else:
        y = labels.float()
        inter = y @ y.T
        union = y.sum(1, keepdim=True) + y.sum(1)[None, :] - inter
        overlap = torch.where(s > 0, inter / union.clamp_min(1.0), 1.0)
    return s, balance_weights(s) * torch.where(s > 0, overlap, 1.0)


def hashnet_loss(
    u: torch.Tensor, labels: torch.Tensor, *, beta: float, alpha: float
) -> torch.Tensor:
    """HashNet's weighted pairwise likelihood over one mini-batch.

    Parameters
    ----------
    u : torch.Tensor
        (n, bits) network outputs z; h = tanh(beta * z).
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot (similar = share a label).
    beta : float
        Continuation parameter (:func:`continuation_beta`).
    alpha : float
        Sigmoid parameter a (:func:`default_alpha`).

    Returns
    -------
    torch.Tensor
        Scalar: sum_ij w_ij (softplus(a <h_i,h_j>) - a s_ij <h_i,h_j>) / n^2. Zero
        (with a graph) for an empty batch.
    """
    if len(u) == 0:
        return u.sum() * 0.0
    h = torch.tanh(beta * u)
    s, weight = _pair_weights(labels)
    ip = alpha * (h @ h.T)
    return (weight * (F.softplus(ip) - s * ip)).sum() / s.numel()
