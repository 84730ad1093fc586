"""PFMH client losses (Eqs. 9-12) and the Table 2 ablation switches.

All functions are pure functions of one mini-batch; no Flower, no state.

Total objective (Eq. 12; Eq. 13 is the out-of-sample encoding, not a loss)::

    L = gamma * (L_global + L_local) + L_hash
    L_hash = alpha * L_sim + beta * L_ip                                (Eq. 11)

The paper weighs the prototype terms by 1 (gamma = 1, the default); gamma
(``prototype_weight``, the run config's ``pfmh.prototype-weight``) is ours, so that
the prototype terms' weight can be tuned like alpha and beta.

Decisions where the paper's formulas are garbled or silent:

* Eqs. 9 and 10 (prototype contrast). Both are read as the same per-sample loss
  against a prototype set -- the centralized set P_bar for L_global, the client's
  (completed) personal set P_i for L_local::

      l(n, c) = -log( exp(H_n . P^c / tau) / sum_{j in N(n)} exp(H_n . P^j / tau) )

  for every class c of sample n that has a prototype in the set, where N(n) are
  the classes of the set that are none of sample n's labels. The paper's
  denominators are specific -- ``j != c`` (Eq. 9) and ``i != j`` (Eq. 10) -- and
  exclude the positive prototype: this is the "decoupled" contrastive form
  (``contrast="decoupled"``), whose value can be negative (it is bounded, as H and
  P are unit vectors). It never stops pulling: at cos(H_n, P^c) = 1 it still pushes
  H_n along P^c with a gradient of the size of 1/tau. The standard InfoNCE form
  (``contrast="infonce"``, as the SupCon loss of PFMH's released code) keeps the
  positive in the denominator::

      l(n, c) = -log( exp(H_n . P^c / tau) /
                      (exp(H_n . P^c / tau) + sum_{j in N(n)} exp(H_n . P^j / tau)) )

  which is >= 0 and goes to 0, with its gradient, once the positive dominates.
  :data:`CONTRASTS` lists both; the run config's ``pfmh.contrast`` picks one. For a
  multi-label sample, "j != c" becomes "j is none of the sample's
  labels", so its other positives are not pushed away. A sample contributes the
  mean of l(n, c) over its positives; samples with no positive prototype or no
  negative prototype in the set are skipped (the log of an empty sum is undefined).
  The paper writes sums over samples (Eq. 9) and a 1/m_i mean (Eq. 10); we take the
  mean over the contributing samples of the batch for both, so the two terms have
  the same scale and alpha, beta do not depend on the batch size. The dot product is
  used as given: the PFMH model's H is unit-norm (:mod:`hashing.pfmh.model`), so it
  is a cosine similarity. A batch with no contributing sample gives 0 (with a
  graph).
* Eq. 11, similarity matching: s_ij = 1 when samples i and j share a label, else 0
  (:func:`hashing.losses.pairwise_similarity`), so dissimilar codes are pushed to be
  orthogonal (cosine 0). The paper calls s_ij "similarity affinity distances between
  different samples" without defining them. Like the information-preservation term,
  it is a squared 2-norm of sample i: the sum over its partners j != i of the
  batch of (cos(b_i, b_j) - s_ij)^2, then the mean over the samples i. An earlier
  reading averaged over the pairs instead, which made this term (batch - 1) times
  lighter than beta * L_ip (a sum over the bits), so L_ip won at 32 bits and more
  and drove every code to one constant code (docs/results/pfmh-collapse/).
* Eq. 11, information preservation: ||B_i - b_i||_2^2 with B = sign(b) (sign(0) =
  +1, no gradient through B), summed over bits as the paper's squared 2-norm and
  averaged over the samples of the batch.

Ablations (Table 2, see :data:`ABLATIONS` and :func:`ablation_config`):

* ``w/o-P`` (removing local/global prototype contrast): ``use_global=False`` and
  ``use_local=False`` -- L = alpha L_sim + beta L_ip only; no prototypes are needed
  or exchanged (``use_completion=False`` too, and :attr:`PFMHLossConfig.
  uses_prototypes` is ``False``).
* ``w/o-PE`` (removing prototype enhancement): ``use_completion=False`` -- Eq. 7 is
  skipped, i.e. prototypes are exchanged FedProto-like without completion. The
  server sends each client only its own prototypes as personal set
  (:func:`hashing.pfmh.prototypes.aggregate_and_enhance` with ``complete=False``)
  and the trainer restricts the personal set to the classes the client holds in
  any case; L_global against P_bar is unchanged. Without completion the denominators
  of L_local only contain the client's own classes.
* ``w/o-Ls`` (excluding similarity matching): ``use_hash_similarity=False`` -- the
  alpha term of Eq. 11 is dropped.
* ``w/o-Ll`` (excluding information preservation, as the paper's ablation text
  defines it -- *not* L_local despite the subscript): ``use_information_preservation
  =False`` -- the beta term of Eq. 11 is dropped.

``use_local`` alone (dropping only L_local) is available but is not a Table 2 row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F

from hashing.losses import pairwise_similarity
from hashing.pfmh.forms import CONTRASTS
from hashing.pfmh.model import binary_codes

#: Paper defaults (Implementation Details).
DEFAULT_TAU = 0.07
DEFAULT_ALPHA = 1e-2
DEFAULT_BETA = 1e-3
#: Eq. 12 adds the prototype terms with weight 1.
DEFAULT_PROTOTYPE_WEIGHT = 1.0

#: Names of the loss parts reported by :func:`pfmh_loss`, in order.
LOSS_PARTS = ("global", "local", "hash_similarity", "information_preservation")

#: (vectors (m, k) float, classes (m,) int64) -- a prototype set as tensors.
PrototypeTensors = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class PFMHLossConfig:
    """Hyper-parameters and ablation switches of the PFMH client objective.

    Attributes
    ----------
    tau : float
        Temperature of Eqs. 9-10, > 0 (paper: 0.07).
    alpha : float
        Weight of similarity matching in Eq. 11, >= 0 (paper: 1e-2).
    beta : float
        Weight of information preservation in Eq. 11, >= 0 (paper: 1e-3).
    use_global : bool
        Include L_global (Eq. 9) against the centralized prototypes.
    use_local : bool
        Include L_local (Eq. 10) against the personal prototypes.
    use_hash_similarity : bool
        Include alpha * similarity matching (off in w/o-Ls).
    use_information_preservation : bool
        Include beta * information preservation (off in w/o-Ll).
    use_completion : bool
        Prototype enhancement, Eq. 7 (off in w/o-PE): read by the server step and
        by the trainer, which otherwise restricts the personal set to the classes
        the client holds.
    contrast : str
        Form of Eqs. 9-10, one of :data:`CONTRASTS`: ``"infonce"`` (the positive
        in the denominator) or ``"decoupled"`` (as printed, positive left out).
    prototype_weight : float
        gamma, the weight of both prototype terms (Eqs. 9-10) in the total, >= 0
        (paper: 1).
    """

    tau: float = DEFAULT_TAU
    alpha: float = DEFAULT_ALPHA
    beta: float = DEFAULT_BETA
    use_global: bool = True
    use_local: bool = True
    use_hash_similarity: bool = True
    use_information_preservation: bool = True
    use_completion: bool = True
    contrast: str = "infonce"
    prototype_weight: float = DEFAULT_PROTOTYPE_WEIGHT

    def __post_init__(self) -> None:
        """Validate tau > 0, alpha, beta, gamma >= 0 (all finite), the contrast form."""
        if self.contrast not in CONTRASTS:
            raise ValueError(
                f"contrast={self.contrast!r}: accepted are {', '.join(CONTRASTS)}"
            )
        if not (_finite(self.tau) and float(self.tau) > 0):
            raise ValueError(
                f"tau={self.tau!r}: the temperature must be a finite number > 0 "
                f"(paper: {DEFAULT_TAU})"
            )
        for name, default in (
            ("alpha", DEFAULT_ALPHA),
            ("beta", DEFAULT_BETA),
            ("prototype_weight", DEFAULT_PROTOTYPE_WEIGHT),
        ):
            value = getattr(self, name)
            if not (_finite(value) and float(value) >= 0):
                raise ValueError(
                    f"{name}={value!r}: must be a finite number >= 0 (paper: {default})"
                )

    @property
    def uses_prototypes(self) -> bool:
        """Whether any prototype term is on (``False`` in w/o-P)."""
        return self.use_global or self.use_local


#: Table 2 variants -> the switches each one turns off.
ABLATIONS: dict[str, dict[str, Any]] = {
    "full": {},
    "w/o-P": {"use_global": False, "use_local": False, "use_completion": False},
    "w/o-PE": {"use_completion": False},
    "w/o-Ls": {"use_hash_similarity": False},
    "w/o-Ll": {"use_information_preservation": False},
}


def ablation_config(name: str, **overrides: Any) -> PFMHLossConfig:
    """Loss config of a Table 2 variant, with optional field overrides.

    Parameters
    ----------
    name : str
        One of :data:`ABLATIONS`: ``full``, ``w/o-P``, ``w/o-PE``, ``w/o-Ls``,
        ``w/o-Ll``.
    **overrides
        Other :class:`PFMHLossConfig` fields, e.g. ``tau=0.1``.

    Returns
    -------
    PFMHLossConfig

    Raises
    ------
    ValueError
        Unknown variant name, or invalid values.
    """
    if name not in ABLATIONS:
        raise ValueError(f"ablation={name!r}: accepted are {', '.join(ABLATIONS)}")
    return replace(PFMHLossConfig(**overrides), **ABLATIONS[name])


def prototype_contrastive_loss(
    h: torch.Tensor,
    labels: torch.Tensor,
    prototypes: torch.Tensor,
    classes: torch.Tensor,
    *,
    tau: float,
    contrast: str = "infonce",
) -> torch.Tensor:
    """Eqs. 9/10: prototype contrast, mean over contributing samples.

    Parameters
    ----------
    h : torch.Tensor
        (n, k) integrated representations (unit-norm rows in PFMH).
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot.
    prototypes : torch.Tensor
        (m, k) prototype vectors.
    classes : torch.Tensor
        (m,) int64 class id of each prototype row (ids < C for multi-hot labels).
    tau : float
        Temperature, > 0.
    contrast : str
        ``"infonce"`` (positive in the denominator) or ``"decoupled"`` (left out).

    Returns
    -------
    torch.Tensor
        Scalar; see the module docstring for the exact formula. 0 (with a graph)
        when no sample has both a positive and a negative prototype.
    """
    if tau <= 0:
        raise ValueError(f"tau={tau!r}: the temperature must be > 0")
    if contrast not in CONTRASTS:
        raise ValueError(f"contrast={contrast!r}: accepted are {', '.join(CONTRASTS)}")
    classes = classes.to(h.device).long()
    if labels.dim() == 1:
        member = labels.to(h.device)[:, None] == classes[None, :]  # (n, m)
    else:
        member = labels.to(h.device)[:, classes] != 0
    valid = member.any(1) & (~member).any(1)
    if not bool(valid.any()):
        return h.sum() * 0.0
    # only contributing rows: every one has a negative, so no log(0) and no NaN
    # gradient from a logsumexp over -inf only
    member = member[valid]
    logits = h[valid] @ prototypes.to(h.device, h.dtype).T / tau  # (n_valid, m)
    lse_neg = torch.logsumexp(logits.masked_fill(member, -math.inf), dim=1)
    denominator = (
        torch.logaddexp(lse_neg[:, None], logits)  # the positive with the negatives
        if contrast == "infonce"
        else lse_neg[:, None]
    )
    per_pair = torch.where(member, denominator - logits, 0.0)
    return (per_pair.sum(1) / member.sum(1)).mean()


def global_contrastive_loss(
    h: torch.Tensor,
    labels: torch.Tensor,
    centralized: PrototypeTensors,
    *,
    tau: float,
    contrast: str = "infonce",
) -> torch.Tensor:
    """L_global (Eq. 9): contrast H against the centralized prototypes P_bar."""
    return prototype_contrastive_loss(
        h, labels, *centralized, tau=tau, contrast=contrast
    )


def local_contrastive_loss(
    h: torch.Tensor,
    labels: torch.Tensor,
    personal: PrototypeTensors,
    *,
    tau: float,
    contrast: str = "infonce",
) -> torch.Tensor:
    """L_local (Eq. 10): contrast H against the client's personal prototypes P_i."""
    return prototype_contrastive_loss(h, labels, *personal, tau=tau, contrast=contrast)


