"""Hamming-ranking retrieval metrics over packed binary codes.

Conventions
-----------
Relevance
    Single-label labels are (n,) integers: a database item is relevant to a query
    iff the labels are equal. Multi-label labels are (n, C) multi-hot in {0, 1}: an
    item is relevant iff it shares at least one label with the query (an all-zero
    row is relevant to nothing).
Ranking
    The database is ranked by Hamming distance ascending; ties are broken by
    database index ascending (a stable sort of the distances). Tie order changes
    mAP when codes are short, since many items share a distance; codebases that
    use the default (unstable) ``np.argsort`` report slightly different numbers,
    whose tie order depends on the numpy version and CPU (SIMD sorts). With
    stable ties, mAP is a deterministic function of the codes and labels.
Empty lists
    Every query counts in every mean. A query with no relevant item in the list
    being scored gets AP 0, recall 0 and precision 0; in particular a query with
    no relevant item in the whole database has recall 0 at every radius and every
    K (it is not left out of the mean, which would raise the mean recall).

Backends
--------
Every function takes ``backend``: ``"numpy"`` (always available; query blocks
bound the memory to about ``_BLOCK_PAIRS`` distances at a time), ``"numba"``
(single-threaded compiled kernels, needs the optional ``numba`` package and
compiles in a few seconds on first use in a process; distances are small
integers, so a counting sort gives exact stable ranks in linear time and O(n_db)
memory, and top-k is one scan with a shrinking distance bound) or ``"auto"``
(numba when it is installed and the problem has at least ``_NUMBA_MIN_PAIRS``
query-database pairs, so small evaluations never pay its import and compilation
time, else numpy). Both backends return identical rankings; AP values agree to
floating-point rounding.

Pure numpy (+ optional numba); no torch, no Flower.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from hashing.codes import WORD_BITS, distance_dtype, hamming_distance, pack_codes

Backend = Literal["auto", "numpy", "numba"]

#: Query-database pairs handled per numpy block (bounds temporary memory).
_BLOCK_PAIRS = 1 << 21
#: "auto" switches to numba from this many query-database pairs.
_NUMBA_MIN_PAIRS = 1 << 25
#: Queries per block of the numba mAP@ALL / histogram kernel.
_RANK_QUERY_BLOCK = 16
#: Database items per tile of that kernel (each query of a block scans a tile
#: while it is in cache).
_RANK_TILE = 4096
#: Database items per chunk in the numba top-k scan (multiple of 8).
_TOPK_CHUNK = 4096
#: Above this many (bits + 1) * k bucket slots, numba top-k switches to the
#: two-pass counting kernel (memory O(ndb + k) instead of O(bits * k)).
_BUCKET_MAX_SLOTS = 1 << 20


# --------------------------------------------------------------------------- inputs


def _check_codes(
    query_packed: ArrayLike, db_packed: ArrayLike
) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    q = np.asarray(query_packed)
    db = np.asarray(db_packed)
    for name, arr in (("query_packed", q), ("db_packed", db)):
        if arr.dtype != np.uint64 or arr.ndim != 2 or arr.shape[1] < 1:
            raise ValueError(
                f"{name} must be a 2-D (n, words) uint64 array from pack_codes, "
                f"got {arr.dtype} {arr.shape}"
            )
    if q.shape[1] != db.shape[1]:
        raise ValueError(
            f"query and database codes differ in words: {q.shape[1]} vs {db.shape[1]}"
        )
    if q.shape[0] == 0 or db.shape[0] == 0:
        raise ValueError("need at least one query and one database item")
    if db.shape[0] >= 2**31 - 1:
        raise ValueError("databases of 2**31 - 1 items or more are not supported")
    return np.ascontiguousarray(q), np.ascontiguousarray(db)


@dataclass(frozen=True)
class _Labels:
    """Labels encoded as 64-bit words.

    single: (nq, 1) / (1, ndb) int64 ids viewed as uint64, compared for equality.
    multi: (nq, L) / (L, ndb) multi-hot bits, relevant iff any AND is non-zero.
    """

    single: bool
    query: NDArray[np.uint64]  # (nq, L)
    db_t: NDArray[np.uint64]  # (L, ndb), C-contiguous


def _multi_hot_words(labels: NDArray[Any], name: str) -> NDArray[np.uint64]:
    if labels.dtype != np.bool_:
        if labels.dtype.kind not in "iuf" or not np.all((labels == 0) | (labels == 1)):
            raise ValueError(f"{name}: multi-label rows must be multi-hot in {{0, 1}}")
        labels = labels != 0
    as_bytes = np.packbits(labels, axis=1, bitorder="little")
    n, n_bytes = as_bytes.shape
    words = -(-n_bytes // 8)
    padded = np.zeros((n, words * 8), dtype=np.uint8)
    padded[:, :n_bytes] = as_bytes
    return padded.view("<u8").astype(np.uint64, copy=False)


def _encode_labels(
    query_labels: ArrayLike, db_labels: ArrayLike, nq: int, ndb: int
) -> _Labels:
    ql = np.asarray(query_labels)
    dl = np.asarray(db_labels)
    if ql.shape[:1] != (nq,) or dl.shape[:1] != (ndb,):
        raise ValueError(
            f"labels must have one row per code: got {ql.shape} for {nq} queries "
            f"and {dl.shape} for {ndb} database items"
        )
    if ql.ndim == 1 and dl.ndim == 1:
        for name, arr in (("query_labels", ql), ("db_labels", dl)):
            if arr.dtype.kind not in "iu":
                raise ValueError(
                    f"{name}: single-label labels must be integers, got {arr.dtype}"
                )
        q = ql.astype(np.int64).view(np.uint64).reshape(nq, 1)
        d = dl.astype(np.int64).view(np.uint64).reshape(1, ndb)
        return _Labels(True, np.ascontiguousarray(q), np.ascontiguousarray(d))
    if ql.ndim == 2 and dl.ndim == 2:
        if ql.shape[1] != dl.shape[1] or ql.shape[1] < 1:
            raise ValueError(
                f"multi-label labels differ in classes: {ql.shape[1]} vs {dl.shape[1]}"
            )
        q = _multi_hot_words(ql, "query_labels")
        d = _multi_hot_words(dl, "db_labels")
        return _Labels(False, np.ascontiguousarray(q), np.ascontiguousarray(d.T))
    raise ValueError(
        "labels must be both (n,) class ids or both (n, C) multi-hot, "
        f"got shapes {ql.shape} and {dl.shape}"
    )


def _relevance_block(labels: _Labels, q0: int, q1: int) -> NDArray[np.bool_]:
    """(q1 - q0, ndb) bool relevance of queries q0..q1-1 to the whole database."""
    if labels.single:
        return labels.query[q0:q1, 0, None] == labels.db_t[0][None, :]
    rel = np.zeros((q1 - q0, labels.db_t.shape[1]), dtype=np.bool_)
    for j in range(labels.db_t.shape[0]):
        rel |= (labels.query[q0:q1, j, None] & labels.db_t[j][None, :]) != 0
    return rel


def relevance(query_labels: ArrayLike, db_labels: ArrayLike) -> NDArray[np.bool_]:
    """Ground-truth relevance matrix (builds the full matrix: for small inputs).

    Parameters
    ----------
    query_labels : array_like
        (nq,) integer class ids, or (nq, C) multi-hot in {0, 1}.
    db_labels : array_like
        (ndb,) or (ndb, C), same kind as ``query_labels``.

    Returns
    -------
    numpy.ndarray
        (nq, ndb) bool: equal ids (single-label) or at least one shared label
        (multi-label).

    """
    ql = np.asarray(query_labels)
    dl = np.asarray(db_labels)
    labels = _encode_labels(ql, dl, ql.shape[0], dl.shape[0])
    return _relevance_block(labels, 0, ql.shape[0])


def _choose_backend(backend: Backend, pairs: int) -> str:
    if backend == "numpy":
        return "numpy"
    if backend == "numba":
        _numba_kernels()  # raises ImportError with a clear message
        return "numba"
    if backend != "auto":
        raise ValueError(f"backend must be 'auto', 'numpy' or 'numba', got {backend!r}")
    if pairs < _NUMBA_MIN_PAIRS:
        return "numpy"
    try:
        _numba_kernels()
    except ImportError:
        return "numpy"
    return "numba"


# --------------------------------------------------------------------- numba kernels

_U64 = NDArray[np.uint64]
_I64 = NDArray[np.int64]
_Dist = NDArray[np.unsignedinteger]  # Hamming distances (distance_dtype)


@functools.cache
def _numba_kernels() -> SimpleNamespace:
    """Compile (lazily, once per process) the numba kernels.

    Kept inside a function so that importing this module never imports numba.
    Kernels are single-threaded and not cached on disk.
    """
    try:
        from numba import njit, types
        from numba.extending import intrinsic
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "backend='numba' needs the optional numba package (pip install numba)"
        ) from err

    # The kernels' annotations are for mypy only: numba infers its own types from
    # the arguments (uint64 code words, small unsigned distances, int64 counts).
    @intrinsic
    def _popcount(typingctx: Any, x: Any) -> tuple[Any, Any]:
        sig = types.uint64(types.uint64)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            return builder.ctpop(args[0])

        return sig, codegen

    def _vector_at(
        context: Any, builder: Any, aryty: Any, ary: Any, off: Any, vec_t: Any
    ) -> Any:
        # load vec_t from &ary[off], aligned to one element; the caller keeps the
        # range in bounds
        data = context.make_array(aryty)(context, builder, ary).data
        ptr = builder.bitcast(builder.gep(data, [off]), vec_t.as_pointer())
        return builder.load(ptr, align=vec_t.element.width // 8)

    def _splat(builder: Any, vec_t: Any, value: Any) -> Any:
        # value in every lane of vec_t
        from llvmlite import ir

        undef = ir.Constant(vec_t, ir.Undefined)
        one = builder.insert_element(undef, value, ir.Constant(ir.IntType(32), 0))
        zeros = ir.Constant(
            ir.VectorType(ir.IntType(32), vec_t.count), [0] * vec_t.count
        )
        return builder.shuffle_vector(one, undef, zeros)

    @intrinsic
    def _eq_mask64(typingctx: Any, arr: Any, off: Any, val: Any) -> tuple[Any, Any]:
        # Bit i of the result = (arr[off + i] == val), i < 64, for a uint8 array:
        # one 64-byte vector compare (a mask register with AVX-512BW, two
        # compares and movemasks with AVX2). The caller keeps off + 64 in bounds.
        sig = types.uint64(arr, types.intp, types.uint8)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            from llvmlite import ir

            data, off, val = args
            vec_t = ir.VectorType(ir.IntType(8), 64)
            vec = _vector_at(context, builder, signature.args[0], data, off, vec_t)
            splat = _splat(builder, vec_t, val)
            return builder.bitcast(
                builder.icmp_unsigned("==", vec, splat), ir.IntType(64)
            )

        return sig, codegen

    @intrinsic
    def _distances64(
        typingctx: Any, db: Any, off: Any, x: Any, out: Any, out_off: Any
    ) -> tuple[Any, Any]:
        # out[out_off + i] = popcount(db[off + i] ^ x) as bytes, i < 64: eight
        # 8-lane vector popcounts (AVX-512 VPOPCNTDQ here), narrowed and stored
        # as one 64-byte vector (LLVM picks the instructions for the machine).
        # The caller keeps both ranges in bounds.
        sig = types.void(db, types.intp, types.uint64, out, types.intp)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            from llvmlite import ir

            db_v, off, x, out_v, out_off = args
            dst = context.make_array(signature.args[3])(context, builder, out_v)
            w_t = ir.VectorType(ir.IntType(64), 64)
            b_t = ir.VectorType(ir.IntType(8), 64)
            words = _vector_at(context, builder, signature.args[0], db_v, off, w_t)
            undef = ir.Constant(w_t, ir.Undefined)
            splat = _splat(builder, w_t, x)
            name = "llvm.ctpop.v64i64"
            module = builder.module
            ctpop = module.globals.get(name) or ir.Function(
                module, ir.FunctionType(w_t, [w_t]), name=name
            )
            counts = builder.call(ctpop, [builder.xor(words, splat)])
            # narrow to bytes by a tree of two-source byte shuffles (vpermt2b
            # with VBMI): 7 shuffles instead of 8 two-uop truncations
            i32 = ir.IntType(32)

            def shuffle(a: Any, b: Any, idx: list[int]) -> Any:
                mask = ir.Constant(ir.VectorType(i32, len(idx)), idx)
                return builder.shuffle_vector(a, b, mask)

            parts = [
                builder.bitcast(shuffle(counts, undef, list(range(k, k + 8))), b_t)
                for k in range(0, 64, 8)
            ]
            width = 8  # useful leading bytes of each part
            while len(parts) > 1:
                idx = list(range(width)) + list(range(64, 64 + width))
                if width == 8:  # first level: byte 0 of each 64-bit lane
                    idx = [8 * i for i in range(8)] + [64 + 8 * i for i in range(8)]
                idx += list(range(len(idx), 64))
                parts = [
                    shuffle(parts[k], parts[k + 1], idx)
                    for k in range(0, len(parts), 2)
                ]
                width *= 2
            narrowed = parts[0]
            out_ptr = builder.bitcast(
                builder.gep(dst.data, [out_off]), b_t.as_pointer()
            )
            builder.store(narrowed, out_ptr, align=1)
            return context.get_dummy_value()

        return sig, codegen

    # numba's stub types a call of an intrinsic with the typing context argument
    popcount = cast(Callable[[Any], Any], _popcount)
    eq_mask64 = cast(Callable[[Any, Any, Any], Any], _eq_mask64)
    distances64 = cast(Callable[[Any, int, Any, Any, int], None], _distances64)
    opts: dict[str, Any] = {"nogil": True, "boundscheck": False, "error_model": "numpy"}

    @njit(inline="always", **opts)
    def _set1(x: Any, row: _U64, buf: _Dist, n: int) -> None:
        for i in range(n):
            buf[i] = popcount(x ^ row[i])

    @njit(inline="always", **opts)
    def _set2(x: Any, y: Any, row0: _U64, row1: _U64, buf: _Dist, n: int) -> None:
        for i in range(n):
            buf[i] = popcount(x ^ row0[i]) + popcount(y ^ row1[i])

    @njit(inline="always", **opts)
    def _add1(x: Any, row: _U64, buf: _Dist, n: int) -> None:
        for i in range(n):
            buf[i] = buf[i] + popcount(x ^ row[i])

    @njit(**opts)
    def distances(qa: _U64, db_t: _U64, c0: int, c1: int, buf: _Dist) -> None:
        # buf[i - c0] = Hamming distance of query qa (w,) to item i, c0 <= i < c1.
        # Word-major db_t (w, ndb) keeps every inner loop contiguous (vectorized).
        w = db_t.shape[0]
        n = c1 - c0
        if w == 2:
            _set2(qa[0], qa[1], db_t[0, c0:c1], db_t[1, c0:c1], buf, n)
            return
        _set1(qa[0], db_t[0, c0:c1], buf, n)
        for j in range(1, w):
            _add1(qa[j], db_t[j, c0:c1], buf, n)

    @njit(inline="always", **opts)
    def _push(
        idx: int, d: Any, cnt: _I64, buck: _I64, r: int, s: int, k: int
    ) -> tuple[int, int]:
        # Accept item idx at distance d < r; keep r = the smallest distance whose
        # cumulative count reaches k (later items at >= r cannot enter the top k,
        # as ties go to smaller indices) and s = number kept below r.
        buck[d, cnt[d]] = idx
        cnt[d] += 1
        s += 1
        while s >= k:
            r -= 1
            s -= cnt[r]
        return r, s

    @njit(**opts)
    def topk(
        q: _U64,
        db_t: _U64,
        k: int,
        swar: bool,
        buf: _Dist,
        wbuf: _U64,
        out_idx: _I64,
        out_dist: _Dist,
    ) -> None:
        # Exact stable top-k per query: one scan with a shrinking distance bound;
        # kept items go to per-distance buckets in index order, so reading the
        # buckets in distance order yields (distance, index) ascending.
        nq, w = q.shape
        ndb = db_t.shape[1]
        bits = 64 * w
        chunk = buf.shape[0]
        cnt = np.zeros(bits + 1, np.int64)
        buck = np.empty((bits + 1, k), np.int64)
        ones = np.uint64(0x0101010101010101)
        high = np.uint64(0x8080808080808080)
        for a in range(nq):
            cnt[:] = 0
            r = bits + 1
            s = 0
            qa = q[a]
            for c0 in range(0, ndb, chunk):
                c1 = min(c0 + chunk, ndb)
                n = c1 - c0
                distances(qa, db_t, c0, c1, buf)
                start = 0
                if swar and r <= 128:
                    # 8 byte-distances per word; a word has a byte < r iff
                    # (x - r * ones) & ~x & high != 0 (exact for r <= 128).
                    n8 = n >> 3
                    for u in range(n8):
                        x = wbuf[u]
                        if ((x - ones * np.uint64(r)) & ~x & high) != 0:
                            for i in range(u * 8, u * 8 + 8):
                                d = np.int64(buf[i])
                                if d < r:
                                    r, s = _push(c0 + i, d, cnt, buck, r, s, k)
                    start = n8 * 8
                for i in range(start, n):
                    d = np.int64(buf[i])
                    if d < r:
                        r, s = _push(c0 + i, d, cnt, buck, r, s, k)
            m = 0
            for t in range(bits + 1):
                for u in range(cnt[t]):
                    if m < k:
                        out_idx[a, m] = buck[t, u]
                        out_dist[a, m] = t
                        m += 1

    @njit(**opts)
    def _relevance(la: Any, dl_t: Any, single: bool, c0: int, c1: int, out: Any) -> int:
        # out[i - c0] = relevance of item i (c0 <= i < c1) to query labels la (L,)
        # (equal class ids, or a shared bit of the multi-hot words); returns the
        # count. Word-major dl_t (L, ndb) keeps the loops contiguous (vectorized).
        m = c1 - c0
        row = dl_t[0, c0:c1]
        x = la[0]
        if single:
            for i in range(m):
                out[i] = row[i] == x
        else:
            for i in range(m):
                out[i] = (row[i] & x) != 0
            for j in range(1, dl_t.shape[0]):
                x = la[j]
                row = dl_t[j, c0:c1]
                for i in range(m):
                    out[i] |= (row[i] & x) != 0
        c = 0
        for i in range(m):
            c += out[i]
        return c

    # The scans record every item at its bucket's running count; the next record
    # slot advances only for relevant items (branch-free: an irrelevant item's
    # record is overwritten by the next one). A histogram word holds
    # (t << shift) | count, so one load, add and store updates bucket t and gives
    # the record (t, position in the bucket) in a single word.

    @njit(**opts)
    def _scan_buffered(
        dist: _Dist, rel: Any, m: int, hist: Any, rec: Any, n: Any
    ) -> Any:
        # One query against m items of precomputed distances and relevance.
        one = hist.dtype.type(1)
        for i in range(m):
            t = dist[i]
            v = hist[t] + one
            hist[t] = v
            rec[n] = v
            n += np.uint64(rel[i])
        return n

    # Tile scans for rank_stats, one signature: query a against items c0..c1-1.

    @njit(**opts)
    def scan_words(
        q: _U64, a: int, db_t: _U64, ql: Any, dl_t: Any, single: bool,
        c0: int, c1: int, hist: Any, rec: Any, n: Any, dist: _Dist, rel: Any,
        table: Any, members: _I64, cursor: _I64, stop: _I64,
    ) -> Any:  # fmt: skip
        # 64-bit codes and class ids: popcount, bucket and relevance in one loop.
        x = q[a, 0]
        lab = ql[a, 0]
        db = db_t[0, c0:c1]
        dl = dl_t[0, c0:c1]
        one = hist.dtype.type(1)
        for i in range(c1 - c0):
            t = popcount(x ^ db[i])
            v = hist[t] + one
            hist[t] = v
            rec[n] = v
            n += np.uint64(dl[i] == lab)
        return n

    @njit(**opts)
    def scan_words8(
        q: _U64, a: int, db_t: _U64, ql: Any, dl_t: Any, single: bool,
        c0: int, c1: int, hist: Any, rec: Any, n: Any, dist: _Dist, rel: Any,
        table: Any, members: _I64, cursor: _I64, stop: _I64,
    ) -> Any:  # fmt: skip
        # scan_words for uint8 class ids, without a store per item: the tile's
        # distances first (64-lane vector popcounts, as bytes in rel); then,
        # value by value over the tile's distance range, each bucket's count
        # before every 64-item chunk (table[t, c]) from one 64-byte compare and
        # popcount per chunk; then a record for each relevant item only, read
        # from the query's class members (database indices in order; cursor[a]
        # is the next one, stop[a] the end of the class): its bucket's count
        # before its chunk plus the earlier items of the chunk at its distance
        # (a second compare). The same records, in the same order, and
        # histogram as scan_words; the tile's last partial chunk goes through
        # scan_words itself.
        x = q[a, 0]
        db = db_t[0]
        full = (c1 - c0) - (c1 - c0) % 64
        chunks = full // 64
        for c in range(chunks):
            distances64(db, c0 + c * 64, x, rel, c * 64)
        if chunks > 0:
            lo = np.uint8(255)
            hi = np.uint8(0)
            for i in range(full):
                lo = min(lo, rel[i])
                hi = max(hi, rel[i])
            for t in range(lo, hi + 1):
                v = hist[t]
                row = table[t]
                for c in range(chunks):
                    row[c] = v
                    v += hist.dtype.type(popcount(eq_mask64(rel, c * 64, np.uint8(t))))
                hist[t] = v
        # unsigned indices: no negative-index wraparound in the loop
        one = hist.dtype.type(1)
        k = cursor[a]
        mine = members[k : stop[a]]
        edge = c0 + full
        for u in range(mine.shape[0]):
            g = mine[u]
            if g >= c1:
                break
            k += 1
            if g >= edge:
                continue  # the partial chunk's items: scan_words records them
            j = np.uint64(g - c0)
            t = rel[j]
            off = j & np.uint64(63)
            below = (np.uint64(1) << off) - np.uint64(1)
            earlier = popcount(eq_mask64(rel, np.intp(j - off), t) & below)
            rec[n] = table[t, j >> np.uint64(6)] + hist.dtype.type(earlier) + one
            n += np.uint64(1)
        cursor[a] = k
        return scan_words(
            q, a, db_t, ql, dl_t, single, edge, c1, hist, rec, n, dist, rel, table,
            members, cursor, stop,
        )  # fmt: skip

    @njit(**opts)
    def scan_rows(
        q: _U64, a: int, db_t: _U64, ql: Any, dl_t: Any, single: bool,
        c0: int, c1: int, hist: Any, rec: Any, n: Any, dist: _Dist, rel: Any,
        table: Any, members: _I64, cursor: _I64, stop: _I64,
    ) -> Any:  # fmt: skip
        # Any code length and either label kind: vectorized distances and
        # relevance of the tile first.
        distances(q[a], db_t, c0, c1, dist)
        _relevance(ql[a], dl_t, single, c0, c1, rel)
        return _scan_buffered(dist, rel, c1 - c0, hist, rec, n)

    @njit(**opts)
    def count_relevant(ql: Any, dl_t: Any, tile: int, out: _I64) -> None:
        # out[a] = number of database items relevant to query a (multi-label).
        ndb = dl_t.shape[1]
        rel = np.empty(tile, np.uint8)
        for a in range(ql.shape[0]):
            c = 0
            for c0 in range(0, ndb, tile):
                c += _relevance(ql[a], dl_t, False, c0, min(c0 + tile, ndb), rel)
            out[a] = c

    @njit(**opts)
    def _average_precision(
        hist: Any,
        rec: Any,
        shift: int,
        seen: _I64,
        c_all: _I64,
        c_rel: _I64,
        h_all: _I64,
        h_rel: _I64,
    ) -> float:
        # A relevant item at distance t that is the p-th item and the m-th
        # relevant item of its distance bucket (index order) has rank C_t + p and
        # is the (R_t + m)-th relevant item, where C_t / R_t count all / relevant
        # items at distances < t. rec holds (t << shift) | p of the relevant
        # items in index order, so m is a running count per bucket.
        nbins = hist.shape[0]
        sh = hist.dtype.type(shift)
        low = (hist.dtype.type(1) << sh) - hist.dtype.type(1)
        seen[:] = 0
        for u in range(rec.shape[0]):
            seen[rec[u] >> sh] += 1  # unsigned index: no wraparound test
        x = np.int64(0)
        y = np.int64(0)
        for b in range(nbins):
            h = np.int64(hist[b] & low)
            h_all[b] = h
            h_rel[b] = seen[b]
            c_all[b] = x
            c_rel[b] = y
            x += h
            y += seen[b]
            seen[b] = 0
        if rec.shape[0] == 0:
            return 0.0
        total = 0.0
        for u in range(rec.shape[0]):
            e = rec[u]
            t = e >> sh
            m = seen[t] + 1
            seen[t] = m
            total += (c_rel[t] + m) / (c_all[t] + np.int64(e & low))
        return total / rec.shape[0]

    @njit(**opts)
    def rank_stats(
        scan: Any,
        q: _U64,
        db_t: _U64,
        ql: Any,
        dl_t: Any,
        single: bool,
        n_rel: _I64,
        hist: Any,
        shift: int,
        tile: int,
        out_ap: NDArray[np.float64],
        hist_all: _I64,
        hist_rel: _I64,
        members: _I64,
        member_start: _I64,
        member_stop: _I64,
    ) -> None:
        # Per query: AP over the whole stable ranking and the distance histograms
        # of all / relevant items, by a counting sort in one pass over the
        # database. Queries go in blocks of hist.shape[0]; each block walks the
        # database in tiles that stay in cache while every query of the block
        # scans them (scan: scan_words or scan_rows). n_rel: relevant items per
        # query; a block gives each query n_rel + 1 record slots. scan_words8
        # reads query a's relevant items from members[member_start[a]:
        # member_stop[a]] (see _class_members); the other scans ignore them.
        nq = q.shape[0]
        cursor = member_start.copy()
        ndb = db_t.shape[1]
        nbins = hist.shape[1]
        qblock = hist.shape[0]
        sh = hist.dtype.type(shift)
        rec = np.empty(0, hist.dtype)
        dist = np.empty(tile, np.uint16)
        rel = np.empty(tile, np.uint8)
        # scan_words8's bucket counts before each 64-item chunk of a tile
        table = np.empty((nbins, tile // 64 + 1), hist.dtype)
        start = np.empty(qblock + 1, np.int64)
        cnt = np.empty(qblock, np.int64)
        seen = np.zeros(nbins, np.int64)
        c_all = np.empty(nbins, np.int64)
        c_rel = np.empty(nbins, np.int64)
        for q0 in range(0, nq, qblock):
            nb = min(qblock, nq - q0)
            start[0] = 0
            for b in range(nb):
                start[b + 1] = start[b] + n_rel[q0 + b] + 1
                cnt[b] = start[b]
                for t in range(nbins):
                    hist[b, t] = hist.dtype.type(t) << sh
            if start[nb] > rec.shape[0]:
                rec = np.empty(start[nb], hist.dtype)
            for c0 in range(0, ndb, tile):
                c1 = min(c0 + tile, ndb)
                for b in range(nb):
                    cnt[b] = scan(
                        q, q0 + b, db_t, ql, dl_t, single, c0, c1, hist[b], rec,
                        np.uint64(cnt[b]), dist, rel, table, members, cursor,
                        member_stop,
                    )  # fmt: skip
            for b in range(nb):
                a = q0 + b
                out_ap[a] = _average_precision(
                    hist[b], rec[start[b] : cnt[b]], shift, seen, c_all, c_rel,
                    hist_all[a], hist_rel[a],
                )  # fmt: skip

    @njit(**opts)
    def topk_counting(
        q: _U64, db_t: _U64, k: int, dist: _Dist, out_idx: _I64, out_dist: _Dist
    ) -> None:
        # Exact stable top-k for large k, O(ndb + k) memory: histogram of the
        # distances, then one placement pass at per-distance output offsets.
        nq = q.shape[0]
        ndb = db_t.shape[1]
        nbins = 64 * q.shape[1] + 1
        hist = np.empty(nbins, np.int64)
        offset = np.empty(nbins, np.int64)
        for a in range(nq):
            distances(q[a], db_t, 0, ndb, dist)
            hist[:] = 0
            for i in range(ndb):
                hist[dist[i]] += 1
            below = 0
            r = 0
            while below + hist[r] < k:
                offset[r] = below
                below += hist[r]
                r += 1
            offset[r] = below  # bucket r fills the last k - below slots
            for i in range(ndb):
                t = np.int64(dist[i])
                if t < r or (t == r and offset[r] < k):
                    out_idx[a, offset[t]] = i
                    out_dist[a, offset[t]] = t
                    offset[t] += 1

    return SimpleNamespace(
        topk=topk,
        topk_counting=topk_counting,
        rank_stats=rank_stats,
        scan_words=scan_words,
        scan_words8=scan_words8,
        scan_rows=scan_rows,
        count_relevant=count_relevant,
        distances=distances,
        average_precision=_average_precision,
    )


# ------------------------------------------------------------------ core primitives


def _topk_impl(
    q: NDArray[np.uint64], db: NDArray[np.uint64], k: int, backend: str
) -> tuple[NDArray[np.int64], NDArray[np.unsignedinteger]]:
    nq, words = q.shape
    ndb = db.shape[0]
    dtype = distance_dtype(WORD_BITS * words)
    if backend == "numba":
        kernels = _numba_kernels()
        out_idx = np.empty((nq, k), np.int64)
        out_dist = np.empty((nq, k), dtype)
        db_t = np.ascontiguousarray(db.T)
        if (WORD_BITS * words + 1) * k > _BUCKET_MAX_SLOTS:
            dist = np.empty(ndb, dtype)
            kernels.topk_counting(q, db_t, k, dist, out_idx, out_dist)
            return out_idx, out_dist
        wbuf = np.empty(_TOPK_CHUNK * dtype.itemsize // 8, np.uint64)
        buf = wbuf.view(dtype)
        kernels.topk(q, db_t, k, dtype.itemsize == 1, buf, wbuf, out_idx, out_dist)
        return out_idx, out_dist
    out_idx = np.empty((nq, k), np.int64)
    out_dist = np.empty((nq, k), dtype)
    block = max(1, _BLOCK_PAIRS // ndb)
    index = np.arange(ndb, dtype=np.int64)
    for q0 in range(0, nq, block):
        q1 = min(q0 + block, nq)
        dist = hamming_distance(q[q0:q1], db)
        # Unique keys (distance, index) make argpartition + sort exact and stable.
        key = dist.astype(np.int64) * ndb + index
        if k < ndb:
            part = np.argpartition(key, k - 1, axis=1)[:, :k]
            order = np.argsort(np.take_along_axis(key, part, axis=1), axis=1)
            idx = np.take_along_axis(part, order, axis=1)
        else:
            idx = np.argsort(key, axis=1)
        out_idx[q0:q1] = idx
        out_dist[q0:q1] = np.take_along_axis(dist, idx, axis=1)
    return out_idx, out_dist


def _rank_stats_impl(
    q: NDArray[np.uint64], db: NDArray[np.uint64], labels: _Labels, backend: str
) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
    """AP@ALL per query and (nq, 64 * words + 1) histograms of all/relevant items."""
    nq, words = q.shape
    ndb = db.shape[0]
    nbins = WORD_BITS * words + 1
    ap = np.empty(nq, np.float64)
    hist_all = np.zeros((nq, nbins), np.int64)
    hist_rel = np.zeros((nq, nbins), np.int64)
    if backend == "numba":
        kernels = _numba_kernels()
        if labels.single:
            ql, dl_t, n_relevant = _class_ids(labels)
        else:
            ql, dl_t = labels.query, labels.db_t
            n_relevant = np.empty(nq, np.int64)
            kernels.count_relevant(ql, dl_t, _RANK_TILE, n_relevant)
        if words == 1 and labels.single:
            # 64-bit codes: the chunked scan where class ids fit a byte
            small = dl_t.dtype == np.uint8
            scan = kernels.scan_words8 if small else kernels.scan_words
        else:
            scan = kernels.scan_rows
        word, shift = _record_word(nbins, ndb)
        hist = np.empty((min(_RANK_QUERY_BLOCK, nq), nbins), word)
        members = _class_members(ql, dl_t, scan is kernels.scan_words8)
        kernels.rank_stats(
            scan, q, np.ascontiguousarray(db.T), ql, dl_t, labels.single,
            n_relevant, hist, shift, _RANK_TILE, ap, hist_all, hist_rel, *members,
        )  # fmt: skip
        return ap, hist_all, hist_rel
    block = max(1, _BLOCK_PAIRS // ndb)
    ranks = np.arange(1, ndb + 1, dtype=np.float64)
    for q0 in range(0, nq, block):
        q1 = min(q0 + block, nq)
        dist = hamming_distance(q[q0:q1], db)
        rel = _relevance_block(labels, q0, q1)
        rows = np.arange(q1 - q0)[:, None] * nbins
        hist_all[q0:q1] = np.bincount(
            (rows + dist).ravel(), minlength=(q1 - q0) * nbins
        ).reshape(q1 - q0, nbins)
        hist_rel[q0:q1] = np.bincount(
            (rows + dist)[rel], minlength=(q1 - q0) * nbins
        ).reshape(q1 - q0, nbins)
        order = np.argsort(dist, axis=1, kind="stable")
        rel_sorted = np.take_along_axis(rel, order, axis=1)
        hits = np.cumsum(rel_sorted, axis=1)
        n_rel = hits[:, -1]
        precision_sum = np.where(rel_sorted, hits / ranks, 0.0).sum(axis=1)
        ap[q0:q1] = np.where(n_rel > 0, precision_sum / np.maximum(n_rel, 1), 0.0)
    return ap, hist_all, hist_rel


def _class_ids(labels: _Labels) -> tuple[NDArray[Any], NDArray[Any], NDArray[np.int64]]:
    """Single-label classes as small ids for the numba kernel.

    Returns (nq, 1) query ids, (1, ndb) database ids (the narrowest unsigned
    dtype that holds them; equal ids iff equal labels) and the (nq,) number of
    database items relevant to each query.
    """
    q = labels.query[:, 0].view(np.int64)
    d = labels.db_t[0].view(np.int64)
    lo = min(int(q.min()), int(d.min()))
    hi = max(int(q.max()), int(d.max()))
    if hi - lo < 1 << 16:
        q_ids, d_ids, n_ids = q - lo, d - lo, hi - lo + 1
    else:  # sparse ids: number the distinct labels
        uniq, inv = np.unique(np.concatenate([q, d]), return_inverse=True)
        q_ids, d_ids, n_ids = inv[: q.size], inv[q.size :], uniq.size
    dtype = np.min_scalar_type(n_ids - 1)
    n_rel = np.bincount(d_ids, minlength=n_ids)[q_ids].astype(np.int64)
    return (
        q_ids.astype(dtype).reshape(-1, 1),
        d_ids.astype(dtype).reshape(1, -1),
        n_rel,
    )


def _class_members(
    ql: NDArray[Any], dl_t: NDArray[Any], needed: bool = True
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Database indices by class id (index order within a class), query slices.

    Query a's relevant items (single labels) are members[start[a]:stop[a]].
    Empty when not ``needed`` (only the chunked 64-bit scan reads them).
    """
    nq = ql.shape[0]
    if not needed:
        none = np.zeros(nq, np.int64)
        return np.empty(0, np.int64), none, none
    ids = dl_t[0].astype(np.int64)
    q_ids = ql[:, 0].astype(np.int64)
    counts = np.bincount(ids, minlength=int(max(ids.max(initial=0), q_ids.max())) + 1)
    first = np.cumsum(counts) - counts
    members = np.argsort(ids, kind="stable").astype(np.int64)
    return members, first[q_ids], first[q_ids] + counts[q_ids]


