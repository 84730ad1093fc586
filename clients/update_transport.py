"""How a trained model leaves the client: dense, sparse, or DPHE-encrypted.

Every trainer returns its full local model in the ``arrays`` record. Before the
reply is sent, :func:`finish_train_reply` turns it into what the run asks for:

* ``updates.sparsifier`` (plaintext): the update ``w_local - w_global`` is
  sparsified (``soft-threshold``, then top-k with ``updates.sparsity``) and the reply
  carries ``w_global + sparse`` (so Flower's FedAvg aggregates it unchanged); with
  ``elastic-net`` the trainer already returns a model whose update is exactly 0
  off its support (:mod:`hashing.elastic_net`), and only a top-k follows if
  ``updates.sparsity > 0``;
* ``secure-aggregation = "dphe"``: the (sparsified) update, the train loss (one
  more coordinate, :func:`strategies.dphe.setup.with_loss`) and the client's weight
  are encrypted with the client's DPHE bundle (``crypto.encrypt_update``) into a
  ``dphe`` record that replaces ``arrays``, bound to the keyholder session
  (``dphe-session``), the ``model`` stream and the round of the train config. The
  MetricRecord is sent *empty*: ``num-examples`` travels as the encrypted weight,
  ``train-loss`` inside the encrypted vector, and no other per-client statistic
  leaves in clear (the server reports the aggregate loss).
  Before it encrypts, the client checks the keyholder's proof that the session
  serves its own run (``dphe-session-proof``,
  :func:`crypto.binding.check_session_proof`),
  binds the digest of the arrays it received (:func:`crypto.binding.model_digest`)
  into its tags and MAC (which bind the session and round too), and refuses a second
  encryption for the same (session, stream, round): two encryptions of one round
  would give the server their quotient.
* ``dphe.block-sparsity``: under DPHE the top-k keeps whole packed blocks of the
  phi-permuted space (:func:`hashing.update_sparsity.block_top_k_sparsify`; the
  loss and weight coordinates' blocks always), so a user encrypts only
  ``num_blocks - floor(updates.sparsity * num_blocks)`` blocks; ``dphe.obfuscators``
  picks the ``r**n`` source (:mod:`crypto.obfuscators`; a DJN table is built once
  per node process).
* ``dphe.prototypes`` (FedHAP): the ``prototypes`` upload is replaced by an encrypted
  ``dphe.prototypes`` record of :func:`hashing.fedhap.prototypes.prototype_sum_vector`
  (weight 1, stream ``prototypes``), so the server learns only the per-class totals.

What still travels in clear under DPHE: the reply's size (``ceil(touched / M)``
shards of ``M`` blocks with the default padding) and the ``privacy`` record of the
DP mechanisms applied (public parameters such as the noise multiplier, and the
epsilon spent -- which can depend on the client's number of examples through the
sampling rate; ``privacy/`` owns that record).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from flwr.app import (
    Array,
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
    coordinate_blocks,
    encrypt_update,
    make_obfuscators,
)
from crypto.binding import check_session_proof, model_digest
from crypto.obfuscators import ObfuscatorSource
from hashing.fedhap.prototypes import prototype_sum_vector
from hashing.update_sparsity import (
    block_top_k_sparsify,
    flatten_arrays,
    sparsify_update,
    unflatten_arrays,
)
from settings import keys as K
from settings.prototype_records import FEDHAP_UPLOAD, read_prototype_record
from settings.run_settings import RunSettings
from strategies.dphe.setup import (
    ClientBundle,
    cached_client_bundle,
    client_bundle_path,
    dphe_params,
    dphe_record,
    update_weight,
    with_loss,
)


def transforms_update(settings: RunSettings) -> bool:
    """Whether the reply's model must be sparsified or encrypted."""
    return (
        settings.secure_aggregation == "dphe"
        or settings.updates.sparsity > 0
        or settings.updates.soft_threshold > 0
    )


