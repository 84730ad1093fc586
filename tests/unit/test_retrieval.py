"""Tests of hashing.retrieval against plain brute-force references."""

from __future__ import annotations

import functools
import importlib.util
import json

import numpy as np
import pytest

import hashing.retrieval as retrieval
from hashing.codes import pack_codes
from hashing.retrieval import (
    evaluate_retrieval,
    hamming_topk,
    mean_average_precision,
    precision_at_k,
    precision_recall_by_radius,
    relevance,
)

HAS_NUMBA = importlib.util.find_spec("numba") is not None
BACKENDS = [
    "numpy",
    pytest.param(
        "numba", marks=pytest.mark.skipif(not HAS_NUMBA, reason="numba not installed")
    ),
]


# ------------------------------------------------------------ brute-force references


def brute_distances(q: np.ndarray, db: np.ndarray) -> list[list[int]]:
    return [[int(np.sum(qi != di)) for di in db] for qi in q]


def brute_relevant(ql: np.ndarray, dl: np.ndarray, a: int, i: int) -> bool:
    if ql.ndim == 1:
        return bool(ql[a] == dl[i])
    return bool(np.any((ql[a] > 0) & (dl[i] > 0)))


def brute_order(dist_row: list[int]) -> list[int]:
    # Stable: distance ascending, then database index ascending.
    return sorted(range(len(dist_row)), key=lambda i: (dist_row[i], i))


def brute_ap(ranked_rel: list[bool]) -> float:
    hits, total = 0, 0.0
    for pos, is_rel in enumerate(ranked_rel, start=1):
        if is_rel:
            hits += 1
            total += hits / pos
    return total / hits if hits else 0.0


def brute_metrics(q, db, ql, dl, *, top_ks, ks, bits):
    dist = brute_distances(q, db)
    ndb = len(db)
    ap_all, prec, pr_p, pr_r = [], [], [], []
    ap_k: dict[int, list[float]] = {k: [] for k in top_ks}
    for a, row in enumerate(dist):
        is_rel = [brute_relevant(ql, dl, a, i) for i in range(ndb)]
        order = brute_order(row)
        rel = [is_rel[i] for i in order]
        ap_all.append(brute_ap(rel))
        for k in top_ks:
            ap_k[k].append(brute_ap(rel[:k]))
        prec.append([sum(rel[: min(k, ndb)]) / min(k, ndb) for k in ks])
        n_rel = sum(rel)
        p_row, r_row = [], []
        for radius in range(bits + 1):
            got = [is_rel[i] for i in range(ndb) if row[i] <= radius]
            p_row.append(sum(got) / len(got) if got else 0.0)
            r_row.append(sum(got) / n_rel if n_rel else 0.0)
        pr_p.append(p_row)
        pr_r.append(r_row)
    return {
        "map_all": float(np.mean(ap_all)),
        "map_at_k": {k: float(np.mean(v)) for k, v in ap_k.items()},
        "precision_at_k": np.mean(prec, axis=0),
        "precision": np.mean(pr_p, axis=0),
        "recall": np.mean(pr_r, axis=0),
    }