def _record_word(nbins: int, ndb: int) -> tuple[type[np.unsignedinteger], int]:
    """Word and shift of the numba histogram: (t << shift) | count, count <= ndb."""
    shift = ndb.bit_length()
    if (nbins - 1) < 1 << (32 - shift):
        return np.uint32, shift
    return np.uint64, shift


def _relevance_of(labels: _Labels, idx: NDArray[np.int64]) -> NDArray[np.bool_]:
    """(nq, k) relevance of the retrieved database items ``idx`` (nq, k)."""
    if labels.single:
        return labels.db_t[0][idx] == labels.query[:, 0, None]
    rel = np.zeros(idx.shape, dtype=np.bool_)
    for j in range(labels.db_t.shape[0]):
        rel |= (labels.db_t[j][idx] & labels.query[:, j, None]) != 0
    return rel


def _map_at_k(rel_top: NDArray[np.bool_], k: int) -> float:
    """Mean AP@k of (nq, >= k) relevance flags of the ranked lists."""
    rel = rel_top[:, :k]
    hits = np.cumsum(rel, axis=1)
    precision = hits / np.arange(1, rel.shape[1] + 1)
    n_rel = hits[:, -1]
    ap = np.where(rel, precision, 0.0).sum(axis=1) / np.maximum(n_rel, 1)
    return float(np.mean(np.where(n_rel > 0, ap, 0.0)))


