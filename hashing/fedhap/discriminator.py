"""FedHAP's discriminator (Eq. 8) and its two adversarial losses.

D sees a code concatenated with the one-hot vector of one class and outputs the
probability that the pair is a *global prototype* ("real") rather than a code of the
local hashing network ("fake").

Multi-label samples: one pair per label. A sample ``j`` with labels ``{2, 5}`` gives
the two fake pairs ``(b_j, e_2)`` and ``(b_j, e_5)``, the way Eq. (5) counts it as a
member of class 2 and of class 5 (:func:`label_pairs`). The real pairs
``(h_c, e_c)`` are one-hot by construction, so real and fake label vectors now have
the same form. Feeding the multi-hot row ``e_2 + e_5`` instead (what we did before)
gives every multi-label fake away by its label alone: no prototype's label vector
sums to more than 1. Single-label data gives exactly one pair per sample, the
sample itself, so nothing changes there.

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
        """Logit (n,) that the rows (codes (n, K), labels (n,) or (n, C)) are real.

        The rows are scored as given: a multi-hot row is one input. The losses
        below first split multi-label samples into one-hot pairs
        (:func:`label_pairs`).
        """
        return self.net(torch.cat([codes, label_vector(labels, self.num_classes)], 1))[
            :, 0
        ]


def label_vector(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """One-hot (for (n,) class ids) or multi-hot (n, C) labels as float."""
    if labels.dim() == 1:
        return F.one_hot(labels, num_classes).float()
    return labels.float()


def label_pairs(
    codes: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split samples into one (code, class id) pair per label.

    Parameters
    ----------
    codes : torch.Tensor
        (n, K) relaxed codes.
    labels : torch.Tensor
        (n,) int64 class ids, or (n, C) multi-hot (any non-zero entry is a label).

    Returns
    -------
    tuple of torch.Tensor
        ``(pair_codes (P, K), pair_classes (P,) int64)`` with ``P = n`` for class
        ids and ``P = number of non-zero entries of labels`` for multi-hot. Pairs
        are in sample order, and within a sample in increasing class order. Class
        ids come back as given, with the very tensor ``codes`` (no copy), so
        single-label input scores exactly as before. A multi-hot row without any
        label gives no pair.
    """
    if labels.dim() == 1:
        return codes, labels
    rows, classes = torch.nonzero(labels, as_tuple=True)
    return codes[rows], classes


def _pair_bce(logits: torch.Tensor, target: float) -> torch.Tensor:
    """Mean BCE-with-logits of ``logits`` against ``target``; 0 (with graph) if none."""
    if logits.numel() == 0:
        return logits.sum() * 0.0
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, target))


def discriminator_loss(
    disc: Discriminator,
    local_codes: torch.Tensor,
    local_labels: torch.Tensor,
    prototypes: torch.Tensor,
    prototype_classes: torch.Tensor,
) -> torch.Tensor:
    """L_d (Eq. 8, corrected): BCE with prototypes as real, local pairs as fake.

    Parameters
    ----------
    disc : Discriminator
        The client's discriminator.
    local_codes : torch.Tensor
        (n, K) relaxed local codes b_j.
    local_labels : torch.Tensor
        (n,) int64 class ids or (n, C) multi-hot; split by :func:`label_pairs`
        into P fake pairs ``(b_j, e_c)``, one per label c of sample j.
    prototypes : torch.Tensor
        (m, K) global prototype codes h_c in {-1, +1}.
    prototype_classes : torch.Tensor
        (m,) int64 class of each prototype.

    Returns
    -------
    torch.Tensor
        ``mean over the P pairs (j, c) of -log(1 - D(b_j|e_c))
        + mean_c -log D(h_c|e_c)``.

    Notes
    -----
    Averaging: per pair, every (sample, label) pair weighs 1/P, so a sample with
    two labels counts twice. We follow the paper's own counting: Eq. (5) makes a
    sample a full member of each of its classes (it enters the mean of every one of
    them with the same weight as a single-label sample), and the prototype h_c
    that D holds up as "real" for class c is the sign of that mean. Weighting
    each pair of the fake term the same way keeps the codes D compares with h_c
    those of Eq. (5)'s class-c members, weighted as Eq. (5) weights them;
    weighting each sample once (1/|y_j| per pair) would down-weight multi-label
    samples in every class they belong to. Eq. (8)'s 1/n_i is the number of
    fake inputs; with one input per pair that is 1/P, and P = n_i for
    single-label data, so single-label losses are unchanged bit for bit. A batch
    whose multi-hot rows hold no label has no fake pair; its fake term is 0.
    """
    pair_codes, pair_classes = label_pairs(local_codes, local_labels)
    fake = disc(pair_codes, pair_classes)
    real = disc(prototypes.to(local_codes.dtype), prototype_classes)
    return _pair_bce(fake, 0.0) + F.binary_cross_entropy_with_logits(
        real, torch.ones_like(real)
    )


def generator_loss(
    disc: Discriminator, local_codes: torch.Tensor, local_labels: torch.Tensor
) -> torch.Tensor:
    """Hashing network's adversarial term: ``mean over pairs (j, c) -log D(b_j|e_c)``.

    The same pairs and the same per-pair mean as :func:`discriminator_loss`
    (see its Notes): one one-hot pair per label of each sample.
    """
    pair_codes, pair_classes = label_pairs(local_codes, local_labels)
    return _pair_bce(disc(pair_codes, pair_classes), 1.0)