def random_problem(seed: int, nq: int, ndb: int, bits: int, multi: bool, n_cls: int):
    rng = np.random.default_rng(seed)
    pm1 = np.array([-1, 1], dtype=np.int8)
    q = rng.choice(pm1, size=(nq, bits))
    db = rng.choice(pm1, size=(ndb, bits))
    db[: ndb // 4] = db[ndb // 4 : 2 * (ndb // 4)]  # exact duplicates: more ties
    if multi:
        ql = (rng.random((nq, n_cls)) < 0.2).astype(np.int64)
        dl = (rng.random((ndb, n_cls)) < 0.2).astype(np.int64)
        ql[0] = 0  # a query with no label: nothing is relevant to it
    else:
        ql = rng.integers(0, n_cls, size=nq)
        dl = rng.integers(0, n_cls, size=ndb)
        ql[0] = n_cls + 5  # a query whose class is absent from the database
    return q, db, ql, dl


# --------------------------------------------------------------------- hand example


def tiny_problem():
    # 4-bit codes; distances of the 4 database items to the query: [1, 0, 1, 2].
    q = np.array([[1, 1, 1, 1]], dtype=np.int8)
    db = np.array(
        [[-1, 1, 1, 1], [1, 1, 1, 1], [1, -1, 1, 1], [-1, -1, 1, 1]], dtype=np.int8
    )
    ql = np.array([7])
    dl = np.array([7, 3, 5, 7])  # relevant: items 0 and 3
    return q, db, ql, dl


@pytest.mark.parametrize("backend", BACKENDS)
def test_hand_computed_example(backend: str) -> None:
    q, db, ql, dl = tiny_problem()
    qp, dp = pack_codes(q), pack_codes(db)
    idx, dist = hamming_topk(qp, dp, k=4, backend=backend)
    # Stable ranking: item 1 (d=0), item 0 (d=1), item 2 (d=1, tie -> index), item 3.
    np.testing.assert_array_equal(idx, [[1, 0, 2, 3]])
    np.testing.assert_array_equal(dist, [[0, 1, 1, 2]])
    # Relevant at positions 2 and 4: AP = (1/2 + 2/4) / 2 = 1/2. (Breaking the tie
    # the other way would give (1/3 + 2/4) / 2 = 5/12.)
    args = (qp, dp, ql, dl)
    assert mean_average_precision(*args, backend=backend) == pytest.approx(0.5)
    assert mean_average_precision(*args, top_k=1, backend=backend) == 0.0
    assert mean_average_precision(*args, top_k=2, backend=backend) == pytest.approx(0.5)
    assert mean_average_precision(*args, top_k=3, backend=backend) == pytest.approx(0.5)
    assert mean_average_precision(*args, top_k=99, backend=backend) == pytest.approx(
        0.5
    )
    p_at_k = precision_at_k(*args, ks=[1, 2, 3, 4, 10], backend=backend)
    np.testing.assert_allclose(p_at_k, [0.0, 1 / 2, 1 / 3, 1 / 2, 1 / 2])
    pr = precision_recall_by_radius(*args, bits=4, backend=backend)
    np.testing.assert_array_equal(pr["radius"], [0, 1, 2, 3, 4])
    np.testing.assert_allclose(pr["precision"], [0.0, 1 / 3, 1 / 2, 1 / 2, 1 / 2])
    np.testing.assert_allclose(pr["recall"], [0.0, 1 / 2, 1.0, 1.0, 1.0])


def test_hand_example_two_queries_mean_includes_empty_query() -> None:
    q, db, ql, dl = tiny_problem()
    q2 = np.concatenate([q, q])
    ql2 = np.array([7, 42])  # second query: no relevant item -> AP 0, still counted
    assert mean_average_precision(
        pack_codes(q2), pack_codes(db), ql2, dl
    ) == pytest.approx(0.25)


# ---------------------------------------------------------- random vs brute force


CASES = [
    # seed, nq, ndb, bits, multi, classes
    (1, 12, 150, 8, False, 4),
    (2, 10, 130, 8, True, 6),
    (3, 8, 120, 12, False, 3),
    (4, 8, 100, 64, True, 70),
    (5, 6, 90, 130, False, 5),
    (6, 4, 60, 300, True, 3),  # uint16 distances
]


@functools.cache
def case_data(case):
    seed, nq, ndb, bits, multi, n_cls = case
    q, db, ql, dl = random_problem(seed, nq, ndb, bits, multi, n_cls)
    top_ks = (1, 7, ndb, ndb + 25)
    ref = brute_metrics(q, db, ql, dl, top_ks=top_ks, ks=[1, 5, 50], bits=bits)
    return q, db, ql, dl, top_ks, ref


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"bits{c[3]}-multi{c[4]}")
def test_metrics_match_brute_force(case, backend: str) -> None:
    q, db, ql, dl, top_ks, ref = case_data(case)
    nq, ndb, bits = len(q), len(db), q.shape[1]
    qp, dp = pack_codes(q), pack_codes(db)
    for top_k in top_ks:
        got = mean_average_precision(qp, dp, ql, dl, top_k=top_k, backend=backend)
        assert got == pytest.approx(ref["map_at_k"][top_k], rel=1e-12, abs=1e-15)
    got_all = mean_average_precision(qp, dp, ql, dl, backend=backend)
    assert got_all == pytest.approx(ref["map_all"], rel=1e-12)
    assert got_all == pytest.approx(ref["map_at_k"][ndb + 25], rel=1e-12)  # K > ndb
    np.testing.assert_allclose(
        precision_at_k(qp, dp, ql, dl, ks=[1, 5, 50], backend=backend),
        ref["precision_at_k"],
        rtol=1e-12,
    )
    pr = precision_recall_by_radius(qp, dp, ql, dl, bits=bits, backend=backend)
    assert pr["radius"].shape == (bits + 1,)
    np.testing.assert_allclose(pr["precision"], ref["precision"], rtol=1e-12)
    np.testing.assert_allclose(pr["recall"], ref["recall"], rtol=1e-12)

    report = evaluate_retrieval(q, db, ql, dl, top_k=7, ks=[1, 5, 50], backend=backend)
    assert report.map_all == pytest.approx(ref["map_all"], rel=1e-12)
    assert report.map_at_k == pytest.approx(ref["map_at_k"][7], rel=1e-12)
    np.testing.assert_allclose(report.precision_at_k, ref["precision_at_k"])
    np.testing.assert_allclose(report.pr["precision"], ref["precision"])
    np.testing.assert_allclose(report.pr["recall"], ref["recall"])
    assert (report.n_query, report.n_db, report.bits) == (nq, ndb, bits)


