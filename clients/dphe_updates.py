"""The DPHE mod: the (sparsified) update leaves encrypted under DPHE.

After :mod:`clients.sparse_updates` made the reply's model ``w_global + s``,
:func:`encrypt_reply` encrypts ``s``, the train loss (one more coordinate,
:func:`strategies.dphe.setup.with_loss`) and the client's weight with the client's
DPHE bundle (``crypto.encrypt_update``) into a ``dphe`` record that replaces
``arrays``, bound to the keyholder session (``dphe-session``), the ``model`` stream
and the round of the train config. The MetricRecord is sent *empty*:
``num-examples`` travels as the encrypted weight, ``train-loss`` inside the encrypted
vector, and no other per-client statistic leaves in clear (the server reports the
aggregate loss).

Before it encrypts, the client checks the keyholder's proof that the session serves
its own run (``dphe-session-proof``, :func:`crypto.binding.check_session_proof`),
binds the digest of the arrays it received (:func:`crypto.binding.model_digest`)
into its tags and MAC (which bind the session and round too), and refuses a second
encryption for the same (session, stream, round): two encryptions of one round
would give the server their quotient.

* ``dphe.sparsity-layout = "shared"`` (default) or ``"block"``: :func:`model_blocks`
  gives the sparsification mod the round's phi-space block of every coordinate.
* ``dphe.prototypes`` (FedHAP): the ``prototypes`` upload is replaced by an encrypted
  ``dphe.prototypes`` record of :func:`hashing.fedhap.prototypes.prototype_sum_vector`
  (weight 1, stream ``prototypes``; its layout needs ``num-classes``, which the
  server sends in the train config), so the server learns only per-class totals.
* **Obfuscators off the critical path** (``dphe.obfuscator-pool-rounds``, default
  2): ``dphe.obfuscators`` picks the ``r**n`` source (:mod:`crypto.obfuscators`;
  ``full`` by default). Each node keeps a pool of precomputed values in its state
  folder (:func:`pool_folder`; :class:`crypto.obfuscator_store.ObfuscatorStore`:
  0700 folder, 0600 files, each value used once and deleted). The mod sizes it from
  the round's known ciphertext count (:func:`round_ciphertexts`), starts a
  background filler when a train message arrives and the pool is short (it runs
  while the node trains) and again after the reply is built (between messages); the
  encryption takes its values from the pool, draws the rest online and logs how
  many.

What still travels in clear under DPHE: the reply's size (``ceil(touched / M)``
shards of ``M`` blocks with the default padding; one shard of exactly ``k`` blocks
with the block layout) and the ``privacy`` record of the DP mechanisms applied.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp.typing import ClientAppCallable, Mod

from crypto import (
    STREAM_MODEL,
    STREAM_PROTOTYPES,
    AggregationContext,
    DPHEParams,
    ObfuscatorPool,
    coordinate_blocks,
    encrypt_update,
    make_obfuscators,
)
from crypto.binding import check_session_proof, model_digest
from crypto.obfuscator_store import ObfuscatorStore, private_dir, spawn_fill
from crypto.obfuscators import ObfuscatorSource
from hashing.fedhap.prototypes import prototype_sum_vector
from hashing.update_sparsity import flatten_arrays
from settings import keys as K
from settings.prototype_records import FEDHAP_UPLOAD, read_prototype_record
from settings.run_settings import RunSettings
from strategies.dphe.setup import (
    ClientBundle,
    block_layout,
    cached_client_bundle,
    client_bundle_path,
    dphe_params,
    dphe_record,
    update_weight,
    with_loss,
)

logger = logging.getLogger(__name__)

ENV_STATE_DIR = "FEDHASH_NODE_STATE_DIR"
"""The node's state folder when its node config has no ``state-dir``."""


