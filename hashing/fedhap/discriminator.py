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

Two options beyond the paper (``fedhap.discriminator``, ``fedhap.discriminator-input``):

* :class:`ProjectionDiscriminator` (Miyato & Koyama 2018) scores
  ``psi(phi(h)) + <embed(y), phi(h)>``: the class enters as an inner product with the
  code's features, so the class-conditional part of the score cannot be ignored by
  construction, where the paper's concatenation (:class:`Discriminator`) may learn to
  look at the code alone.
* ``sign`` input: D sees ``sign(b_j)`` with a straight-through gradient
  (:func:`straight_through_sign`), so real and fake inputs are both binary and
  "relaxed or binary" no longer tells them apart. With relaxed input an audit of a
  trained concatenation D scored a prototype 0.997, a wrong class's prototype 0.993,
  a relaxed local code 0.014 and its sign 0.888: the adversarial term acted as a
  binarisation push, not a class-conditional one. :func:`class_scores` measures
  those four numbers.
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


class ProjectionDiscriminator(nn.Module):
    """Projection discriminator: ``psi(phi(h)) + <embed(y), phi(h)>`` (Miyato & Koyama).

    ``phi`` is one linear layer with a LeakyReLU (the width of :class:`Discriminator`'s
    hidden layer), ``psi`` a linear read-out, ``embed`` one vector per class. A
    multi-hot label row projects on the sum of its classes' vectors (the losses
    split such rows into one-hot pairs first, :func:`label_pairs`).

    Parameters
    ----------
    bits : int
        Code length K.
    num_classes : int
        Size of the label space C.
    hidden_dim : int
        Width of ``phi``'s output.
    """

    def __init__(self, bits: int, num_classes: int, *, hidden_dim: int = 128) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.phi = nn.Sequential(nn.Linear(bits, hidden_dim), nn.LeakyReLU(0.2))
        self.psi = nn.Linear(hidden_dim, 1)
        self.embed = nn.Linear(num_classes, hidden_dim, bias=False)

    def forward(self, codes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Logit (n,) that the rows (codes (n, K), labels (n,) or (n, C)) are real."""
        feats = self.phi(codes)
        projection = (self.embed(label_vector(labels, self.num_classes)) * feats).sum(1)
        return self.psi(feats)[:, 0] + projection


#: What ``fedhap.discriminator`` names (``concat``: the paper's Eq. 8 input).
DISCRIMINATORS: dict[str, type[Discriminator] | type[ProjectionDiscriminator]] = {
    "concat": Discriminator,
    "projection": ProjectionDiscriminator,
}
AnyDiscriminator = Discriminator | ProjectionDiscriminator


def build_discriminator(
    kind: str, bits: int, num_classes: int, *, hidden_dim: int = 128
) -> AnyDiscriminator:
    """Return the discriminator ``kind`` (a key of :data:`DISCRIMINATORS`)."""
    if kind not in DISCRIMINATORS:
        raise ValueError(
            f"discriminator {kind!r}: accepted {', '.join(DISCRIMINATORS)}"
        )
    return DISCRIMINATORS[kind](bits, num_classes, hidden_dim=hidden_dim)


def straight_through_sign(b: torch.Tensor) -> torch.Tensor:
    """``sign(b)`` forward, the identity's gradient backward (straight-through)."""
    return b + (torch.sign(b) - b).detach()


def discriminator_input(b: torch.Tensor, kind: str) -> torch.Tensor:
    """Return what D sees of ``b``: ``relaxed`` as is, ``sign`` straight-through."""
    if kind == "relaxed":
        return b
    if kind == "sign":
        return straight_through_sign(b)
    raise ValueError(f"discriminator input {kind!r}: accepted relaxed, sign")


@torch.no_grad()
def class_scores(
    disc: AnyDiscriminator,
    prototypes: torch.Tensor,
    prototype_classes: torch.Tensor,
    local_codes: torch.Tensor,
    local_labels: torch.Tensor,
) -> dict[str, float]:
    """Mean probability D gives four kinds of (code, class) pairs of being real.

    ``real``: each prototype with its own class; ``wrong_class``: each prototype
    with the next prototype's class (cyclically over ``prototype_classes``, so
    always another class when there are two or more); ``relaxed``: the local
    codes with their labels (one pair per label); ``sign``: their signs with the
    same labels. A discriminator that uses the class scores ``wrong_class`` well
    below ``real``; one that only tells binary from relaxed codes scores
    ``relaxed`` low and ``real``, ``wrong_class`` and ``sign`` alike.
    """
    protos = prototypes.to(local_codes.dtype)
    shifted = torch.roll(prototype_classes, -1)
    pair_codes, pair_classes = label_pairs(local_codes, local_labels)

    def mean_prob(codes: torch.Tensor, classes: torch.Tensor) -> float:
        return float(torch.sigmoid(disc(codes, classes)).mean())

    return {
        "real": mean_prob(protos, prototype_classes),
        "wrong_class": mean_prob(protos, shifted),
        "relaxed": mean_prob(pair_codes, pair_classes),
        "sign": mean_prob(torch.sign(pair_codes), pair_classes),
    }


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
    disc: AnyDiscriminator,
    local_codes: torch.Tensor,
    local_labels: torch.Tensor,
    prototypes: torch.Tensor,
    prototype_classes: torch.Tensor,
) -> torch.Tensor:
    """L_d (Eq. 8, corrected): BCE with prototypes as real, local pairs as fake.

    Parameters
    ----------
    disc : Discriminator or ProjectionDiscriminator
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
    disc: AnyDiscriminator, local_codes: torch.Tensor, local_labels: torch.Tensor
) -> torch.Tensor:
    """Hashing network's adversarial term: ``mean over pairs (j, c) -log D(b_j|e_c)``.

    The same pairs and the same per-pair mean as :func:`discriminator_loss`
    (see its Notes): one one-hot pair per label of each sample.
    """
    pair_codes, pair_classes = label_pairs(local_codes, local_labels)
    return _pair_bce(disc(pair_codes, pair_classes), 1.0)
