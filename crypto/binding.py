"""What a DPHE client binds its encryption to: the model it received, the run.

Two bindings against a malicious server (issue: "the node owns its privacy"):

* :func:`model_digest` -- SHA-256 over every array the client received (name,
  dtype, shape, bytes, in name order). The client binds it into its block tags and
  touch-set MAC (:class:`crypto.dphe.Attestation`), which also bind the session and
  the round; the keyholder decrypts a sum only when every contributor attests one
  digest, so a server that sends the victim the real model and the others a zero
  model (their updates are then 0 and the sum is the victim's update) is refused.
  The digest does not depend on the run, so the keyholder recognises the same model
  in another run (:class:`crypto.keyholder.Keyholder`, ``state_path``).
* :func:`session_proof` -- a keyholder session serves one Flower run: the keyholder
  binds its session id to the run id once (:meth:`crypto.keyholder.Keyholder.bind_run`)
  and returns ``HMAC(K, session || run id)`` with ``K`` derived from the phi seed,
  which the users and the keyholder hold and the aggregator does not. The server
  forwards the proof; the client checks it against its own run id
  (:func:`check_session_proof`) before it encrypts, so a session cannot be replayed
  into another run, and the keyholder refuses to bind a run id twice.

No Flower imports.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

import numpy as np

MODEL_LABEL = b"fedhash-dphe-model-digest-v1"
SESSION_LABEL = b"fedhash-dphe-session-run-v1"
PROOF_BYTES = 32


def model_digest(arrays: Mapping[str, np.ndarray]) -> bytes:
    """SHA-256 of the received arrays (canonical: name, dtype, shape, bytes).

    Parameters
    ----------
    arrays : mapping of str to np.ndarray
        The arrays of the train message, as received.

    Returns
    -------
    bytes
        32 bytes; equal for two clients exactly when they got the same arrays
        (names, dtypes, shapes, values). The session (hence the run) and the
        round are bound by the tags and MACs themselves.
    """
    h = hashlib.sha256(MODEL_LABEL)
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        header = f"{name}\0{value.dtype.str}\0{value.shape}\0".encode()
        h.update(len(header).to_bytes(4, "big") + header)
        h.update(value.nbytes.to_bytes(8, "big"))
        h.update(value.data)
    return h.digest()


def _proof_key(phi_seed: bytes) -> bytes:
    return hashlib.sha256(SESSION_LABEL + phi_seed).digest()


def session_proof(phi_seed: bytes, session: bytes, run_id: int) -> bytes:
    """``HMAC-SHA256(K, session || run id)``, ``K`` from the users' phi seed.

    ``run_id`` is Flower's run id, an unsigned 64-bit integer.
    """
    run_id = int(run_id)
    if not 0 <= run_id < 2**64:
        raise ValueError(f"run id {run_id}: accepted is an unsigned 64-bit integer")
    message = SESSION_LABEL + bytes(session) + run_id.to_bytes(8, "big")
    return hmac.new(_proof_key(phi_seed), message, hashlib.sha256).digest()


def check_session_proof(
    phi_seed: bytes, session: bytes, run_id: int, proof: bytes
) -> bool:
    """Whether ``proof`` binds ``session`` to ``run_id`` (constant time)."""
    if not isinstance(proof, bytes) or len(proof) != PROOF_BYTES:
        return False
    return hmac.compare_digest(session_proof(phi_seed, session, run_id), proof)
