"""recall@K in hashing.retrieval: hand-computed cases, brute force, old fields kept."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from hashing.codes import pack_codes
from hashing.retrieval import (
    evaluate_retrieval,
    mean_average_precision,
    precision_at_k,
    precision_recall_by_radius,
    recall_at_k,
)

HAS_NUMBA = importlib.util.find_spec("numba") is not None
BACKENDS = [
    "numpy",
    pytest.param(
        "numba", marks=pytest.mark.skipif(not HAS_NUMBA, reason="numba not installed")
    ),
]

# Query [+1 +1 +1 +1] against five items at Hamming distances 0, 1, 1, 2, 3.
QUERY = np.array([[1, 1, 1, 1], [1, 1, 1, 1]], dtype=np.int8)
DB = np.array(
    [
        [1, 1, 1, 1],  # item 0, distance 0
        [-1, 1, 1, 1],  # item 1, distance 1
        [1, -1, 1, 1],  # item 2, distance 1 (tie with item 1: item 1 ranks first)
        [-1, -1, 1, 1],  # item 3, distance 2
        [-1, -1, -1, 1],  # item 4, distance 3
    ],
    dtype=np.int8,
)
KS = (1, 2, 3, 4, 5, 10)


def test_recall_at_k_hand_computed_single_label() -> None:
    # query 0 (class 0): items 2, 3, 4 are relevant, R = 3; ranking 0, 1, 2, 3, 4
    # gives relevance 0, 0, 1, 1, 1, so R@k = 0, 0, 1/3, 2/3, 1 and 1 for k = 10
    # (clipped to the 5 items). Query 1 (class 9) has nothing relevant: R@k = 0.
    ql = np.array([0, 9])
    dl = np.array([1, 2, 0, 0, 0])
    per_query = np.array(
        [[0.0, 0.0, 1 / 3, 2 / 3, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]
    )
    report = evaluate_retrieval(QUERY, DB, ql, dl, top_k=3, ks=KS, backend="numpy")
    np.testing.assert_allclose(report.recall_at_k, per_query.mean(axis=0))
    # the tie decides R@2 and R@3: had item 2 come before item 1, R@2 would be 1/3
    assert report.recall_at_k[1] == 0.0
    # only query 0, alone
    alone = evaluate_retrieval(QUERY[:1], DB, ql[:1], dl, top_k=3, ks=KS)
    np.testing.assert_allclose(alone.recall_at_k, per_query[0])
    # P@k from the same lists, for contrast: relevant in the first k / k
    np.testing.assert_allclose(
        alone.precision_at_k, [0.0, 0.0, 1 / 3, 2 / 4, 3 / 5, 3 / 5]
    )


def test_recall_at_k_hand_computed_multi_label() -> None:
    # query shares a label with items 1 and 4 only: R = 2, relevance 0, 1, 0, 0, 1
    ql = np.array([[1, 0, 0]])
    dl = np.array([[0, 1, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1], [1, 0, 1]])
    got = recall_at_k(
        pack_codes(QUERY[:1]), pack_codes(DB), ql, dl, ks=KS, backend="numpy"
    )
    np.testing.assert_allclose(got, [0.0, 0.5, 0.5, 0.5, 1.0, 1.0])
    report = evaluate_retrieval(QUERY[:1], DB, ql, dl, top_k=2, ks=KS)
    np.testing.assert_allclose(report.recall_at_k, got)


def test_to_dict_has_recall_at_k_next_to_precision() -> None:
    ql, dl = np.array([0, 9]), np.array([1, 2, 0, 0, 0])
    report = evaluate_retrieval(QUERY, DB, ql, dl, top_k=3, ks=(2, 4))
    data = json.loads(json.dumps(report.to_dict()))
    assert data["ks"] == [2, 4]
    assert data["recall_at_k"] == pytest.approx([0.0, 1 / 3])
    assert data["precision_at_k"] == pytest.approx([0.0, 0.25])
    with pytest.raises(ValueError, match="positive"):
        recall_at_k(pack_codes(QUERY), pack_codes(DB), ql, dl, ks=[0])


def _random_case(seed: int, *, multi: bool, bits: int, nq: int, ndb: int):
    rng = np.random.default_rng(seed)
    pm1 = np.array([-1, 1], dtype=np.int8)
    q = rng.choice(pm1, size=(nq, bits))
    db = rng.choice(pm1, size=(ndb, bits))
    db[: ndb // 4] = db[ndb // 4 : 2 * (ndb // 4)]  # duplicates: many ties
    if multi:
        ql = (rng.random((nq, 6)) < 0.25).astype(np.int64)
        dl = (rng.random((ndb, 6)) < 0.25).astype(np.int64)
        ql[0] = 0  # nothing is relevant to query 0
    else:
        ql = rng.integers(0, 5, nq)
        dl = rng.integers(0, 5, ndb)
        ql[0] = 7  # nothing is relevant to query 0
    return q, db, ql, dl


def _brute_recall(q, db, ql, dl, ks) -> np.ndarray:
    out = []
    for a in range(len(q)):
        dist = (q[a] != db).sum(axis=1)
        order = sorted(range(len(db)), key=lambda i: (dist[i], i))
        if ql.ndim == 1:
            rel = [bool(ql[a] == dl[i]) for i in order]
        else:
            rel = [bool(np.any((ql[a] > 0) & (dl[i] > 0))) for i in order]
        total = sum(rel)
        out.append([sum(rel[:k]) / total if total else 0.0 for k in ks])
    return np.mean(out, axis=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("multi", [False, True])
def test_recall_at_k_matches_brute_force(backend: str, multi: bool) -> None:
    q, db, ql, dl = _random_case(5, multi=multi, bits=12, nq=20, ndb=120)
    ks = (1, 7, 60, 120, 500)
    ref = _brute_recall(q, db, ql, dl, ks)
    report = evaluate_retrieval(q, db, ql, dl, top_k=9, ks=ks, backend=backend)
    np.testing.assert_allclose(report.recall_at_k, ref, rtol=1e-12)
    alone = recall_at_k(pack_codes(q), pack_codes(db), ql, dl, ks=ks, backend=backend)
    np.testing.assert_allclose(alone, ref, rtol=1e-12)
    # k >= ndb: 1 for every query with a relevant item, 0 for the others
    has_relevant = [
        _brute_recall(q[a : a + 1], db, ql[a : a + 1], dl, (len(db),))[0]
        for a in range(len(q))
    ]
    assert not has_relevant[0]
    assert report.recall_at_k[-1] == pytest.approx(np.mean(has_relevant))


# Values of the report's fields computed with the code before recall@K existed
# (seed 0, single-label, 16 bits, 30 queries, 200 items, top_k=17, numpy backend).
BEFORE = {
    "map_all": 0.2036864489579908,
    "map_at_k": 0.2712712048300283,
    "precision_at_k": [
        0.1,
        0.18000000000000005,
        0.1853333333333333,
        0.18816666666666665,
    ],
    "pr_recall_head": [0.0, 0.0, 0.0022897897897897895, 0.008001069251069252],
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_old_fields_unchanged(backend: str) -> None:
    q, db, ql, dl = _random_case(0, multi=False, bits=16, nq=30, ndb=200)
    ks = (1, 5, 50, 1000)
    report = evaluate_retrieval(q, db, ql, dl, top_k=17, ks=ks, backend=backend)
    assert report.map_all == pytest.approx(BEFORE["map_all"], rel=1e-12)
    assert report.map_at_k == pytest.approx(BEFORE["map_at_k"], rel=1e-12)
    np.testing.assert_allclose(report.precision_at_k, BEFORE["precision_at_k"], 1e-12)
    np.testing.assert_allclose(report.pr["recall"][:4], BEFORE["pr_recall_head"], 1e-12)
    # and exactly what the stand-alone functions give, as before
    qp, dp = pack_codes(q), pack_codes(db)
    assert report.map_all == mean_average_precision(qp, dp, ql, dl, backend=backend)
    assert report.map_at_k == mean_average_precision(
        qp, dp, ql, dl, top_k=17, backend=backend
    )
    np.testing.assert_array_equal(
        report.precision_at_k, precision_at_k(qp, dp, ql, dl, ks=ks, backend=backend)
    )
    pr = precision_recall_by_radius(qp, dp, ql, dl, bits=16, backend=backend)
    for key in ("radius", "precision", "recall"):
        np.testing.assert_array_equal(report.pr[key], pr[key])