def _pr_from_hists(
    hist_all: NDArray[np.int64], hist_rel: NDArray[np.int64], bits: int
) -> dict[str, NDArray[Any]]:
    retrieved = np.cumsum(hist_all[:, : bits + 1], axis=1)
    hits = np.cumsum(hist_rel[:, : bits + 1], axis=1)
    n_rel = hist_rel.sum(axis=1, keepdims=True)
    precision = np.where(retrieved > 0, hits / np.maximum(retrieved, 1), 0.0)
    recall = np.where(n_rel > 0, hits / np.maximum(n_rel, 1), 0.0)
    return {
        "radius": np.arange(bits + 1, dtype=np.int64),
        "precision": precision.mean(axis=0),
        "recall": recall.mean(axis=0),
    }


def _check_k(k: int, name: str) -> int:
    if isinstance(k, bool) or int(k) != k or k < 1:
        raise ValueError(f"{name} must be a positive integer, got {k!r}")
    return int(k)


# ----------------------------------------------------------------------- public API


def hamming_topk(
    query_packed: ArrayLike,
    db_packed: ArrayLike,
    *,
    k: int,
    backend: Backend = "auto",
) -> tuple[NDArray[np.int64], NDArray[np.unsignedinteger]]:
    """Exact k nearest database codes of each query in Hamming distance.

    Parameters
    ----------
    query_packed : array_like
        (nq, words) uint64 packed query codes (:func:`hashing.codes.pack_codes`).
    db_packed : array_like
        (ndb, words) uint64 packed database codes.
    k : int
        List length; values above ``ndb`` are clipped to ``ndb``.
    backend : {"auto", "numpy", "numba"}
        See the module docstring.

    Returns
    -------
    indices : numpy.ndarray
        (nq, min(k, ndb)) int64 database indices, ranked by distance ascending and
        then index ascending (stable ties).
    distances : numpy.ndarray
        (nq, min(k, ndb)) Hamming distances in bits of those items; uint8 when
        ``64 * words <= 255``, else uint16.

    """
    q, db = _check_codes(query_packed, db_packed)
    k = min(_check_k(k, "k"), db.shape[0])
    return _topk_impl(q, db, k, _choose_backend(backend, q.shape[0] * db.shape[0]))