def similarity_matching_loss(b: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Eq. 11, first term without alpha: mean_i of sum_{j != i} (cos - s_ij)^2.

    Parameters
    ----------
    b : torch.Tensor
        (n, bits) relaxed codes.
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot; s_ij = 1 when i, j share a label.

    Returns
    -------
    torch.Tensor
        Scalar; 0 (with a graph) for a batch of fewer than two samples.
    """
    n = len(b)
    if n < 2:
        return b.sum() * 0.0
    cos = F.normalize(b, dim=1) @ F.normalize(b, dim=1).T
    s = pairwise_similarity(labels.to(b.device)).to(b.dtype)
    off = ~torch.eye(n, dtype=torch.bool, device=b.device)
    return ((cos - s).pow(2) * off).sum(1).mean()


def information_preservation_loss(b: torch.Tensor) -> torch.Tensor:
    """Eq. 11, second term without beta: mean over samples of ||B_i - b_i||_2^2.

    Parameters
    ----------
    b : torch.Tensor
        (n, bits) relaxed codes; B = sign(b) with sign(0) = +1, detached.

    Returns
    -------
    torch.Tensor
        Scalar (squared norm summed over bits, averaged over samples).
    """
    if len(b) == 0:
        return b.sum() * 0.0
    return (binary_codes(b) - b).pow(2).sum(1).mean()


def hash_loss(
    b: torch.Tensor, labels: torch.Tensor, *, alpha: float, beta: float
) -> torch.Tensor:
    """L_hash (Eq. 11) = alpha * similarity matching + beta * information pres."""
    return alpha * similarity_matching_loss(b, labels) + beta * (
        information_preservation_loss(b)
    )


def pfmh_loss(
    h: torch.Tensor,
    b: torch.Tensor,
    labels: torch.Tensor,
    *,
    personal: PrototypeTensors | None,
    centralized: PrototypeTensors | None,
    config: PFMHLossConfig,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Total client objective L (Eq. 12) of one mini-batch, with its parts.

    Parameters
    ----------
    h : torch.Tensor
        (n, k) integrated representations H.
    b : torch.Tensor
        (n, bits) relaxed codes.
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot.
    personal : tuple of torch.Tensor or None
        ``(vectors (m, k), classes (m,))`` personal set P_i for L_local; ``None``
        when there is none yet (the term is then skipped).
    centralized : tuple of torch.Tensor or None
        The centralized set P_bar for L_global; ``None`` skips the term.
    config : PFMHLossConfig
        Weights and switches.

    Returns
    -------
    total : torch.Tensor
        Scalar sum of the enabled, available terms.
    parts : dict of str to torch.Tensor
        :data:`LOSS_PARTS` -> the (weighted) scalar term; switched-off or
        unavailable terms are 0.
    """
    zero = h.new_zeros(())
    parts = dict.fromkeys(LOSS_PARTS, zero)
    if config.use_global and centralized is not None:
        parts["global"] = config.prototype_weight * global_contrastive_loss(
            h, labels, centralized, tau=config.tau, contrast=config.contrast
        )
    if config.use_local and personal is not None:
        parts["local"] = config.prototype_weight * local_contrastive_loss(
            h, labels, personal, tau=config.tau, contrast=config.contrast
        )
    if config.use_hash_similarity:
        parts["hash_similarity"] = config.alpha * similarity_matching_loss(b, labels)
    if config.use_information_preservation:
        info = information_preservation_loss(b)
        parts["information_preservation"] = config.beta * info
    total = sum(parts.values(), h.sum() * 0.0 + b.sum() * 0.0)
    return total, parts


def _finite(value: object) -> bool:
    try:
        return math.isfinite(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
