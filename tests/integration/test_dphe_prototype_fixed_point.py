"""FedHAP's encrypted prototypes equal plaintext Eq. (6) to fixed-point precision.

The DPHE prototype stream once clipped the layout at ``dphe.clip``: class-mean
entries beyond it were cut, and below ``clip = 0.5`` a class held by one client
decoded to a holder count under 0.5 and vanished. Now the stream has its own fixed
point (``PROTOTYPE_BOUND``, weight 1, exact holder counts). Real Paillier with small
test keys, the real client path (``finish_train_reply``) and the FedHAP strategy
with its in-process keyholder.
"""

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from clients.train_reply import finish_train_reply
from crypto import generate_keys
from hashing.fedhap.prototypes import (
    PROTOTYPE_BOUND,
    aggregate_prototypes,
    prototype_sum_vector,
    prototypes_from_fixed_point,
)
from hashing.models import build_model
from hashing.prototypes import ClassPrototypes, class_prototypes
from hashing.train import encode
from settings import keys as K
from settings.prototype_records import FEDHAP_UPLOAD, prototype_record
from settings.run_settings import ConfigError, RunSettings
from strategies.dphe.server_setup import build_secure_components
from strategies.dphe.setup import stream_params
from tests.integration.test_dphe_strategy import RUN_ID, secure_fedhap
from tests.integration.test_strategies import FakeGrid
from tests.messages import reply_from

pytestmark = pytest.mark.usefixtures("task_identity")

NODES = {200 + pid: pid for pid in range(5)}  # node id -> partition id
SHAPES = {"w": (3, 4)}
DIM = 12
BITS = 8
CLASSES = 7
SCALE_BITS = 20
# Eq. (6) on the clients' float32 means vs the decrypted fixed point: each holder's
# rounding error is at most half a unit, so their mean is too; then the float32 cast
# of both sides (values below 4096: at most 2**-12 relative, i.e. one ulp each)
RESOLUTION = 2.0 ** -(SCALE_BITS + 1)


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("dphe-protos") / "keys"
    generate_keys(out, num_clients=len(NODES), key_bits=512, allow_test_keys=True)
    return out


def settings_for(key_dir, **over):
    return RunSettings.from_config(
        {
            "secure-aggregation": "dphe",
            "strategy": "fedhap",
            "min-train-nodes": 3,
            "code-length": BITS,
            "dphe.key-dir": str(key_dir),
            "dphe.scale-bits": SCALE_BITS,
            "dphe.prototypes": True,
            **over,
        }
    )


def _record(arrays):
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def _uploads(rng):
    """Five clients' class means, several with |entry| > 1 (and one near the bound).

    Class 5 is held by one client only, class 6 by nobody.
    """
    held = [[0, 1, 2], [1, 2, 3], [0, 3, 4], [2, 4, 5], [0, 1]]
    uploads = []
    for cls in held:
        vectors = rng.uniform(-3.0, 3.0, size=(len(cls), BITS))
        uploads.append(
            ClassPrototypes(
                classes=np.array(cls, dtype=np.int64),
                vectors=vectors.astype(np.float32),
                counts=np.full(len(cls), 4, dtype=np.int64),
            )
        )
    big = uploads[3].vectors.copy()
    big[2, :2] = [PROTOTYPE_BOUND, -0.75 * PROTOTYPE_BOUND]  # class 5, single holder
    uploads[3] = ClassPrototypes(uploads[3].classes, big, uploads[3].counts)
    return uploads