def mean_average_precision(
    query_packed: ArrayLike,
    db_packed: ArrayLike,
    query_labels: ArrayLike,
    db_labels: ArrayLike,
    *,
    top_k: int | None = None,
    backend: Backend = "auto",
) -> float:
    r"""Mean average precision of Hamming ranking (mAP@ALL or mAP@K).

    With the stable ranking of the module docstring, ``rel_j`` in {0, 1} the
    relevance of the item at position j (1-based) and P@j the fraction of relevant
    items among the first j:

    * ``top_k=None`` (mAP@ALL): :math:`AP = \frac{1}{R} \sum_{j=1}^{n_{db}}
      rel_j \, P@j`, with R the number of relevant items in the whole database.
    * ``top_k=K`` (mAP@K, the DeepHash-pytorch ``CalcTopMap`` convention):
      :math:`AP@K = \frac{1}{R_K} \sum_{j=1}^{K} rel_j \, P@j`, with
      :math:`R_K` the number of relevant items within the first K (not in the
      whole database). K above ``ndb`` is clipped to ``ndb`` (then equal to
      mAP@ALL).

    A query with R = 0 (resp. R_K = 0) gets AP 0 and still counts in the mean.

    Parameters
    ----------
    query_packed : array_like
        (nq, words) uint64 packed query codes.
    db_packed : array_like
        (ndb, words) uint64 packed database codes.
    query_labels : array_like
        (nq,) integer class ids or (nq, C) multi-hot.
    db_labels : array_like
        (ndb,) or (ndb, C), same kind as ``query_labels``.
    top_k : int or None
        K of mAP@K; None for mAP@ALL.
    backend : {"auto", "numpy", "numba"}
        See the module docstring.

    Returns
    -------
    float
        Mean over all queries, in [0, 1].

    """
    q, db = _check_codes(query_packed, db_packed)
    labels = _encode_labels(query_labels, db_labels, q.shape[0], db.shape[0])
    chosen = _choose_backend(backend, q.shape[0] * db.shape[0])
    if top_k is None:
        ap, _, _ = _rank_stats_impl(q, db, labels, chosen)
        return float(ap.mean())
    k = min(_check_k(top_k, "top_k"), db.shape[0])
    idx, _ = _topk_impl(q, db, k, chosen)
    return _map_at_k(_relevance_of(labels, idx), k)