@pytest.mark.parametrize("backend", [*BACKENDS, "numba-counting"])
@pytest.mark.parametrize("bits", [8, 12, 64, 65, 130, 300])
def test_topk_matches_brute_force(
    bits: int, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend == "numba-counting":  # the large-k kernel, forced on small k
        if not HAS_NUMBA:
            pytest.skip("numba not installed")
        monkeypatch.setattr(retrieval, "_BUCKET_MAX_SLOTS", 0)
        backend = "numba"
    q, db, _, _ = random_problem(10 + bits, 7, 120, bits, False, 3)
    dist = brute_distances(q, db)
    for k in (1, 3, 119, 120, 500):
        idx, d = hamming_topk(pack_codes(q), pack_codes(db), k=k, backend=backend)
        kk = min(k, 120)
        assert idx.shape == d.shape == (7, kk) and idx.dtype == np.int64
        for a, row in enumerate(dist):
            order = brute_order(row)[:kk]
            assert idx[a].tolist() == order
            assert d[a].tolist() == [row[i] for i in order]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bits", [16, 64, 128])
def test_topk_large_db_crosses_chunks(bits: int, backend: str) -> None:
    # More items than one numba scan chunk; few bits -> massive ties.
    rng = np.random.default_rng(bits)
    q = rng.choice(np.array([-1, 1], np.int8), size=(5, bits))
    db = rng.choice(
        np.array([-1, 1], np.int8), size=(3 * retrieval._TOPK_CHUNK + 5, bits)
    )
    db[-3:] = q[:3]  # exact matches at the very end
    dist = (q[:, None, :] != db[None, :, :]).sum(-1)
    ref = np.argsort(dist, axis=1, kind="stable")[:, :100]
    idx, d = hamming_topk(pack_codes(q), pack_codes(db), k=100, backend=backend)
    np.testing.assert_array_equal(idx, ref)
    np.testing.assert_array_equal(d, np.take_along_axis(dist, ref, axis=1))
    assert idx[0, 0] == len(db) - 3


def test_auto_backend_and_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    q, db, ql, dl = random_problem(7, 6, 80, 16, False, 3)
    qp, dp = pack_codes(q), pack_codes(db)
    expected = mean_average_precision(qp, dp, ql, dl, backend="numpy")
    assert retrieval._choose_backend("auto", 6 * 80) == "numpy"
    monkeypatch.setattr(retrieval, "_NUMBA_MIN_PAIRS", 0)
    assert retrieval._choose_backend("auto", 6 * 80) == (
        "numba" if HAS_NUMBA else "numpy"
    )
    assert mean_average_precision(qp, dp, ql, dl) == pytest.approx(expected, rel=1e-12)
    with pytest.raises(ValueError, match="backend"):
        mean_average_precision(qp, dp, ql, dl, backend="gpu")  # type: ignore[arg-type]


def test_numpy_blocks_match_single_block(monkeypatch: pytest.MonkeyPatch) -> None:
    q, db, ql, dl = random_problem(8, 9, 70, 12, True, 5)
    qp, dp = pack_codes(q), pack_codes(db)
    whole = evaluate_retrieval(q, db, ql, dl, top_k=10, ks=[5], backend="numpy")
    monkeypatch.setattr(retrieval, "_BLOCK_PAIRS", 100)  # 1 query per block
    blocked = evaluate_retrieval(q, db, ql, dl, top_k=10, ks=[5], backend="numpy")
    assert blocked.to_dict() == whole.to_dict()
    idx, _ = hamming_topk(qp, dp, k=5, backend="numpy")
    assert idx.shape == (9, 5)


@pytest.mark.skipif(not HAS_NUMBA, reason="numba not installed")
@pytest.mark.parametrize(
    ("case", "record"),
    [
        ((1, 12, 150, 8, False, 4), "uint32"),  # 64-bit words, class ids: fused loop
        ((1, 12, 150, 8, False, 4), "uint64"),
        ((2, 10, 130, 8, True, 6), "uint32"),  # multi-label: counted, buffered
        ((5, 6, 90, 130, False, 5), "uint64"),  # three words: buffered distances
        ((6, 4, 60, 300, True, 3), "uint32"),
    ],
    ids=lambda v: v if isinstance(v, str) else f"bits{v[3]}-multi{v[4]}",
)
def test_numba_rank_stats_blocks_and_tiles(
    case, record: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Query blocks that do not divide the query count and database tiles that do
    # not divide the database: exact histograms, per-query AP equal to the numpy
    # backend (query 0 has no relevant item; duplicated codes give ties).
    q, db, ql, dl, _, ref = case_data(case)
    qp, dp = pack_codes(q), pack_codes(db)
    labels = retrieval._encode_labels(ql, dl, len(q), len(db))
    ap_np, all_np, rel_np = retrieval._rank_stats_impl(qp, dp, labels, "numpy")
    monkeypatch.setattr(retrieval, "_RANK_QUERY_BLOCK", 4)
    monkeypatch.setattr(retrieval, "_RANK_TILE", 7)
    if record == "uint64":  # the word for counts or bins beyond 32 bits
        monkeypatch.setattr(
            retrieval, "_record_word", lambda nbins, ndb: (np.uint64, ndb.bit_length())
        )
    ap, h_all, h_rel = retrieval._rank_stats_impl(qp, dp, labels, "numba")
    np.testing.assert_array_equal(h_all, all_np)
    np.testing.assert_array_equal(h_rel, rel_np)
    np.testing.assert_allclose(ap, ap_np, rtol=1e-12, atol=0)
    assert ap[0] == 0.0 and h_rel[0].sum() == 0
    assert ap.mean() == pytest.approx(ref["map_all"], rel=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_map_all_sparse_and_negative_class_ids(backend: str) -> None:
    # Class ids far apart (numbered before the numba kernel) and negative ones
    # give the same mAP as the same classes numbered 0..3.
    q, db, _, _ = random_problem(11, 6, 80, 16, False, 3)
    rng = np.random.default_rng(11)
    small_q, small_db = rng.integers(0, 4, size=6), rng.integers(0, 4, size=80)
    ids = np.array([-7, 0, 2**40, 3])
    qp, dp = pack_codes(q), pack_codes(db)
    expected = mean_average_precision(qp, dp, small_q, small_db, backend="numpy")
    got = mean_average_precision(qp, dp, ids[small_q], ids[small_db], backend=backend)
    assert got == pytest.approx(expected, rel=1e-12)


# ------------------------------------------------------------------ misc behaviour


def test_relevance_single_and_multi_label() -> None:
    np.testing.assert_array_equal(
        relevance(np.array([0, 2]), np.array([2, 0, 0])),
        [[False, True, True], [True, False, False]],
    )
    ql = np.array([[1, 0, 0], [0, 0, 0]])
    dl = np.array([[1, 1, 0], [0, 1, 1], [1, 0, 1]])
    np.testing.assert_array_equal(
        relevance(ql, dl), [[True, False, True], [False, False, False]]
    )
    # more than 64 classes spans several label words
    ql = np.zeros((1, 130), bool)
    dl = np.zeros((2, 130), bool)
    ql[0, 129] = dl[1, 129] = dl[0, 3] = True
    np.testing.assert_array_equal(relevance(ql, dl), [[False, True]])


def test_input_validation() -> None:
    q, db, ql, dl = tiny_problem()
    qp, dp = pack_codes(q), pack_codes(db)
    with pytest.raises(ValueError, match="one row per code"):
        mean_average_precision(qp, dp, ql, dl[:3])
    with pytest.raises(ValueError, match="integers"):
        mean_average_precision(qp, dp, ql.astype(float), dl)
    with pytest.raises(ValueError, match="multi-hot"):
        mean_average_precision(qp, dp, np.array([[2, 0]]), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="both"):
        mean_average_precision(qp, dp, ql, np.zeros((4, 2)))
    with pytest.raises(ValueError, match="uint64"):
        hamming_topk(q, db, k=2)
    with pytest.raises(ValueError, match="positive"):
        hamming_topk(qp, dp, k=0)
    with pytest.raises(ValueError, match="bits"):
        precision_recall_by_radius(qp, dp, ql, dl, bits=65)
    with pytest.raises(ValueError, match="at least one"):
        hamming_topk(qp[:0], dp, k=1)


def test_report_to_dict_is_json_friendly() -> None:
    q, db, ql, dl = tiny_problem()
    report = evaluate_retrieval(q, db, ql, dl, top_k=2, ks=(1, 2, 10))
    data = json.loads(json.dumps(report.to_dict()))
    assert data["map_all"] == pytest.approx(0.5)
    assert data["map_at_k"] == pytest.approx(0.5)
    assert data["top_k"] == 2 and data["ks"] == [1, 2, 10]
    assert data["precision_at_k"] == pytest.approx([0.0, 0.5, 0.5])
    assert data["pr"]["radius"] == [0, 1, 2, 3, 4]
    assert data["pr"]["recall"] == pytest.approx([0.0, 0.5, 1.0, 1.0, 1.0])
    assert (data["n_query"], data["n_db"], data["bits"]) == (1, 4, 4)
    with pytest.raises(AttributeError):
        report.map_all = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("tile", [64, 130, 4096])
@pytest.mark.parametrize("ties", [False, True])
def test_chunked_64bit_scan_equals_the_item_by_item_scan(tile: int, ties: bool) -> None:
    # scan_words8 (64-item chunks counted by vector compares, records only for
    # the query's class members) gives the same records and histograms as
    # scan_words, bit for bit: full chunks, a partial
    # last chunk, tiles that do not divide the database, few classes and (with
    # ties) only 5 distances, so that many items share a chunk and a bucket.
    pytest.importorskip("numba")
    kernels = retrieval._numba_kernels()
    rng = np.random.default_rng(tile)
    for nq, ndb in ((3, 1), (5, 64), (9, 65), (17, 2047), (21, 5000)):
        db = rng.integers(0, 2**63, size=(ndb, 1), dtype=np.uint64)
        q = rng.integers(0, 2**63, size=(nq, 1), dtype=np.uint64)
        if ties:
            db &= np.uint64(0xF)
            q &= np.uint64(0xF)
        # class 3 is in no database row: its queries have no relevant item
        labels = retrieval._encode_labels(
            rng.integers(0, 4, nq), rng.integers(0, 3, ndb), nq, ndb
        )
        ql, dl_t, n_rel = retrieval._class_ids(labels)
        assert dl_t.dtype == np.uint8
        outs = []
        # the 32-bit record word of these sizes, and the 64-bit one of big databases
        word = np.uint64 if ties else retrieval._record_word(65, ndb)[0]
        shift = ndb.bit_length()
        for scan in (kernels.scan_words, kernels.scan_words8):
            hist = np.empty((4, 65), word)
            ap = np.empty(nq)
            h_all = np.zeros((nq, 65), np.int64)
            h_rel = np.zeros((nq, 65), np.int64)
            kernels.rank_stats(
                scan, q, np.ascontiguousarray(db.T), ql, dl_t, True, n_rel, hist,
                shift, tile, ap, h_all, h_rel, *retrieval._class_members(ql, dl_t),
            )  # fmt: skip
            outs.append((ap, h_all, h_rel))
        for old, new in zip(*outs, strict=True):
            np.testing.assert_array_equal(new, old)