def _secure_round(settings, uploads, rng):
    """One FedHAP round with encrypted prototype sums; the strategy after it."""
    s = secure_fedhap(settings, bits=BITS, classes=CLASSES, nodes=NODES, dim=DIM)
    global_arrays = _record({k: np.zeros(v, np.float32) for k, v in SHAPES.items()})
    sent = list(
        s.configure_train(1, global_arrays, ConfigRecord(), FakeGrid(list(NODES)))
    )
    config = sent[0].content[K.CONFIG]
    replies = []
    for (node, pid), upload in zip(NODES.items(), uploads, strict=True):
        local = {
            k: rng.normal(size=v).astype(np.float32) * 0.1 for k, v in SHAPES.items()
        }
        content = RecordDict(
            {
                K.ARRAYS: _record(local),
                K.METRICS: MetricRecord({K.NUM_EXAMPLES: 4, K.TRAIN_LOSS: 0.0}),
                K.PROTOTYPES: prototype_record(upload, FEDHAP_UPLOAD),
            }
        )
        finish_train_reply(
            content,
            global_arrays=global_arrays,
            settings=settings,
            partition_id=pid,
            rng=np.random.default_rng(pid),
            num_classes=CLASSES,
            train_config=config,
            run_id=RUN_ID,
        )
        assert K.DPHE_PROTOS in content and K.PROTOTYPES not in content
        replies.append(reply_from(node, content))
    arrays, _ = s.aggregate_train(1, replies)
    assert arrays is not None and s.kept_nodes == list(NODES)
    return s


@pytest.mark.parametrize("clip", [1.0, 0.1])
def test_encrypted_prototypes_equal_plaintext_eq6(key_dir, clip):
    rng = np.random.default_rng(11)
    uploads = _uploads(rng)
    assert max(float(np.abs(u.vectors).max()) for u in uploads) > 1  # not clipped
    plain = aggregate_prototypes(uploads, num_classes=CLASSES, bits=BITS)
    s = _secure_round(settings_for(key_dir, **{"dphe.clip": clip}), uploads, rng)
    got = s.global_prototypes
    # every held class survives, whatever dphe.clip (class 5: one holder)
    assert got.classes.tolist() == plain.classes.tolist() == [0, 1, 2, 3, 4, 5]
    tol = RESOLUTION + np.spacing(np.abs(plain.relaxed))  # + float32 rounding
    err = np.abs(got.relaxed.astype(np.float64) - plain.relaxed.astype(np.float64))
    assert (err <= tol).all(), float(err.max())
    row5 = got.classes.tolist().index(5)
    assert got.relaxed[row5, 0] == PROTOTYPE_BOUND  # the bound itself: exact
    clear = np.abs(plain.relaxed) > RESOLUTION  # signs of means far from 0 agree
    np.testing.assert_array_equal(got.codes[clear], plain.codes[clear])
    assert s.prototype_history[1] == {"classes": [0, 1, 2, 3, 4, 5], "clients": 5}


def test_holder_counts_are_exact_integers_at_a_small_clip(key_dir):
    """The decrypted holder column is exactly holders * 2**scale_bits."""
    settings = settings_for(key_dir, **{"dphe.clip": 0.01})
    rng = np.random.default_rng(12)
    uploads = _uploads(rng)
    s = _secure_round(settings, uploads, rng)
    # decrypt the same aggregate again through the stream's exact sums
    params = s.secure_prototypes.params
    assert params.fixed_point.clip == PROTOTYPE_BOUND  # dphe.clip plays no part
    expected = sum(
        prototype_sum_vector(u, num_classes=CLASSES, bits=BITS) for u in uploads
    ).reshape(CLASSES, BITS + 1)[:, BITS]
    assert expected.tolist() == [3, 3, 3, 2, 2, 1, 0]
    unit = 2**SCALE_BITS
    sums = np.zeros((CLASSES, BITS + 1), dtype=np.int64)
    for u in uploads:  # the integers the clients encode (quantize, unclipped)
        q = np.rint(
            prototype_sum_vector(u, num_classes=CLASSES, bits=BITS) * unit
        ).astype(np.int64)
        sums += q.reshape(CLASSES, BITS + 1)
    assert (sums[:, BITS] == expected.astype(np.int64) * unit).all()
    decoded = prototypes_from_fixed_point(
        sums.ravel(), num_classes=CLASSES, bits=BITS, scale_bits=SCALE_BITS
    )
    np.testing.assert_array_equal(decoded.relaxed, s.global_prototypes.relaxed)


