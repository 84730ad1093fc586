"""PFMH's multi-modal hashing network (Eqs. 1-4, 8 and 13), plain PyTorch.

For every modality ``m`` (any number >= 2, e.g. ``image`` and ``text`` from the
``.npz`` feature format, or ``image`` and ``hog`` of multi-view digits)::

    f_m  = FeaExtractor_m(x_m)               (n, k)    Eq. 1
    C_m  = FeaRefiner_m(f_m)                 (n, k)    Eq. 2, entries in (0, 1)
    f'_m = f_m * C_m                         (n, k)    Eq. 3, elementwise
    H    = Integrate(f'_1 (+) ... (+) f'_M)  (n, k)    Eq. 4, (+) = concatenation
    b    = tanh(HashEncoder(H))              (n, bits) Eq. 8, relaxed codes
    B    = sign(b)                           (n, bits) in {-1, +1}, sign(0) = +1

The paper writes the matrices as (k, m_i), one column per sample; here every tensor
is (n, k), one row per sample, as usual in PyTorch.

Input convention: :meth:`MultiModalHash.forward` takes a ``dict`` mapping modality
name -> (n, ...) float tensor. The keys must be exactly the modalities the model was
built for (extra or missing keys are a ``ValueError``); dict order does not matter.
The concatenation order of Eq. 4 is the model's :attr:`MultiModalHash.modalities`,
fixed at construction: ``"image"`` first, then the other names alphabetically (the
same order as :attr:`hashdata.HashDataset.modalities`). Per-sample inputs of any
shape are flattened, so an ``(n, 1, 8, 8)`` image modality also works.

Decisions where the paper is not specific (paper's "Implementation Details" only
say: 512-d common space, FeaExtractor = input, hidden and output layers with
Dropout, FeaRefiner = "a sequence of linear layers with nonlinear activations"):

* FeaExtractor_m (Eq. 1): ``Linear(d_m, hidden) - ReLU - Dropout(p) -
  Linear(hidden, k)``; ``hidden`` defaults to ``k``, ``p`` to 0.1 (the paper gives
  no rate). No activation on the output, so f_m can take either sign.
* FeaRefiner_m (Eq. 2): ``Linear(k, k) - ReLU - Linear(k, k) - Sigmoid``. The
  sigmoid makes C_m a gate in (0, 1) that can only damp ("remove redundant and noisy
  information") or keep each feature; the paper does not name the final activation.
  One refiner per modality (theta_2* is modality specific in Eq. 2).
* Integrate (Eq. 4): ``Linear(M k, k) - ReLU - Linear(k, k)``, then every row of H
  is scaled to unit L2 norm. The paper gives no architecture. Unit-norm H makes the
  dot products H . P of Eqs. 9-10 cosine similarities in [-1, 1], the setting in
  which the paper's temperature tau = 0.07 (the usual InfoNCE value) is meaningful;
  with unnormalised H the logits H . P / 0.07 are unbounded. It also keeps the class
  means of Eq. 5 from being dominated by a few large-norm samples.
* HashEncoder (Eq. 8): one ``Linear(k, bits)`` followed by ``tanh`` ("a hashing
  layer"); B = sign(b) with sign(0) = +1, as everywhere in this project.
* No BatchNorm anywhere (dropout only), so the model also works with per-sample
  gradient tools and batches of any size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

#: Paper defaults (Implementation Details): 512-d common space.
DEFAULT_LATENT_DIM = 512
#: Our choice; the paper uses Dropout without giving its rate.
DEFAULT_DROPOUT = 0.1


def modality_order(names: Iterable[str]) -> tuple[str, ...]:
    """Canonical modality order: ``"image"`` first, then alphabetical.

    Parameters
    ----------
    names : iterable of str
        Modality names.

    Returns
    -------
    tuple of str
        The names in concatenation order of Eq. 4.
    """
    return tuple(sorted(names, key=lambda m: (m != "image", m)))


class FeaExtractor(nn.Module):
    """Eq. 1: one modality's features (n, d) -> common space (n, k).

    Parameters
    ----------
    in_dim : int
        Flattened per-sample input size d of the modality.
    k : int
        Common latent dimension.
    hidden_dim : int
        Width of the hidden layer.
    dropout : float
        Dropout probability after the hidden layer.
    """

    def __init__(self, in_dim: int, k: int, *, hidden_dim: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden_dim),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, k),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map (n, ...) inputs (flattened to (n, d)) to f: (n, k)."""
        return self.net(x.flatten(1))