def precision_recall_by_radius(
    query_packed: ArrayLike,
    db_packed: ArrayLike,
    query_labels: ArrayLike,
    db_labels: ArrayLike,
    *,
    bits: int,
    backend: Backend = "auto",
) -> dict[str, NDArray[Any]]:
    """Precision and recall of Hamming-ball retrieval for every radius.

    For a query and radius r the retrieved set is every item at distance <= r.
    precision(r) = relevant retrieved / retrieved, taken as 0 when nothing is
    retrieved; recall(r) = relevant retrieved / relevant in the database, taken as
    0 when the query has no relevant item. Both are means over all queries.

    Parameters
    ----------
    query_packed : array_like
        (nq, words) uint64 packed query codes.
    db_packed : array_like
        (ndb, words) uint64 packed database codes.
    query_labels : array_like
        (nq,) integer class ids or (nq, C) multi-hot.
    db_labels : array_like
        (ndb,) or (ndb, C), same kind as ``query_labels``.
    bits : int
        Code length in bits (radii run from 0 to ``bits``).
    backend : {"auto", "numpy", "numba"}
        See the module docstring.

    Returns
    -------
    dict
        ``radius``: (bits + 1,) int64 0..bits; ``precision`` and ``recall``:
        (bits + 1,) float64.

    """
    q, db = _check_codes(query_packed, db_packed)
    _check_bits(bits, q.shape[1])
    labels = _encode_labels(query_labels, db_labels, q.shape[0], db.shape[0])
    chosen = _choose_backend(backend, q.shape[0] * db.shape[0])
    _, hist_all, hist_rel = _rank_stats_impl(q, db, labels, chosen)
    return _pr_from_hists(hist_all, hist_rel, bits)


