"""DPcode releases: bad input, what a release says, merging, hash-code transactions."""

from pathlib import Path

import numpy as np
import pytest

from privacy.dpcode import (
    Frames,
    HadamardCodebook,
    Release,
    Transactions,
    code_transactions,
    direct_release,
    dpcode_release,
    f_score,
    ground_truth,
    merge_releases,
    noisycut_release,
    patch_descriptors,
)
from privacy.noise import NoiseSource
from tests.fixtures import modules_after_import

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def frames() -> np.ndarray:
    rng = np.random.default_rng(0)
    images = np.zeros((120, 8, 8))
    images[:, 2:6, 3] = 1.0  # a shared vertical stroke
    images[60:, 1, 1:7] = 1.0  # half of them also a horizontal one
    images += 0.1 * rng.random(images.shape)
    return patch_descriptors(images)


def _release(data, **kw):
    args = dict(
        k=5, epsilon=4.0, noise=NoiseSource.seeded(0), codebook=HadamardCodebook(16)
    )
    args.update(kw)
    return dpcode_release(data, **args)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"k": 0}, "k 0: accepted are integers >= 1"),
        ({"k": -3}, "k -3: accepted are integers >= 1"),
        ({"k": 10**9}, "accepted are 1..5488, the number of candidate patterns"),
        ({"epsilon": 0.0}, r"epsilon 0.0: accepted are finite numbers > 0"),
        ({"epsilon": -1}, r"epsilon -1: accepted are finite numbers > 0"),
        ({"split": 0.0}, r"split 0.0: accepted are numbers in \(0, 1\)"),
        ({"split": 1.0}, r"split 1.0: accepted are numbers in \(0, 1\)"),
        ({"split": 1.5}, r"split 1.5: accepted are numbers in \(0, 1\)"),
        ({"codebook": HadamardCodebook(8)}, "takes descriptors of size 8, got size 16"),
        ({"codebook": None}, "frames need a codebook"),
        ({"primitive_noise": "x"}, "primitive_noise 'x': accepted are"),
    ],
)
def test_bad_input_is_refused_before_work(frames, kw, message) -> None:
    with pytest.raises(ValueError, match=message):
        _release(frames, **kw)


@pytest.mark.parametrize(
    "empty",
    [[], np.zeros((0, 9, 16)), Transactions(np.zeros((0, 32), bool), "hadamard-16")],
)
def test_empty_client_is_refused(empty) -> None:
    with pytest.raises(ValueError, match="empty client: no frames"):
        _release(empty)
    with pytest.raises(ValueError, match="empty client: no frames"):
        direct_release(
            empty,
            k=3,
            epsilon=1.0,
            noise=NoiseSource.seeded(1),
            codebook=HadamardCodebook(16),
        )


def test_a_release_states_its_epsilon_per_frame(frames) -> None:
    r = _release(frames, split=0.6)
    assert len(r.patterns) <= 5 and len(r.patterns) == len(r.supports)
    assert r.unit == "per frame" and r.delta == 0.0
    assert r.epsilon_spent == pytest.approx(sum(r.components.values()))
    assert r.epsilon_spent <= 4.0 + 1e-12
    assert r.components["threshold"] == pytest.approx(0.6 * 4.0 / 2)
    assert list(r.supports) == sorted(r.supports, reverse=True)
    assert Release.from_dict(r.as_dict()) == r
    # seeded noise: the same source gives the same release
    assert _release(frames, split=0.6) == r


def test_variants_and_baselines_run_and_find_the_strokes(frames) -> None:
    tx_truth, _ = ground_truth(frames, k=5, codebook=HadamardCodebook(16))
    for kw in (
        {},
        {"primitive_noise": "off", "infrequent": "prune"},
        {"per_frame_shares": True},
    ):
        r = _release(frames, epsilon=50.0, **kw)
        assert r.epsilon_spent == pytest.approx(50.0)
    r = _release(frames, epsilon=50.0, primitive_noise="off", infrequent="prune")
    assert f_score(tx_truth, r.patterns) >= 0.6
    cb = HadamardCodebook(16)
    for fn in (direct_release, noisycut_release):
        b = fn(frames, k=5, epsilon=50.0, noise=NoiseSource.seeded(2), codebook=cb)
        assert b.unit == "per frame" and b.epsilon_spent == pytest.approx(50.0)
        assert len(b.patterns) <= 5


def test_code_chunk_transactions() -> None:
    codes = np.array([[1, -1, 1, 1], [1, -1, -1, -1], [1, -1, 1, 1]])
    tx = code_transactions(codes, chunk_bits=2)
    assert tx.n_words == 8 and tx.vocabulary == "code-chunks-4x2"
    # chunk 0 = (+1, -1) -> value 2 -> word 2; chunk 1 = (+1, +1) -> 4 + 3 = 7
    assert np.flatnonzero(tx.matrix[0]).tolist() == [2, 7]
    assert tx.matrix.sum(axis=1).tolist() == [2, 2, 2]
    patterns, supports = ground_truth(tx, k=1, max_length=2)
    assert patterns == [(2,)] and supports == [3]
    with pytest.raises(ValueError, match="divisors of the code length"):
        code_transactions(codes, chunk_bits=3)
    with pytest.raises(ValueError, match="accepted values are -1 and \\+1"):
        code_transactions(codes * 2, chunk_bits=2)


def _fake(patterns, supports, eps, vocabulary="v") -> Release:
    return Release(
        tuple(patterns),
        tuple(supports),
        eps,
        "per frame",
        0.0,
        "dpcode",
        vocabulary,
        2,
        3,
        {"supports": eps},
    )


def test_merge_sums_supports_and_keeps_the_largest_epsilon() -> None:
    a = _fake([(1,), (2,)], [10.0, 8.0], 1.0)
    b = _fake([(2,), (3,)], [7.0, 9.5], 2.0)
    m = merge_releases([a, b], k=2)
    assert m.patterns == ((2,), (1,)) and m.supports == (15.0, 10.0)
    assert m.epsilon_spent == 2.0 and m.unit == "per frame"
    with pytest.raises(ValueError, match="accepted are releases of one vocabulary"):
        merge_releases([a, _fake([(1,)], [1.0], 1.0, vocabulary="w")], k=2)
    with pytest.raises(ValueError, match="no releases"):
        merge_releases([], k=2)


def test_library_imports_no_flower() -> None:
    loaded = modules_after_import("privacy.dpcode")
    assert [m for m in loaded if m.startswith("flwr")] == []
    for path in (ROOT / "privacy" / "dpcode").glob("*.py"):
        assert "flwr" not in path.read_text()


def test_frames_from_lists_of_different_sizes() -> None:
    f = Frames.from_arrays([np.ones((2, 16)), np.ones((3, 16))])
    assert f.descriptors.shape == (2, 3, 16) and f.mask.sum() == 5
