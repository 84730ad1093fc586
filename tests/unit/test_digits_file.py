"""The digits file with a fixed split: the built-in digits, the split fixed once."""

import numpy as np

from hashdata.digits_file import write_digits_npz
from hashdata.split import load_split


def test_digits_file_holds_the_builtin_data_and_its_seeded_split(tmp_path):
    path = write_digits_npz(tmp_path / "digits.npz", seed=0)
    fixed = load_split(
        "npz", data_path=str(path), query_fraction=0.1, seed=0, feature_scaling="none"
    )
    builtin = load_split("digits", query_fraction=0.1, seed=0, feature_scaling="none")
    np.testing.assert_array_equal(fixed.query_index, builtin.query_index)
    np.testing.assert_array_equal(fixed.dataset.labels, builtin.dataset.labels)
    np.testing.assert_array_equal(fixed.inputs, builtin.inputs)
    assert "fixed split: 180 queries, 1617 database" in fixed.query_text
    # the run seed no longer moves the queries
    other = load_split(
        "npz", data_path=str(path), query_fraction=0.1, seed=5, feature_scaling="none"
    )
    np.testing.assert_array_equal(other.query_index, fixed.query_index)


def test_multiview_digits_file_holds_both_views_and_the_same_split(tmp_path):
    from hashdata.multiview import load_multiview_digits

    path = write_digits_npz(tmp_path / "mv.npz", seed=0, multiview=True)
    plain = np.load(write_digits_npz(tmp_path / "digits.npz", seed=0))
    fixed = load_split("npz", data_path=str(path), query_fraction=0.1, seed=3)
    builtin = load_multiview_digits()
    assert sorted(fixed.dataset.inputs) == ["hog", "image"]
    for name in ("image", "hog"):  # feature-scaling "auto" keeps the [0, 1] views
        np.testing.assert_array_equal(fixed.dataset.inputs[name], builtin.inputs[name])
    with np.load(path) as f:
        np.testing.assert_array_equal(f["split"], plain["split"])
        for name in ("image", "hog"):
            np.testing.assert_array_equal(f[f"x_{name}"], builtin.inputs[name])
    np.testing.assert_array_equal(fixed.query_index, np.flatnonzero(plain["split"]))