def _check_bits(bits: int, words: int) -> None:
    if not (WORD_BITS * (words - 1) < bits <= WORD_BITS * words):
        raise ValueError(f"bits={bits} does not match codes packed in {words} words")


def _check_ks(ks: ArrayLike) -> tuple[int, ...]:
    values = tuple(np.atleast_1d(np.asarray(ks)).tolist())
    if not values:
        raise ValueError("ks must not be empty")
    return tuple(_check_k(k, "each k in ks") for k in values)


def precision_at_k(
    query_packed: ArrayLike,
    db_packed: ArrayLike,
    query_labels: ArrayLike,
    db_labels: ArrayLike,
    *,
    ks: ArrayLike,
    backend: Backend = "auto",
) -> NDArray[np.float64]:
    """Mean precision of the top-k Hamming ranking for several k.

    P@k of a query = relevant items among its first k' / k', with
    k' = min(k, ndb) (k above the database size is clipped), in the stable
    ranking of the module docstring.

    Parameters
    ----------
    query_packed : array_like
        (nq, words) uint64 packed query codes.
    db_packed : array_like
        (ndb, words) uint64 packed database codes.
    query_labels : array_like
        (nq,) integer class ids or (nq, C) multi-hot.
    db_labels : array_like
        (ndb,) or (ndb, C), same kind as ``query_labels``.
    ks : array_like
        Positive list lengths.
    backend : {"auto", "numpy", "numba"}
        See the module docstring.

    Returns
    -------
    numpy.ndarray
        (len(ks),) float64 mean precision over all queries, in [0, 1].

    """
    _, rel_top, ks_t, ndb = _top_k_relevance(
        query_packed, db_packed, query_labels, db_labels, ks, backend
    )
    return _precision_from_top(rel_top, ks_t, ndb)


