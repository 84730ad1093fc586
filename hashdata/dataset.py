"""The in-memory dataset every loader returns (:class:`HashDataset`).

Kept apart from the loaders so that every module that builds one (``loaders``,
``multiview``) imports it from here, and neither imports the other's module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class HashDataset:
    """A labelled dataset held in memory, ready for hashing experiments.

    Attributes
    ----------
    name : str
        ``"digits"``, ``"npz:<file stem>"``, ``"cifar10"`` or ``"multiview-digits"``.
    inputs : dict[str, numpy.ndarray]
        Modality name -> ``(n, ...)`` float32 array. Images are ``(n, C, H, W)``
        (modality ``"image"``); feature vectors are ``(n, d)``.
    labels : numpy.ndarray
        ``(n,)`` int64 class indices (single-label) or ``(n, num_classes)`` uint8
        multi-hot rows (multi-label).
    num_classes : int
        Number of classes (``labels.max() + 1`` for single-label, ``labels.shape[1]``
        for multi-label).
    multi_label : bool
        Whether ``labels`` is multi-hot.
    kind : str
        ``"image"`` (raw images, for CNNs) or ``"features"`` (vectors, for MLPs).
    description : str
        One line describing the data, for results files.
    scaled : bool
        ``True`` when the loader itself normalises the inputs (``digits``,
        ``multiview-digits``, ``cifar10``): ``feature-scaling = "auto"`` then keeps
        them exactly as loaded (:mod:`hashdata.scaling`). ``False`` for ``.npz``
        data, which comes as the user made it.
    fixed_split : numpy.ndarray or None
        ``(n,)`` bool, True for the query rows of the split the data file carries
        (the ``.npz`` array ``split``, :func:`hashdata.protocol.fixed_split_mask`);
        ``None`` when it carries none (the query set is then drawn with
        ``query-fraction`` and ``seed``).

    """

    name: str
    inputs: dict[str, np.ndarray]
    labels: np.ndarray
    num_classes: int
    multi_label: bool
    kind: str
    description: str
    scaled: bool = False
    fixed_split: np.ndarray | None = None

    def __post_init__(self) -> None:
        """Check that every array has one row per label."""
        if not self.inputs:
            raise ValueError(f"HashDataset {self.name!r} has no input modality")
        n = len(self.labels)
        for modality, array in self.inputs.items():
            if len(array) != n:
                raise ValueError(
                    f"HashDataset {self.name!r}: modality {modality!r} has "
                    f"{len(array)} rows but there are {n} labels"
                )
        split = self.fixed_split
        if split is not None and (split.dtype != np.bool_ or split.shape != (n,)):
            raise ValueError(
                f"HashDataset {self.name!r}: fixed_split must be ({n},) bool, got "
                f"{split.dtype} {split.shape}"
            )
        if self.kind not in ("image", "features"):
            raise ValueError(f"kind must be 'image' or 'features', got {self.kind!r}")

    @property
    def n(self) -> int:
        """Number of samples."""
        return int(len(self.labels))

    @property
    def modalities(self) -> list[str]:
        """Modality names, sorted, with ``"image"`` first when present."""
        return sorted(self.inputs, key=lambda m: (m != "image", m))

    def select(self, indices: Sequence[int] | np.ndarray) -> HashDataset:
        """Return the subset at ``indices`` (a copy) as a new :class:`HashDataset`.

        Parameters
        ----------
        indices : array-like of int, shape (m,)
            Row indices into this dataset.

        Returns
        -------
        HashDataset
            Same name/kind/classes, ``m`` samples (and their rows of
            ``fixed_split``).

        """
        idx = np.asarray(indices, dtype=np.int64)
        return HashDataset(
            name=self.name,
            inputs={m: a[idx] for m, a in self.inputs.items()},
            labels=self.labels[idx],
            num_classes=self.num_classes,
            multi_label=self.multi_label,
            kind=self.kind,
            description=self.description,
            scaled=self.scaled,
            fixed_split=None if self.fixed_split is None else self.fixed_split[idx],
        )
