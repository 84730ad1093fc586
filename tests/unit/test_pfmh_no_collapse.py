"""PFMH's hash loss alone (w/o-P) must not drive every code to one constant code.

Regression test for the Eq. 11 reading (docs/results/pfmh-collapse/): with the
similarity term averaged over pairs, beta * L_ip (summed over bits) outweighed
alpha * L_sim at 64 bits and training collapsed to a single code within the first
epochs. With L_sim summed over the partners j (a squared 2-norm per sample, as the
paper writes it) the codes stay spread.
"""

from __future__ import annotations

import numpy as np
import torch

from hashdata import load_split
from hashing.pfmh.train import embed_multimodal, train_pfmh
from settings.run_settings import RunSettings
from strategies.pfmh.model import build_pfmh_model, pfmh_loss_config

CPU = torch.device("cpu")


def test_hash_loss_alone_keeps_64_bit_codes_apart():
    torch.manual_seed(0)
    s = RunSettings.from_config(
        {
            "strategy": "pfmh",
            "dataset": "multiview-digits",
            "code-length": 64,
            "pfmh.variant": "wo-p",
            "pfmh.mode": "fedavg",
            "learning-rate": 1e-4,
            "weight-decay": 1e-6,
            "device": "cpu",
        }
    )
    split = load_split(s.dataset, **s.split_options())
    ds, db = split.dataset, split.database_index
    x = {
        m: torch.from_numpy(np.asarray(v)).float().flatten(1)[db]
        for m, v in ds.inputs.items()
    }
    y = torch.from_numpy(ds.labels)[db]
    model = build_pfmh_model(s, {m: t.shape[1] for m, t in x.items()})
    train_pfmh(
        model,
        x,
        y,
        personal_prototypes=None,
        global_prototypes=None,
        config=pfmh_loss_config(s),
        num_classes=10,
        epochs=6,
        batch_size=64,
        learning_rate=1e-4,
        weight_decay=1e-6,
        device=CPU,
        generator=torch.Generator().manual_seed(0),
    )
    _, b = embed_multimodal(model, x, device=CPU)
    codes = np.where(b.numpy() >= 0, 1, -1)
    constant_bits = int((np.abs(codes.mean(0)) == 1).sum())
    distinct = len(np.unique(codes, axis=0))
    # 10 classes: a working code has about one code per class and no constant bit;
    # the collapsed reading gave 1 code with all 64 bits constant
    assert distinct >= 8, (distinct, constant_bits)
    assert constant_bits <= 4, (distinct, constant_bits)
