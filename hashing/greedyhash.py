"""GreedyHash: sign in the forward pass, straight-through gradient (a FedAvg baseline).

Su, Zhang, Han, Tian, NeurIPS 2018 ("Greedy Hash: Towards Fast Optimization for
Accurate Hash Coding in CNN"). The hash layer outputs h = sign(u) in the forward
pass and passes the gradient through unchanged in the backward pass (dL/du =
dL/dh, the paper's greedy principle), so the network is trained on the binary
codes themselves. In the supervised setting the codes feed a linear classifier
W (bits -> classes, no bias), trained with the network, and the loss is

    L = CE(W h, y) + alpha * mean(| |u| - 1 |^3)

where the cubic term pulls u towards {-1, +1} so that the straight-through
gradient stays close to the true one; alpha = ``quantization-weight`` (0.1 in the
authors' code).

The classifier is a submodule of :class:`GreedyHashNet`: its weights are trained by
the same optimizer and averaged by FedAvg with the rest of the network, and the
network's ``forward`` still returns u, so encoding and retrieval are those of every
other loss (codes = sign(u)).

Ours: for multi-label data (MIRFlickr) the cross-entropy is the mean binary
cross-entropy of the multi-hot label vector (a multi-label classifier); the paper
evaluates single-label data only. GreedyHash's loss is per sample, but DP-SGD is
refused with it here (not needed by any table; CSQ is the DP-SGD loss).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def sign_straight_through(u: torch.Tensor) -> torch.Tensor:
    """sign(u) in the forward pass, the identity's gradient in the backward pass."""
    return u + (torch.sign(u) - u).detach()


class GreedyHashNet(nn.Module):
    """A hashing network plus GreedyHash's linear classifier on its codes.

    Parameters
    ----------
    backbone : nn.Module
        Maps inputs to (n, bits) relaxed codes u.
    bits : int
        Code length.
    num_classes : int
        Classes (or labels, multi-label) of the classifier.
    """

    def __init__(self, backbone: nn.Module, bits: int, num_classes: int) -> None:
        super().__init__()
        if bits < 1 or num_classes < 2:
            raise ValueError(
                f"GreedyHash needs bits >= 1 and num_classes >= 2, got bits={bits}, "
                f"num_classes={num_classes}"
            )
        self.backbone = backbone
        self.classifier = nn.Linear(bits, num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return the relaxed codes u of ``x`` (the classifier is the loss's)."""
        return self.backbone(x)


def greedyhash_loss(
    u: torch.Tensor,
    labels: torch.Tensor,
    classifier: nn.Module,
    *,
    penalty_weight: float,
) -> torch.Tensor:
    """GreedyHash's supervised loss over one mini-batch.

    Parameters
    ----------
    u : torch.Tensor
        (n, bits) network outputs.
    labels : torch.Tensor
        (n,) class ids (cross-entropy) or (n, C) multi-hot (mean binary
        cross-entropy, ours).
    classifier : nn.Module
        Maps (n, bits) codes to (n, C) logits (:attr:`GreedyHashNet.classifier`).
    penalty_weight : float
        alpha of the cubic penalty mean(| |u| - 1 |^3).

    Returns
    -------
    torch.Tensor
        Scalar loss.
    """
    if u.dim() != 2 or labels.shape[0] != u.shape[0]:
        raise ValueError(
            f"u must be (n, bits) and labels have n rows; got {tuple(u.shape)} and "
            f"{tuple(labels.shape)}"
        )
    logits = classifier(sign_straight_through(u))
    if labels.dim() == 1:
        fit = F.cross_entropy(logits, labels.long())
    else:
        fit = F.binary_cross_entropy_with_logits(logits, labels.float())
    penalty = (u.abs() - 1.0).abs().pow(3).mean()
    return fit + penalty_weight * penalty