def model_blocks(
    settings: RunSettings,
    *,
    partition_id: int,
    node_bundle: str,
    train_config: ConfigRecord | None,
    dimension: int,
) -> tuple[np.ndarray, int] | None:
    """Return the round's phi-space block of each model coordinate (block layout).

    ``dimension`` = the model's values (the loss coordinate is added here). Returns
    ``(block ids of the model, loss and weight coordinates; number of blocks)``, or
    ``None`` when the top-k is element-wise or the run is not under DPHE.
    """
    if not block_layout(settings.dphe_run):
        return None
    session, server_round = _session_and_round(train_config)
    bundle = cached_client_bundle(
        str(client_bundle_path(settings, partition_id, node_bundle)), partition_id
    )
    params = dphe_params(
        settings.dphe_run, dimension=dimension + 1, key_bits=bundle.key_bits
    )
    context = AggregationContext(session, STREAM_MODEL, server_round)
    return coordinate_blocks(bundle, params, context), params.num_blocks


def shard_ciphertexts(params: DPHEParams) -> int:
    """Most ciphertexts one encrypted vector of ``params`` takes (padding included).

    Exact under padding with one shard (the block layout: ``k`` blocks); an upper
    bound otherwise (every shard filled).
    """
    if params.pad and params.capacity:
        if params.single_shard:
            return params.capacity
        return -(-params.num_blocks // params.capacity) * params.capacity
    return params.num_blocks


def round_ciphertexts(
    settings: RunSettings, *, dimension: int, key_bits: int, num_classes: int = 0
) -> int:
    """Ciphertexts a client encrypts per round: the model stream (+ prototypes)."""
    total = shard_ciphertexts(
        dphe_params(settings.dphe_run, dimension=dimension + 1, key_bits=key_bits)
    )
    if settings.dphe.prototypes and num_classes > 0:
        total += shard_ciphertexts(
            dphe_params(
                settings.dphe_run,
                dimension=num_classes * (settings.code_length + 1),
                key_bits=key_bits,
                uniform=True,
            )
        )
    return total


def encrypt_reply(
    reply: RecordDict,
    *,
    global_arrays: ArrayRecord,
    settings: RunSettings,
    partition_id: int,
    rng: np.random.Generator,
    node_bundle: str = "",
    num_classes: int = 0,
    train_config: ConfigRecord | None = None,
    run_id: int | None = None,
    node_state: RecordDict | None = None,
    pool: ObfuscatorStore | None = None,
) -> RecordDict:
    """Encrypt the reply's (sparsified) model update, in place; return ``reply``.

    Parameters
    ----------
    reply : RecordDict
        The reply after :func:`clients.sparse_updates.sparsify_reply`: the model
        ``w_global + s`` in ``arrays``, ``num-examples`` in ``metrics``.
    global_arrays : ArrayRecord
        The model the server sent this round (the update's reference).
    settings : RunSettings
        The run's settings (nothing happens unless ``secure-aggregation = "dphe"``).
    partition_id : int
        This client's id (selects its DPHE bundle).
    rng : numpy.random.Generator
        Shard order and padding blocks (not the Paillier randomness, which is the
        library's own CSPRNG).
    node_bundle : str
        The node config's ``dphe-key-bundle`` path, if any.
    num_classes : int
        Size of the label space (the layout of encrypted prototype sums).
    train_config : ConfigRecord, optional
        The train message's config: ``server-round``, the keyholder's
        ``dphe-session`` and ``dphe-session-proof`` (required).
    run_id : int, optional
        This client's Flower run id (``Context.run_id``; required): the session
        proof must bind the session to it.
    node_state : RecordDict, optional
        The node's state for this run (``Context.state``), where the encryptions
        made are recorded besides this process's own record.
    pool : ObfuscatorStore, optional
        The node's precomputed obfuscators for this key (values taken are deleted;
        the rest are drawn online and logged).

    Raises
    ------
    ValueError
        If the train config lacks a well-formed session id or round, the session
        proof does not bind the session to ``run_id``, or this client already
        encrypted for that (session, stream, round).
    """
    if settings.secure_aggregation != "dphe":
        return reply
    local, layout = flatten_arrays(_numpy(reply[K.ARRAYS]))
    reference, ref_layout = flatten_arrays(_numpy(global_arrays))
    if layout != ref_layout:
        raise ValueError("the trained model's arrays differ from the global model's")
    update = local - reference
    session, server_round = _session_and_round(train_config)
    metrics = reply[K.METRICS]
    weight = update_weight(settings, int(metrics[K.NUM_EXAMPLES]))
    loss = float(metrics.get(K.TRAIN_LOSS, 0.0))
    path = client_bundle_path(settings, partition_id, node_bundle)
    bundle = cached_client_bundle(str(path), partition_id)
    _check_session_proof(bundle, session, run_id, train_config)
    digest = model_digest(_numpy(global_arrays))
    streams = [STREAM_MODEL]
    protos = settings.dphe.prototypes and K.PROTOTYPES in reply
    if protos:
        streams.append(STREAM_PROTOTYPES)
        if num_classes <= 0:
            raise ValueError(
                f"DPHE prototypes need {K.NUM_CLASSES!r} > 0 in the train config "
                f"(the layout of the encrypted sums); got {num_classes!r}"
            )
    _claim_encryptions(bundle, session, server_round, streams, node_state)
    source, taken = _pooled(
        bundle,
        settings,
        pool,
        round_ciphertexts(
            settings,
            dimension=update.size,
            key_bits=bundle.key_bits,
            num_classes=num_classes if protos else 0,
        ),
    )
    del reply[K.ARRAYS]
    reply[K.DPHE] = _encrypted(
        with_loss(update, loss),
        weight,
        bundle,
        settings,
        rng,
        context=AggregationContext(session, STREAM_MODEL, server_round),
        uniform=False,
        model=digest,
        obfuscators=source,
    )
    reply[K.METRICS] = MetricRecord()  # nothing about this client in clear
    if protos:
        upload = read_prototype_record(reply.pop(K.PROTOTYPES), FEDHAP_UPLOAD)
        vector = prototype_sum_vector(
            upload, num_classes=num_classes, bits=settings.code_length
        )
        reply[K.DPHE_PROTOS] = _encrypted(
            vector,
            1,
            bundle,
            settings,
            rng,
            context=AggregationContext(session, STREAM_PROTOTYPES, server_round),
            uniform=True,
            model=digest,
            obfuscators=source,
        )
    _return_unused(source, pool, server_round, taken)
    return reply


_ENCRYPTED: set[tuple[bytes, int, bytes, str, int]] = set()
"""(key id, client id, session, stream, round) this process encrypted for."""
ENCRYPTIONS_RECORD = "dphe-encryptions"
"""ConfigRecord of the node's state: the (session, stream, round) encrypted for."""


def _check_session_proof(
    bundle: ClientBundle,
    session: bytes,
    run_id: int | None,
    train_config: ConfigRecord | None,
) -> None:
    """Refuse a session the keyholder did not bind to this client's run."""
    raw = (train_config or {}).get(K.DPHE_SESSION_PROOF)
    try:
        proof = bytes.fromhex(raw) if isinstance(raw, str) else b""
    except ValueError:
        proof = b""
    if run_id is None or not check_session_proof(
        bundle.phi_seed, session, int(run_id), proof
    ):
        raise ValueError(
            f"DPHE: the train config's {K.DPHE_SESSION_PROOF!r} does not bind the "
            f"keyholder session to this client's run ({run_id}): refusing to "
            "encrypt (a session serves one run; only the keyholder can make the "
            "proof)"
        )


def _claim_encryptions(
    bundle: ClientBundle,
    session: bytes,
    server_round: int,
    streams: list[str],
    node_state: RecordDict | None,
) -> None:
    """Record this encryption; refuse a second one for the same session/stream/round.

    Kept in this process and in the node's state for the run (the SuperNode keeps
    ``Context.state`` across messages); another run cannot reuse the session (its
    proof names one run id).
    """
    keys = [
        (bundle.key_id, bundle.client_id, session, s, server_round) for s in streams
    ]
    labels = [f"{session.hex()}/{s}/{server_round}" for s in streams]
    record = None
    if node_state is not None:
        record = node_state.get(ENCRYPTIONS_RECORD)
        if not isinstance(record, ConfigRecord):
            record = ConfigRecord()
            node_state[ENCRYPTIONS_RECORD] = record
    for key, label in zip(keys, labels, strict=True):
        if key in _ENCRYPTED or (record is not None and label in record):
            raise ValueError(
                f"DPHE: a second encryption for session {session.hex()[:8]}..., "
                f"stream {key[3]!r}, round {server_round} is refused (two "
                "encryptions of one round would give the server their quotient)"
            )
    for key, label in zip(keys, labels, strict=True):
        _ENCRYPTED.add(key)
        if record is not None:
            record[label] = True


def _session_and_round(train_config: ConfigRecord | None) -> tuple[bytes, int]:
    """Return the keyholder session id and the round sent with this task."""
    config = train_config if train_config is not None else {}
    raw = config.get(K.DPHE_SESSION)
    try:
        session = bytes.fromhex(raw) if isinstance(raw, str) else b""
    except ValueError:
        session = b""
    server_round = config.get(K.SERVER_ROUND)
    if len(session) != 16 or isinstance(server_round, bool):
        raise ValueError(
            f"DPHE needs the keyholder's session id ({K.DPHE_SESSION!r}, 32 hex "
            f"digits) and {K.SERVER_ROUND!r} in the train config; got "
            f"{K.DPHE_SESSION}={raw!r}, {K.SERVER_ROUND}={server_round!r}"
        )
    return session, int(server_round)  # type: ignore[arg-type]


def _encrypted(
    vector: np.ndarray,
    weight: int,
    bundle: ClientBundle,
    settings: RunSettings,
    rng: np.random.Generator,
    *,
    context: AggregationContext,
    uniform: bool,
    model: bytes,
    obfuscators: ObfuscatorPool | ObfuscatorSource,
) -> ArrayRecord:
    params = dphe_params(
        settings.dphe_run,
        dimension=vector.size,
        key_bits=bundle.key_bits,
        uniform=uniform,
    )
    encrypted = encrypt_update(
        vector,
        weight=weight,
        bundle=bundle,
        params=params,
        context=context,
        rng=rng,
        obfuscators=obfuscators,
        model_digest=model,
    )
    return dphe_record(encrypted, key_bits=bundle.key_bits)


@functools.lru_cache(maxsize=8)
def _obfuscators(n: int, name: str) -> ObfuscatorSource:
    """Return the obfuscator source for the key ``n`` (a DJN table: once per node)."""
    return make_obfuscators(name, n)


def _pooled(
    bundle: ClientBundle,
    settings: RunSettings,
    store: ObfuscatorStore | None,
    count: int,
) -> tuple[ObfuscatorPool, int]:
    """Return a pool holding up to ``count`` of the node's precomputed obfuscators.

    Returns the pool (it draws online once empty) and how many it took.
    """
    pool = ObfuscatorPool(_obfuscators(bundle.n, settings.dphe.obfuscators))
    if store is None:
        return pool, 0
    values = store.take(count)
    pool.extend(values)
    return pool, len(values)


def _return_unused(
    pool: ObfuscatorPool, store: ObfuscatorStore | None, server_round: int, taken: int
) -> None:
    """Put back the values not used (never used: still secret) and log the draw."""
    unused = pool.leftover()
    if store is None:
        return
    store.add(unused)
    used = taken - len(unused)
    if pool.drawn_online:
        logger.info(
            "DPHE round %d: obfuscator pool short: %d precomputed, %d drawn online",
            server_round,
            used,
            pool.drawn_online,
        )
    else:
        logger.info(
            "DPHE round %d: %d obfuscators precomputed, none drawn online",
            server_round,
            used,
        )


def pool_folder(node_config: dict, partition_id: int) -> Path:
    """Return the node's folder for precomputed obfuscators.

    The node config's ``state-dir``, else ``FEDHASH_NODE_STATE_DIR``, else a
    per-user 0700 folder in the system's temporary directory (simulation).
    """
    base = str(node_config.get(K.NODE_STATE_DIR, "") or "")
    base = base or os.environ.get(ENV_STATE_DIR, "")
    if not base:
        base = str(
            private_dir(Path(tempfile.gettempdir()) / f"fedhash-node-{os.getuid()}")
        )
    return Path(base) / "dphe-obfuscators" / f"partition-{int(partition_id)}"


def _numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {name: arr.numpy() for name, arr in record.items()}


def dphe_mod(
    settings_of: Callable[[Context], RunSettings],
    partition_of: Callable[[Context], tuple[int, int]],
    seed_of: Callable[..., int],
) -> Mod:
    """Build the Flower mod for ``train``: the update leaves DPHE-encrypted.

    Wraps the sparsification mod (the trainer's reply arrives as ``w_global +
    s``). ``settings_of``/``partition_of`` read the run's settings and the node's
    partition from the context; ``seed_of(seed, round, partition, purpose,
    *entropy)`` derives the shard-order seed (with the node's fresh entropy where
    the run claims privacy). Before training it starts the obfuscator pool's
    background filler if the pool is short of this round's ciphertexts; after the
    reply it refills it for the next rounds.
    """
    from clients.privacy_noise import node_entropy

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        settings = settings_of(context)
        if settings.secure_aggregation != "dphe":
            return call_next(msg, context)
        pid, _ = partition_of(context)
        config = msg.content[K.CONFIG]
        node_bundle = str(context.node_config.get(K.DPHE_KEY_BUNDLE, ""))
        store, target = _node_store(settings, context, msg, pid, node_bundle)
        if store is not None:
            _refill(store, target, settings)  # the node trains meanwhile
        reply = call_next(msg, context)
        if reply.has_error():
            return reply
        server_round = int(config.get(K.SERVER_ROUND, 0))
        encrypt_reply(
            reply.content,
            global_arrays=msg.content[K.ARRAYS],
            settings=settings,
            partition_id=pid,
            rng=np.random.default_rng(
                seed_of(settings.seed, server_round, pid, 2, *node_entropy(settings))
            ),
            node_bundle=node_bundle,
            num_classes=int(config.get(K.NUM_CLASSES, 0)),  # type: ignore[arg-type]
            train_config=config,
            run_id=int(context.run_id),
            node_state=context.state,
            pool=store,
        )
        if store is not None:
            _refill(store, target, settings)  # between messages, for the next rounds
        return reply

    return mod


def _node_store(
    settings: RunSettings,
    context: Context,
    msg: Message,
    partition_id: int,
    node_bundle: str,
) -> tuple[ObfuscatorStore | None, int]:
    """Return the node's obfuscator store for its key and the level to keep."""
    rounds = settings.dphe.obfuscator_pool_rounds
    if rounds <= 0:
        return None, 0
    bundle = cached_client_bundle(
        str(client_bundle_path(settings, partition_id, node_bundle)), partition_id
    )
    dimension = sum(int(np.prod(a.shape)) for a in msg.content[K.ARRAYS].values())
    per_round = round_ciphertexts(
        settings,
        dimension=dimension,
        key_bits=bundle.key_bits,
        num_classes=int(msg.content[K.CONFIG].get(K.NUM_CLASSES, 0)),  # type: ignore[arg-type]
    )
    try:
        folder = pool_folder(dict(context.node_config), partition_id)
        return ObfuscatorStore(folder, int(bundle.n)), rounds * per_round
    except OSError as exc:  # includes PermissionError: a folder others can reach
        logger.warning("DPHE obfuscator pool off (every value drawn online): %s", exc)
        return None, 0


def _refill(store: ObfuscatorStore, target: int, settings: RunSettings) -> None:
    pid = spawn_fill(store.folder.parent, store.n, target, settings.dphe.obfuscators)
    if pid is not None:
        logger.debug("DPHE obfuscator pool: filler %d towards %d values", pid, target)