class FeaRefiner(nn.Module):
    """Eq. 2: refinement matrix C = sigmoid(MLP(f)) in (0, 1), shape (n, k).

    Parameters
    ----------
    k : int
        Common latent dimension.
    """

    def __init__(self, k: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(k, k), nn.ReLU(), nn.Linear(k, k), nn.Sigmoid()
        )

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        """Map f: (n, k) to C: (n, k) in (0, 1)."""
        return self.net(f)


class Integrate(nn.Module):
    """Eq. 4: concatenated refined features (n, M k) -> unit-norm H (n, k).

    Parameters
    ----------
    num_modalities : int
        M, the number of concatenated modalities.
    k : int
        Common latent dimension.
    """

    def __init__(self, num_modalities: int, k: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(num_modalities * k, k), nn.ReLU(), nn.Linear(k, k)
        )

    def forward(self, refined: torch.Tensor) -> torch.Tensor:
        """Map (n, M k) to H: (n, k) with unit-L2-norm rows."""
        return F.normalize(self.net(refined), dim=1)


class MultiModalHash(nn.Module):
    """PFMH network: dict of modality tensors -> (H, b).

    Parameters
    ----------
    input_dims : mapping of str to int
        Modality name -> flattened per-sample input size; at least two modalities.
    bits : int
        Code length.
    k : int
        Common latent dimension (the paper: 512).
    hidden_dim : int or None
        Hidden width of every FeaExtractor; ``None`` means ``k``.
    dropout : float
        Dropout probability in the FeaExtractors, in [0, 1).

    Attributes
    ----------
    modalities : tuple of str
        Modality names in concatenation order (see :func:`modality_order`).
    k : int
        Dimension of H (and of the prototypes).
    bits : int
        Code length.
    """

    def __init__(
        self,
        input_dims: Mapping[str, int],
        bits: int,
        *,
        k: int = DEFAULT_LATENT_DIM,
        hidden_dim: int | None = None,
        dropout: float = DEFAULT_DROPOUT,
    ) -> None:
        super().__init__()
        _check_model_args(input_dims, bits=bits, k=k, dropout=dropout)
        hidden = k if hidden_dim is None else int(hidden_dim)
        if hidden < 1:
            raise ValueError(f"hidden_dim={hidden_dim!r}: must be >= 1 (or None = k)")
        self.modalities: tuple[str, ...] = modality_order(input_dims)
        self.k = int(k)
        self.bits = int(bits)
        self.extractors = nn.ModuleDict(
            {
                m: FeaExtractor(
                    int(input_dims[m]), self.k, hidden_dim=hidden, dropout=dropout
                )
                for m in self.modalities
            }
        )
        self.refiners = nn.ModuleDict({m: FeaRefiner(self.k) for m in self.modalities})
        self.integrate = Integrate(len(self.modalities), self.k)
        self.hash_encoder = nn.Linear(self.k, self.bits)

    def check_inputs(self, inputs: Mapping[str, torch.Tensor]) -> int:
        """Validate the modality dict; return the number of samples n.

        Raises
        ------
        ValueError
            Missing or unexpected modality names, or modalities of different
            lengths.
        """
        if not isinstance(inputs, Mapping):
            raise ValueError(
                f"inputs must be a dict of modality name -> tensor with keys "
                f"{list(self.modalities)}, got {type(inputs).__name__}"
            )
        if set(inputs) != set(self.modalities):
            raise ValueError(
                f"inputs have modalities {sorted(inputs)}, the model expects exactly "
                f"{list(self.modalities)}"
            )
        lengths = {m: len(inputs[m]) for m in self.modalities}
        if len(set(lengths.values())) != 1:
            raise ValueError(
                f"modality arrays have different lengths {lengths}; every modality "
                "needs one row per sample"
            )
        return next(iter(lengths.values()))

    def refined_features(
        self, inputs: Mapping[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """Eqs. 1-3: f'_m = f_m * C_m for every modality, each (n, k)."""
        self.check_inputs(inputs)
        out = {}
        for m in self.modalities:
            f = self.extractors[m](inputs[m])
            out[m] = f * self.refiners[m](f)
        return out

    def forward(
        self, inputs: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Compute H (Eq. 4) and the relaxed codes b (Eq. 8).

        Parameters
        ----------
        inputs : mapping of str to torch.Tensor
            Modality name -> (n, ...) float tensor, keys exactly
            :attr:`modalities`.

        Returns
        -------
        h : torch.Tensor
            (n, k) integrated representation, unit L2 norm per row.
        b : torch.Tensor
            (n, bits) relaxed codes in (-1, 1); ``B = sign(b)``.
        """
        refined = self.refined_features(inputs)
        h = self.integrate(torch.cat([refined[m] for m in self.modalities], dim=1))
        return h, torch.tanh(self.hash_encoder(h))


def binary_codes(b: torch.Tensor) -> torch.Tensor:
    """B = sign(b) in {-1, +1} with sign(0) = +1 (Eq. 8 / Eq. 11).

    Parameters
    ----------
    b : torch.Tensor
        (n, bits) relaxed codes.

    Returns
    -------
    torch.Tensor
        (n, bits), same dtype as ``b``, no gradient.
    """
    return torch.where(b.detach() >= 0, 1.0, -1.0).to(b.dtype)


def build_multimodal_model(
    input_dims: Mapping[str, int],
    *,
    bits: int,
    k: int = DEFAULT_LATENT_DIM,
    dropout: float = DEFAULT_DROPOUT,
    hidden_dim: int | None = None,
    seed: int | None = None,
) -> MultiModalHash:
    """Build a :class:`MultiModalHash`, optionally with seeded initial weights.

    Parameters
    ----------
    input_dims : mapping of str to int
        Modality name -> flattened per-sample input size (>= 2 modalities), e.g.
        ``{m: x[0].size for m, x in ds.inputs.items()}``.
    bits : int
        Code length (>= 1).
    k : int
        Common latent dimension (paper: 512).
    dropout : float
        FeaExtractor dropout probability in [0, 1).
    hidden_dim : int or None
        FeaExtractor hidden width; ``None`` means ``k``.
    seed : int or None
        If given, the initial weights are drawn from ``torch.manual_seed(seed)``
        inside :func:`torch.random.fork_rng`, so the global RNG state is left
        unchanged and the same seed gives the same weights.

    Returns
    -------
    MultiModalHash

    Raises
    ------
    ValueError
        Fewer than two modalities, non-positive sizes, or a dropout outside [0, 1).
    """
    _check_model_args(input_dims, bits=bits, k=k, dropout=dropout)
    if seed is None:
        return MultiModalHash(
            input_dims, bits, k=k, hidden_dim=hidden_dim, dropout=dropout
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return MultiModalHash(
            input_dims, bits, k=k, hidden_dim=hidden_dim, dropout=dropout
        )


def _check_model_args(
    input_dims: Mapping[str, int], *, bits: int, k: int, dropout: float
) -> None:
    names = list(input_dims)
    if len(names) < 2:
        raise ValueError(
            f"PFMH needs at least two modalities, got {len(names)}: {names}; "
            "provide e.g. {'image': d1, 'text': d2}"
        )
    bad = {m: d for m, d in input_dims.items() if int(d) < 1}
    if bad:
        raise ValueError(f"input_dims {bad}: every modality size must be >= 1")
    if int(bits) < 1:
        raise ValueError(f"bits={bits!r}: must be >= 1")
    if int(k) < 1:
        raise ValueError(f"k={k!r}: the latent dimension must be >= 1")
    if not 0.0 <= float(dropout) < 1.0:
        raise ValueError(f"dropout={dropout!r}: accepted are values in [0, 1)")