def _top_k_relevance(
    query_packed: ArrayLike,
    db_packed: ArrayLike,
    query_labels: ArrayLike,
    db_labels: ArrayLike,
    ks: ArrayLike,
    backend: Backend,
) -> tuple[_Labels, NDArray[np.bool_], tuple[int, ...], int]:
    """Check the inputs and rank to the largest k: ``(labels, rel_top, ks, ndb)``.

    ``rel_top`` is (nq, min(max k, ndb)): whether each of a query's first items in
    the stable ranking is relevant. Shared by :func:`precision_at_k` and
    :func:`recall_at_k`.
    """
    q, db = _check_codes(query_packed, db_packed)
    labels = _encode_labels(query_labels, db_labels, q.shape[0], db.shape[0])
    ks_t = _check_ks(ks)
    k_max = min(max(ks_t), db.shape[0])
    idx, _ = _topk_impl(
        q, db, k_max, _choose_backend(backend, q.shape[0] * db.shape[0])
    )
    return labels, _relevance_of(labels, idx), ks_t, db.shape[0]


def _precision_from_top(
    rel_top: NDArray[np.bool_], ks: tuple[int, ...], ndb: int
) -> NDArray[np.float64]:
    hits = np.cumsum(rel_top, axis=1)
    out = np.empty(len(ks), np.float64)
    for i, k in enumerate(ks):
        kk = min(k, ndb)
        out[i] = float(np.mean(hits[:, kk - 1] / kk))
    return out


def recall_at_k(
    query_packed: ArrayLike,
    db_packed: ArrayLike,
    query_labels: ArrayLike,
    db_labels: ArrayLike,
    *,
    ks: ArrayLike,
    backend: Backend = "auto",
) -> NDArray[np.float64]:
    """Mean recall of the top-k Hamming ranking for several k.

    R@k of a query = relevant items among its first k' / relevant items in the
    whole database, with k' = min(k, ndb) (k above the database size is clipped,
    so R@k is then 1 for every query that has a relevant item), in the stable
    ranking of the module docstring. A query with no relevant item in the
    database has R@k = 0 and still counts in the mean (as in
    :func:`precision_recall_by_radius`), so the mean is below 1 whenever such
    queries exist.

    Parameters
    ----------
    query_packed : array_like
        (nq, words) uint64 packed query codes.
    db_packed : array_like
        (ndb, words) uint64 packed database codes.
    query_labels : array_like
        (nq,) integer class ids or (nq, C) multi-hot.
    db_labels : array_like
        (ndb,) or (ndb, C), same kind as ``query_labels``.
    ks : array_like
        Positive list lengths.
    backend : {"auto", "numpy", "numba"}
        See the module docstring.

    Returns
    -------
    numpy.ndarray
        (len(ks),) float64 mean recall over all queries, in [0, 1].

    """
    labels, rel_top, ks_t, ndb = _top_k_relevance(
        query_packed, db_packed, query_labels, db_labels, ks, backend
    )
    n_rel = _relevant_counts(labels, rel_top.shape[0], ndb)
    return _recall_from_top(rel_top, n_rel, ks_t, ndb)


