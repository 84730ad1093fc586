"""experiments.linear_probe: class-balanced training rows, accuracy on the queries."""

import numpy as np
import pytest

from experiments.linear_probe import linear_probe


def test_probe_separates_separable_features_and_not_noise() -> None:
    rng = np.random.default_rng(0)
    labels = np.arange(400) % 4
    split = (np.arange(400) >= 300).astype(np.int8)
    centers = rng.normal(0, 3, (4, 16))
    x = centers[labels] + rng.normal(0, 1, (400, 16))
    good = linear_probe(x, labels, split, train_per_class=20, seed=0)
    assert good == {"accuracy": good["accuracy"], "train_rows": 80, "test_rows": 100}
    assert good["accuracy"] > 0.9
    noise = linear_probe(
        rng.normal(0, 1, (400, 16)), labels, split, train_per_class=20, seed=0
    )
    assert noise["accuracy"] < 0.5
    with pytest.raises(ValueError, match="class 0 has 75"):
        linear_probe(x, labels, split, train_per_class=80, seed=0)
