"""Mini-batch order of the local training loops (one for every method).

Kept in its own module so that the generic loops (:mod:`hashing.train`) and the
methods' loops (:mod:`hashing.fedhap.train`, :mod:`hashing.pfmh.train`) share it
without importing each other.
"""

from __future__ import annotations

import torch


def iterate_minibatches(
    n: int, batch_size: int, *, generator: torch.Generator
) -> list[torch.Tensor]:
    """Shuffled index batches covering range(n) once.

    A trailing batch of a single sample is merged into the previous one, since a
    pairwise loss needs at least two samples.
    """
    order = torch.randperm(n, generator=generator)
    batches = list(order.split(batch_size))
    if len(batches) > 1 and len(batches[-1]) < 2:
        last = batches.pop()
        batches[-1] = torch.cat([batches[-1], last])
    return batches
