"""A DPcode release <-> Flower records (the reply of ``query.dpcode``)."""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord

from privacy.dpcode import Release

PATTERN_WORDS = "pattern-words"  # int64, the patterns' word ids, concatenated
PATTERN_LENGTHS = "pattern-lengths"  # int64, one length per pattern
SUPPORTS = "supports"  # float64, one noisy support per pattern


def release_records(release: Release) -> tuple[ArrayRecord, ConfigRecord]:
    """Encode the published patterns (arrays) and their metadata (config)."""
    words = [w for p in release.patterns for w in p]
    arrays = ArrayRecord(
        {
            PATTERN_WORDS: Array(np.asarray(words, dtype=np.int64)),
            PATTERN_LENGTHS: Array(
                np.asarray([len(p) for p in release.patterns], dtype=np.int64)
            ),
            SUPPORTS: Array(np.asarray(release.supports, dtype=np.float64)),
        }
    )
    config = ConfigRecord(
        {
            "epsilon": release.epsilon_spent,
            "unit": release.unit,
            "delta": release.delta,
            "mechanism": release.mechanism,
            "vocabulary": release.vocabulary,
            "k": release.k,
            "max-length": release.max_length,
        }
    )
    return arrays, config


def read_release(arrays: ArrayRecord, config: ConfigRecord, *, k: int) -> Release:
    """Decode and check a client's release; ``ValueError`` names what is wrong."""
    try:
        words = arrays[PATTERN_WORDS].numpy()
        lengths = arrays[PATTERN_LENGTHS].numpy()
        supports = arrays[SUPPORTS].numpy()
    except KeyError as exc:
        raise ValueError(f"release lacks {exc}") from None
    if words.dtype != np.int64 or lengths.dtype != np.int64:
        raise ValueError("pattern words and lengths must be int64")
    if lengths.ndim != 1 or supports.shape != lengths.shape:
        raise ValueError("one support per pattern is accepted")
    if len(lengths) > k or (lengths < 1).any() or int(lengths.sum()) != len(words):
        raise ValueError(f"at most k={k} non-empty patterns are accepted")
    if not np.isfinite(supports).all() or (words < 0).any():
        raise ValueError("supports must be finite and word ids >= 0")
    if int(config.get("max-length", 0)) < int(lengths.max(initial=0)):
        raise ValueError("a pattern is longer than the release's max-length")
    ends = np.cumsum(lengths)
    patterns = tuple(
        tuple(int(w) for w in words[e - n : e])
        for n, e in zip(lengths, ends, strict=True)
    )
    return Release(
        patterns=patterns,
        supports=tuple(float(v) for v in supports),
        epsilon_spent=float(config["epsilon"]),
        unit=str(config["unit"]),
        delta=float(config["delta"]),
        mechanism=str(config["mechanism"]),
        vocabulary=str(config["vocabulary"]),
        k=int(config["k"]),
        max_length=int(config["max-length"]),
    )