def _relevant_counts(labels: _Labels, nq: int, ndb: int) -> NDArray[np.int64]:
    """(nq,) number of database items relevant to each query."""
    out = np.empty(nq, np.int64)
    block = max(1, _BLOCK_PAIRS // ndb)
    for q0 in range(0, nq, block):
        q1 = min(q0 + block, nq)
        out[q0:q1] = _relevance_block(labels, q0, q1).sum(axis=1)
    return out


def _recall_from_top(
    rel_top: NDArray[np.bool_],
    n_rel: NDArray[np.int64],
    ks: tuple[int, ...],
    ndb: int,
) -> NDArray[np.float64]:
    """Mean R@k of (nq, >= max k') relevance flags; R@k = 0 when n_rel is 0."""
    hits = np.cumsum(rel_top, axis=1)
    out = np.empty(len(ks), np.float64)
    for i, k in enumerate(ks):
        kk = min(k, ndb)
        recall = np.where(n_rel > 0, hits[:, kk - 1] / np.maximum(n_rel, 1), 0.0)
        out[i] = float(np.mean(recall))
    return out


@dataclass(frozen=True, eq=False)
class RetrievalReport:
    """Retrieval metrics of one evaluation (see :func:`evaluate_retrieval`).

    Attributes
    ----------
    map_all : float
        mAP@ALL.
    map_at_k : float
        mAP@``top_k`` (DeepHash-pytorch ``CalcTopMap`` convention).
    top_k : int
        K of ``map_at_k`` as requested (clipped to ``n_db`` in the computation).
    pr : dict
        ``radius`` (bits + 1,) int64, ``precision`` and ``recall`` (bits + 1,)
        float64 of Hamming-ball retrieval (see
        :func:`precision_recall_by_radius`).
    ks : tuple of int
        List lengths of ``precision_at_k`` and ``recall_at_k``.
    precision_at_k : numpy.ndarray
        (len(ks),) float64 mean P@k.
    recall_at_k : numpy.ndarray
        (len(ks),) float64 mean R@k: relevant items in the first k / relevant
        items in the whole database, per query, then the mean over all queries; a
        query with no relevant item in the database has R@k = 0 and still counts
        (see :func:`recall_at_k`).
    n_query, n_db, bits : int
        Problem size and code length.

    """

    map_all: float
    map_at_k: float
    top_k: int
    pr: dict[str, NDArray[Any]]
    ks: tuple[int, ...]
    precision_at_k: NDArray[np.float64]
    recall_at_k: NDArray[np.float64]
    n_query: int
    n_db: int
    bits: int

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serializable dict (arrays become lists of Python numbers).

        Returns
        -------
        dict
            Keys ``map_all``, ``map_at_k``, ``top_k``, ``pr`` (dict of lists),
            ``ks``, ``precision_at_k``, ``recall_at_k``, ``n_query``, ``n_db``,
            ``bits``.

        """
        return {
            "map_all": float(self.map_all),
            "map_at_k": float(self.map_at_k),
            "top_k": int(self.top_k),
            "pr": {key: np.asarray(v).tolist() for key, v in self.pr.items()},
            "ks": [int(k) for k in self.ks],
            "precision_at_k": np.asarray(self.precision_at_k).tolist(),
            "recall_at_k": np.asarray(self.recall_at_k).tolist(),
            "n_query": int(self.n_query),
            "n_db": int(self.n_db),
            "bits": int(self.bits),
        }


def evaluate_retrieval(
    query_codes: ArrayLike,
    db_codes: ArrayLike,
    query_labels: ArrayLike,
    db_labels: ArrayLike,
    *,
    top_k: int,
    ks: ArrayLike,
    backend: Backend = "auto",
) -> RetrievalReport:
    """All retrieval metrics of one query set against one database.

    One pass over the (query, database) pairs gives mAP@ALL, the
    precision-recall curve and each query's number of relevant items; one
    top-max(top_k, ks) search gives mAP@top_k, P@k and R@k (recall@k: relevant
    items in the first k / relevant items in the database; 0 for a query with no
    relevant item, which still counts in the mean).

    Parameters
    ----------
    query_codes : array_like
        (nq, bits) query codes in {-1, +1} (e.g. from
        :func:`hashing.codes.sign_codes`) or bool with True = +1.
    db_codes : array_like
        (ndb, bits) database codes, same form.
    query_labels : array_like
        (nq,) integer class ids or (nq, C) multi-hot.
    db_labels : array_like
        (ndb,) or (ndb, C), same kind as ``query_labels``.
    top_k : int
        K of mAP@K.
    ks : array_like
        List lengths for precision@k and recall@k.
    backend : {"auto", "numpy", "numba"}
        See the module docstring.

    Returns
    -------
    RetrievalReport
        Frozen dataclass of the metrics; ``to_dict()`` gives a JSON-friendly dict.

    """
    q_arr = np.asarray(query_codes)
    d_arr = np.asarray(db_codes)
    if q_arr.ndim != 2 or d_arr.ndim != 2 or q_arr.shape[1] != d_arr.shape[1]:
        raise ValueError(
            "codes must be 2-D (n, bits) with the same bits, "
            f"got {q_arr.shape} and {d_arr.shape}"
        )
    bits = int(q_arr.shape[1])
    q, db = _check_codes(pack_codes(q_arr), pack_codes(d_arr))
    nq, ndb = q.shape[0], db.shape[0]
    labels = _encode_labels(query_labels, db_labels, nq, ndb)
    top_k = _check_k(top_k, "top_k")
    ks_t = _check_ks(ks)
    chosen = _choose_backend(backend, nq * ndb)

    ap, hist_all, hist_rel = _rank_stats_impl(q, db, labels, chosen)
    k_max = min(max(top_k, *ks_t), ndb)
    idx, _ = _topk_impl(q, db, k_max, chosen)
    rel_top = _relevance_of(labels, idx)
    return RetrievalReport(
        map_all=float(ap.mean()),
        map_at_k=_map_at_k(rel_top, min(top_k, ndb)),
        top_k=top_k,
        pr=_pr_from_hists(hist_all, hist_rel, bits),
        ks=ks_t,
        precision_at_k=_precision_from_top(rel_top, ks_t, ndb),
        recall_at_k=_recall_from_top(rel_top, hist_rel.sum(axis=1), ks_t, ndb),
        n_query=nq,
        n_db=ndb,
        bits=bits,
    )