def finish_train_reply(
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
) -> RecordDict:
    """Sparsify and/or encrypt the reply's model update, in place; return ``reply``.

    Parameters
    ----------
    reply : RecordDict
        The trainer's reply, with the local model in ``arrays`` and
        ``num-examples`` in ``metrics``.
    global_arrays : ArrayRecord
        The model the server sent this round (the update's reference).
    settings : RunSettings
        The run's settings.
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
        The train message's config: ``server-round`` and, under DPHE, the
        keyholder's ``dphe-session`` and ``dphe-session-proof`` (required then).
    run_id : int, optional
        This client's Flower run id (``Context.run_id``; required under DPHE): the
        session proof must bind the session to it.
    node_state : RecordDict, optional
        The node's state for this run (``Context.state``), where the encryptions
        made are recorded besides this process's own record.

    Raises
    ------
    ValueError
        Under DPHE, if the train config lacks a well-formed session id or round,
        the session proof does not bind the session to ``run_id``, or this client
        already encrypted for that (session, stream, round).
    """
    if not transforms_update(settings):
        return reply
    local, layout = flatten_arrays(_numpy(reply[K.ARRAYS]))
    reference, ref_layout = flatten_arrays(_numpy(global_arrays))
    if layout != ref_layout:
        raise ValueError("the trained model's arrays differ from the global model's")
    blocky = settings.secure_aggregation == "dphe" and settings.dphe.block_sparsity
    update = sparsify_update(
        local - reference,
        sparsity=0.0 if blocky else settings.updates.sparsity,
        l1=settings.updates.soft_threshold,  # the elastic net's prox with l2 = 0
    )
    if settings.secure_aggregation != "dphe":
        reply[K.ARRAYS] = ArrayRecord(
            {
                name: Array(np.ascontiguousarray(value))
                for name, value in unflatten_arrays(reference + update, layout).items()
            }
        )
        return reply
    session, server_round = _session_and_round(train_config)
    metrics = reply[K.METRICS]
    weight = update_weight(settings, int(metrics[K.NUM_EXAMPLES]))
    loss = float(metrics.get(K.TRAIN_LOSS, 0.0))
    path = client_bundle_path(settings, partition_id, node_bundle)
    bundle = cached_client_bundle(str(path), partition_id)
    _check_session_proof(bundle, session, run_id, train_config)
    digest = model_digest(_numpy(global_arrays))
    streams = [STREAM_MODEL]
    if settings.dphe.prototypes and K.PROTOTYPES in reply:
        streams.append(STREAM_PROTOTYPES)
    _claim_encryptions(bundle, session, server_round, streams, node_state)
    del reply[K.ARRAYS]
    reply[K.DPHE] = _encrypted(
        with_loss(update, loss),
        weight,
        bundle,
        settings,
        rng,
        context=AggregationContext(session, STREAM_MODEL, server_round),
        uniform=False,
        block_sparsity=settings.updates.sparsity if blocky else 0.0,
        model=digest,
    )
    reply[K.METRICS] = MetricRecord()  # nothing about this client in clear
    if settings.dphe.prototypes and K.PROTOTYPES in reply:
        upload = read_prototype_record(reply.pop(K.PROTOTYPES), FEDHAP_UPLOAD)
        vector = prototype_sum_vector(
            upload,
            num_classes=num_classes,
            bits=settings.code_length,
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
        )
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
    block_sparsity: float = 0.0,
    model: bytes,
) -> ArrayRecord:
    params = dphe_params(
        settings, dimension=vector.size, key_bits=bundle.key_bits, uniform=uniform
    )
    if block_sparsity > 0:
        # whole phi-space blocks; the last value (the loss) and the weight
        # coordinate (index D) are never dropped
        blocks = coordinate_blocks(bundle, params, context)
        vector = block_top_k_sparsify(
            vector,
            sparsity=block_sparsity,
            blocks=blocks,
            num_blocks=params.num_blocks,
            always=blocks[-2:],
        )
    encrypted = encrypt_update(
        vector,
        weight=weight,
        bundle=bundle,
        params=params,
        context=context,
        rng=rng,
        obfuscators=_obfuscators(bundle.n, settings.dphe.obfuscators),
        model_digest=model,
    )
    return dphe_record(encrypted, key_bits=bundle.key_bits)


@functools.lru_cache(maxsize=8)
def _obfuscators(n: int, name: str) -> ObfuscatorSource:
    """Return the obfuscator source for the key ``n`` (a DJN table: once per node)."""
    return make_obfuscators(name, n)


def _numpy(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {name: arr.numpy() for name, arr in record.items()}


def update_transport_mod(
    settings_of: Callable[[Context], RunSettings],
    partition_of: Callable[[Context], tuple[int, int]],
    seed_of: Callable[..., int],
) -> Mod:
    """Build the Flower mod for ``train``: the reply leaves as the run asks.

    Wraps the train function: after it returns, the model update in the reply is
    sparsified and/or DPHE-encrypted by :func:`finish_train_reply` (nothing
    happens for a dense plaintext run). ``settings_of``/``partition_of`` read the
    run's settings and the node's partition from the context; ``seed_of(seed,
    round, partition, purpose, *entropy)`` derives the shard-order seed (with the
    node's fresh entropy where the run claims privacy).
    """
    from clients.data import load_local_data
    from clients.privacy_noise import node_entropy

    def mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
        reply = call_next(msg, context)
        if reply.has_error():
            return reply
        settings = settings_of(context)
        pid, num = partition_of(context)
        config = msg.content[K.CONFIG]
        server_round = int(config.get(K.SERVER_ROUND, 0))
        data = load_local_data(settings, partition_id=pid, num_partitions=num)
        finish_train_reply(
            reply.content,
            global_arrays=msg.content[K.ARRAYS],
            settings=settings,
            partition_id=pid,
            rng=np.random.default_rng(
                seed_of(settings.seed, server_round, pid, 2, *node_entropy(settings))
            ),
            node_bundle=str(context.node_config.get(K.DPHE_KEY_BUNDLE, "")),
            num_classes=data.num_classes,
            train_config=config,
            run_id=int(context.run_id),
            node_state=context.state,
        )
        return reply

    return mod
