"""PFMH local training (Algorithm 1, client part), encoding and local prototypes.

One call of :func:`train_pfmh` is lines 13-18 of Algorithm 1: with the received
personal set P_i and centralized set P_bar held fixed, ``epochs`` passes of Adam
over shuffled mini-batches minimising Eq. 12 (:func:`hashing.pfmh.losses.pfmh_loss`).
:func:`local_prototypes` is UpdateClient / line 19: Eq. 5 over the client's whole
training set, computed after training in eval mode (no dropout) for the upload.

Decisions where Algorithm 1 is vague:

* Line 19 recomputes P_i "from the current batch" at the end of every epoch. We keep
  the received sets fixed for the whole round (they are the server's completed sets;
  recomputing them locally would drop the completion of Eq. 7) and compute the
  upload once, after the round, over all local samples (:func:`local_prototypes`).
* Line 1 initialises the prototypes before any training. In a Flower round the
  client trains on what it received, so in the first round there are none:
  ``personal_prototypes=None`` / ``global_prototypes=None`` skip L_local / L_global
  (only L_hash is trained). A strategy that wants line 1 literally can run a
  prototype-only round first (``local_prototypes`` without training).
* Only prototypes are exchanged in PFMH; the model weights stay on the client.
* Paper defaults: Adam, learning rate 1e-5, weight decay 1e-6, batch size 64.
  The number of local epochs E is not given.

Determinism: the mini-batch order comes from ``generator``; dropout draws from the
global torch RNG, so :func:`train_pfmh` seeds it from ``generator`` inside
:func:`torch.random.fork_rng` (the caller's global RNG state is left unchanged). On
CPU two calls with equally seeded generators give identical weights.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from hashing.batches import iterate_minibatches
from hashing.pfmh.losses import LOSS_PARTS, PFMHLossConfig, PrototypeTensors, pfmh_loss
from hashing.pfmh.model import MultiModalHash
from hashing.pfmh.prototypes import client_prototypes, require_valid_prototypes
from hashing.prototypes import ClassPrototypes, PrototypeSet

#: Paper defaults (Implementation Details).
PAPER_LEARNING_RATE = 1e-5
PAPER_WEIGHT_DECAY = 1e-6
PAPER_BATCH_SIZE = 64


def prototype_tensors(
    protos: PrototypeSet | ClassPrototypes, *, device: torch.device
) -> PrototypeTensors:
    """``(vectors (m, k) float32, classes (m,) int64)`` on ``device``."""
    return (
        torch.as_tensor(np.asarray(protos.vectors), dtype=torch.float32).to(device),
        torch.as_tensor(np.asarray(protos.classes), dtype=torch.int64).to(device),
    )


def held_classes(labels: torch.Tensor, *, num_classes: int) -> np.ndarray:
    """Sorted class ids with at least one sample in ``labels``.

    Parameters
    ----------
    labels : torch.Tensor
        (n,) class ids or (n, C) multi-hot.
    num_classes : int
        Size of the label space C.

    Returns
    -------
    np.ndarray
        (m,) int64.
    """
    y = labels.detach().cpu()
    if y.dim() == 1:
        present = torch.unique(y)
        present = present[(present >= 0) & (present < num_classes)]
        return present.numpy().astype(np.int64)
    return torch.nonzero((y != 0).any(0)).flatten().numpy().astype(np.int64)


def restrict_to_classes(protos: PrototypeSet, classes: np.ndarray) -> PrototypeSet:
    """Keep the rows of ``protos`` whose class is in ``classes`` (w/o-PE)."""
    keep = np.isin(protos.classes, classes)
    return PrototypeSet(classes=protos.classes[keep], vectors=protos.vectors[keep])


def train_pfmh(
    model: MultiModalHash,
    inputs: Mapping[str, torch.Tensor],
    labels: torch.Tensor,
    *,
    personal_prototypes: PrototypeSet | None,
    global_prototypes: PrototypeSet | None,
    config: PFMHLossConfig,
    num_classes: int,
    epochs: int,
    batch_size: int = PAPER_BATCH_SIZE,
    learning_rate: float = PAPER_LEARNING_RATE,
    weight_decay: float = PAPER_WEIGHT_DECAY,
    device: torch.device,
    generator: torch.Generator,
) -> dict[str, float]:
    """Train ``model`` in place for one round of PFMH local optimisation.

    Parameters
    ----------
    model : MultiModalHash
        The client's network (its weights persist across rounds on the client).
    inputs : mapping of str to torch.Tensor
        Modality name -> (n, ...) float32 local samples (CPU); keys exactly
        ``model.modalities``.
    labels : torch.Tensor
        (n,) int64 class ids or (n, num_classes) multi-hot (CPU).
    personal_prototypes : PrototypeSet or None
        P_i as received (completed by Eq. 7 unless w/o-PE); ``None`` skips
        L_local. With ``config.use_completion=False`` it is restricted to the
        classes present in ``labels``.
    global_prototypes : PrototypeSet or None
        P_bar (Eq. 6); ``None`` skips L_global.
    config : PFMHLossConfig
        Loss weights and ablation switches.
    num_classes : int
        Size of the label space C (for validating the prototype sets).
    epochs : int
        Local epochs E (>= 1).
    batch_size : int
        Mini-batch size (>= 2; paper: 64).
    learning_rate : float
        Adam step size (> 0; paper: 1e-5).
    weight_decay : float
        Adam L2 weight decay (>= 0; paper: 1e-6).
    device : torch.device
        Where to train.
    generator : torch.Generator
        CPU generator for the mini-batch order and the dropout seed.

    Returns
    -------
    dict
        Means over steps of ``loss`` (Eq. 12) and of its weighted parts
        ``global``, ``local``, ``hash_similarity``, ``information_preservation``;
        ``steps``; ``used_global`` and ``used_local`` (1.0 if the term was on and
        its prototypes available, else 0.0).

    Raises
    ------
    ValueError
        Bad inputs (modalities, lengths), hyper-parameters or prototype sets.
    """
    n = model.check_inputs(inputs)
    if len(labels) != n:
        raise ValueError(f"labels have {len(labels)} rows but the inputs have {n}")
    if n < 2:
        raise ValueError(f"PFMH local training needs >= 2 samples, got {n}")
    if int(epochs) < 1:
        raise ValueError(f"epochs={epochs!r}: must be >= 1")
    if int(batch_size) < 2:
        raise ValueError(f"batch_size={batch_size!r}: must be >= 2 (pairwise loss)")
    if not float(learning_rate) > 0:
        raise ValueError(f"learning_rate={learning_rate!r}: must be > 0")
    if not float(weight_decay) >= 0:
        raise ValueError(f"weight_decay={weight_decay!r}: must be >= 0")
    for name, protos in (
        ("personal_prototypes", personal_prototypes),
        ("global_prototypes", global_prototypes),
    ):
        if protos is not None:
            require_valid_prototypes(
                protos, num_classes=num_classes, dim=model.k, name=name
            )
    if personal_prototypes is not None and not config.use_completion:
        personal_prototypes = restrict_to_classes(
            personal_prototypes, held_classes(labels, num_classes=num_classes)
        )
    personal = (
        prototype_tensors(personal_prototypes, device=device)
        if config.use_local
        and personal_prototypes is not None
        and len(personal_prototypes.classes)
        else None
    )
    central = (
        prototype_tensors(global_prototypes, device=device)
        if config.use_global and global_prototypes is not None
        else None
    )

    model.to(device).train()
    optimizer = torch.optim.Adam(
        model.parameters(), lr=float(learning_rate), weight_decay=float(weight_decay)
    )
    dropout_seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    sums = dict.fromkeys(("loss", *LOSS_PARTS), 0.0)
    steps = 0
    with torch.random.fork_rng(devices=_rng_devices(device)):
        torch.manual_seed(dropout_seed)
        for _ in range(int(epochs)):
            for idx in iterate_minibatches(n, int(batch_size), generator=generator):
                x = {m: inputs[m][idx].to(device, non_blocking=True) for m in inputs}
                y = labels[idx].to(device, non_blocking=True)
                h, b = model(x)
                loss, parts = pfmh_loss(
                    h, b, y, personal=personal, centralized=central, config=config
                )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                sums["loss"] += float(loss.detach())
                for key, value in parts.items():
                    sums[key] += float(value.detach())
                steps += 1
    out = {key: value / max(steps, 1) for key, value in sums.items()}
    out["steps"] = float(steps)
    out["used_global"] = float(central is not None)
    out["used_local"] = float(personal is not None)
    return out


@torch.no_grad()
def embed_multimodal(
    model: MultiModalHash,
    inputs: Mapping[str, torch.Tensor],
    *,
    device: torch.device,
    batch_size: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """H and relaxed codes b of ``inputs`` in eval mode (the model is left in eval).

    Returns
    -------
    h : torch.Tensor
        (n, k) float32 on CPU, unit-norm rows.
    b : torch.Tensor
        (n, bits) float32 on CPU, in (-1, 1).
    """
    n = model.check_inputs(inputs)
    model.to(device).eval()
    hs, bs = [], []
    for start in range(0, n, batch_size):
        x = {m: t[start : start + batch_size].to(device) for m, t in inputs.items()}
        h, b = model(x)
        hs.append(h.float().cpu())
        bs.append(b.float().cpu())
    if not hs:
        return torch.zeros(0, model.k), torch.zeros(0, model.bits)
    return torch.cat(hs), torch.cat(bs)


def encode_multimodal(
    model: MultiModalHash,
    inputs: Mapping[str, torch.Tensor],
    *,
    device: torch.device,
    batch_size: int = 1024,
) -> torch.Tensor:
    """Relaxed codes b (Eq. 13 before the sign) in eval mode.

    Returns
    -------
    torch.Tensor
        (n, bits) float32 on CPU; ``hashing.codes.sign_codes`` binarises them.
    """
    return embed_multimodal(model, inputs, device=device, batch_size=batch_size)[1]


def local_prototypes(
    model: MultiModalHash,
    inputs: Mapping[str, torch.Tensor],
    labels: torch.Tensor,
    *,
    num_classes: int,
    device: torch.device,
    batch_size: int = 1024,
) -> ClassPrototypes:
    """Eq. 5 over all local samples, H computed in eval mode: the client upload."""
    h, _ = embed_multimodal(model, inputs, device=device, batch_size=batch_size)
    return client_prototypes(h, labels, num_classes=num_classes)


def _rng_devices(device: torch.device) -> list[int]:
    if device.type == "cuda":
        index = device.index
        return [torch.cuda.current_device() if index is None else index]
    return []
