"""``train-size``: the papers' training subsets, the same rows on every node."""

import numpy as np
import pytest
import torch

from clients.data import clear_cache, load_local_data
from hashdata import load_split, training_mask
from server.experiment import prepare_data, protocol_text
from settings.check import ConfigError
from settings.run_settings import RunSettings


def test_training_mask_is_seeded_and_sized() -> None:
    assert training_mask(100, 0, seed=1) is None
    a = training_mask(100, 30, seed=1)
    assert a.dtype == bool and a.sum() == 30
    np.testing.assert_array_equal(a, training_mask(100, 30, seed=1))
    assert not np.array_equal(a, training_mask(100, 30, seed=2))
    assert training_mask(100, 100, seed=1).all()
    with pytest.raises(ValueError, match=r"train-size=101.*1\.\.100"):
        training_mask(100, 101, seed=1)


def test_clients_train_on_their_rows_of_one_subset_and_encode_all() -> None:
    clear_cache()
    settings = RunSettings.from_config({"train-size": 500, "partitioning": "iid"})
    split = load_split("digits", **settings.split_options())
    trained = set(split.database_index[split.train_mask].tolist())
    assert len(trained) == 500
    seen, encoded = [], 0
    for pid in range(4):
        data = load_local_data(settings, partition_id=pid, num_partitions=4)
        view = data.training_view()
        encoded += data.num_samples
        rows = view.database_index.tolist()
        assert set(rows) <= set(data.database_index.tolist())
        assert set(rows) <= trained
        pos = data.train_positions
        torch.testing.assert_close(view.inputs, data.inputs[pos])
        torch.testing.assert_close(view.labels, data.labels[pos])
        seen += rows
    assert sorted(seen) == sorted(trained)  # every training row, each once
    assert encoded == len(split.database_index)  # every database row encoded
    whole = RunSettings.from_config({})
    data = load_local_data(whole, partition_id=0, num_partitions=4)
    assert data.training_view() is data and data.train_positions is None


def test_protocol_text_and_refusals() -> None:
    settings = RunSettings.from_config({"train-size": 400})
    text = protocol_text(settings, prepare_data(settings), clients=4)
    assert "training on a seeded random 400 of the 1617 database rows" in text
    assert "(train-size), all of them encoded" in text
    plain = RunSettings.from_config({})
    assert "train-size" not in protocol_text(plain, prepare_data(plain), clients=4)
    for strategy in ("pfmh", "dpcode"):
        with pytest.raises(ConfigError, match="train-size=10 with.*accepted: 0"):
            RunSettings.from_config({"train-size": 10, "strategy": strategy})
    too_big = RunSettings.from_config({"train-size": 5000})
    with pytest.raises(ConfigError, match="train-size=5000"):
        prepare_data(too_big)


def test_centralized_ceiling_trains_on_the_subset_only(monkeypatch) -> None:
    import experiments.centralized as centralized

    sizes = []
    real = centralized.train_local

    def spy(model, inputs, labels, **kw):
        sizes.append(len(inputs))
        return real(model, inputs, labels, **kw)

    monkeypatch.setattr(centralized, "train_local", spy)
    cfg = {"train-size": 300, "rounds": 1, "local-epochs": 1}
    out = centralized.train_centralized(RunSettings.from_config(cfg))
    assert sizes == [300]
    assert out["final"]["n_db"] == 1617  # still retrieves the whole database
    assert "300 of the 1617" in out["training"]
