"""FedHAP's discriminator (Eq. 8) and its two adversarial losses.

D sees a code concatenated with the label vector of its class (one-hot; multi-hot for
multi-label samples) and outputs the probability that the pair is a *global
prototype* ("real") rather than a code of the local hashing network ("fake").

Corrections to the paper, which we implement and document:

* Eq. (8) prints the local term as ``1 - log D(h_j|y_j)``; the cross-entropy of a
  "fake" sample is ``-log(1 - D(h_j|y_j))``, which is what we use.
* Eq. (9) adds ``lambda * L_d`` to the hashing loss. Minimising the discriminator's
  own loss with respect to the hashing network would push local codes *away* from
  the prototypes; the hashing network instead minimises the standard
  (non-saturating) generator loss ``-log D(b_j|y_j)``.
* ``h_j = sign(b_j)`` has no gradient, so D is fed the relaxed codes ``b_j`` (the
  quantization loss pulls them towards +-1); the prototypes are the binary h_c.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Discriminator(nn.Module):
    """Two-layer feed-forward discriminator over [code, label vector].

    Parameters
    ----------
    bits : int
        Code length K.
    num_classes : int
        Size of the label space C.
    hidden_dim : int
        Width of the hidden layer.
    """

    def __init__(self, bits: int, num_classes: int, *, hidden_dim: int = 128) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.net = nn.Sequential(
            nn.Linear(bits + num_classes, hidden_dim),
            nn.LeakyReLU(0.2),
            nn.Linear(hidden_dim, 1),
        )

    def forward(self, codes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Logit (n,) that (codes (n, K), labels (n,) or (n, C)) are prototypes."""
        return self.net(torch.cat([codes, label_vector(labels, self.num_classes)], 1))[
            :, 0
        ]


def label_vector(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """One-hot (for (n,) class ids) or multi-hot (n, C) labels as float."""
    if labels.dim() == 1:
        return F.one_hot(labels, num_classes).float()
    return labels.float()


def discriminator_loss(
    disc: Discriminator,
    local_codes: torch.Tensor,
    local_labels: torch.Tensor,
    prototypes: torch.Tensor,
    prototype_classes: torch.Tensor,
) -> torch.Tensor:
    """L_d (Eq. 8, corrected): BCE with prototypes as real, local codes as fake.

    Returns
    -------
    torch.Tensor
        ``mean_j -log(1 - D(b_j|y_j)) + mean_c -log D(h_c|y_c)``.
    """
    fake = disc(local_codes, local_labels)
    real = disc(prototypes.to(local_codes.dtype), prototype_classes)
    return F.binary_cross_entropy_with_logits(
        fake, torch.zeros_like(fake)
    ) + F.binary_cross_entropy_with_logits(real, torch.ones_like(real))


def generator_loss(
    disc: Discriminator, local_codes: torch.Tensor, local_labels: torch.Tensor
) -> torch.Tensor:
    """Hashing network's adversarial term: ``mean_j -log D(b_j|y_j)``."""
    logits = disc(local_codes, local_labels)
    return F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits))