def test_relaxed_class_means_beyond_one_are_legitimate():
    """The hash layer is linear (no tanh): class means of its outputs exceed 1."""
    torch.manual_seed(0)
    net = build_model("mlp", (8,), BITS, hidden_dim=16)
    x = torch.randn(40, 8) * 20
    b = torch.from_numpy(encode(net, x, device=torch.device("cpu")))
    protos = class_prototypes(b, torch.arange(40) % 3, num_classes=3)
    assert np.abs(protos.vectors).max() > 1
    vector = prototype_sum_vector(protos, num_classes=3, bits=BITS)
    assert np.abs(vector).max() == np.abs(protos.vectors).max()  # kept as they are


def test_a_class_mean_beyond_the_bound_is_refused_not_clipped():
    vectors = np.zeros((2, BITS), dtype=np.float32)
    vectors[1, 3] = -2 * PROTOTYPE_BOUND
    upload = ClassPrototypes(
        np.array([2, 4], dtype=np.int64), vectors, np.ones(2, dtype=np.int64)
    )
    with pytest.raises(ValueError, match=r"class 4 .*-8192.*bit 3.*refused"):
        prototype_sum_vector(upload, num_classes=CLASSES, bits=BITS)
    vectors[1, 3] = np.nan
    with pytest.raises(ValueError, match="class 4"):
        prototype_sum_vector(upload, num_classes=CLASSES, bits=BITS)


def test_prototype_config_that_could_overflow_is_refused(key_dir):
    # 4096 * 2**40 per summand, 1024 summands: slot sums need 64 bits (> 63)
    settings = settings_for(
        key_dir,
        **{
            "dphe.scale-bits": 40,
            "dphe.max-contributors": 1024,
            "dphe.weighting": "uniform",  # the model stream fits; prototypes not
        },
    )
    message = (
        r"dphe\.prototypes=true.*dphe\.scale-bits=40 and "
        r"dphe\.max-contributors=1024.*slot_bits = 64"
    )
    with pytest.raises(ConfigError, match=message):
        stream_params(
            settings.dphe_run, model_dimension=DIM, num_classes=CLASSES, key_bits=512
        )
    with pytest.raises(ConfigError, match=message):  # before any round
        build_secure_components(
            settings.dphe_run,
            dimension=DIM,
            partition_ids=NODES.values(),
            num_classes=CLASSES,
            simulation=True,
            run_id=RUN_ID,
        )
    # the largest scale that fits those contributors is accepted
    ok = settings_for(
        key_dir,
        **{
            "dphe.scale-bits": 39,
            "dphe.max-contributors": 1024,
            "dphe.weighting": "uniform",
        },
    )
    streams = stream_params(
        ok.dphe_run, model_dimension=DIM, num_classes=CLASSES, key_bits=512
    )
    assert streams["prototypes"].fixed_point.slot_bits == 63


def test_corrupt_holder_counts_are_refused():
    sums = np.zeros((CLASSES, BITS + 1), dtype=np.int64)
    sums[2, BITS] = 3 * 2**SCALE_BITS + 1  # not a whole number of holders
    with pytest.raises(ValueError, match="holder count of class 2"):
        prototypes_from_fixed_point(
            sums.ravel(), num_classes=CLASSES, bits=BITS, scale_bits=SCALE_BITS
        )
    sums[2, BITS] = 9 * 2**SCALE_BITS  # more holders than contributors
    with pytest.raises(ValueError, match=r"class 2 .*<= 5"):
        prototypes_from_fixed_point(
            sums.ravel(),
            num_classes=CLASSES,
            bits=BITS,
            scale_bits=SCALE_BITS,
            max_holders=5,
        )
