"""Issue 35, finding 3: cross-run differencing.

A client's training randomness (batch order, dropout, DPHE shard order) was seeded
from (run seed, round, partition id), all of which the server knows. A malicious
server runs the same seed twice, aggregating clients {0, 1, 2, 3} in run 1 and
{1, 2, 3} in run 2: with bit-identical updates from clients 1-3 the difference of
the two sums is client 0's update, and each run opens a new keyholder session, so
nothing refuses the pair. Each test trains one client twice with the same seed,
round and global model through the real ClientApp, as two runs would, and asserts
that the updates differ where the run claims privacy; a control shows that a run
claiming none stays bit-for-bit reproducible.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, MessageType, RecordDict

import clients.dphe_updates as transport
from clients.client_app import build_client_app
from crypto import generate_keys
from crypto.binding import session_proof
from crypto.keys import load_client_bundle
from settings import keys as K
from settings.run_settings import RunSettings
from tests.integration.attacks.clientapp_calls import _context, global_model, train
from tests.messages import request_to

PID, ROUND = 1, 2
BASE = {
    "model": "mlp",
    "code-length": 16,
    "hidden-dim": 16,
    "local-epochs": 1,
    "seed": 42,
}


def _differs(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return any(not np.array_equal(a[k], b[k]) for k in a)


def test_cross_run_flipped_codes_run_trains_irreproducibly():
    # PHashing: the codes are flipped, the model updates travel in clear
    config = {**BASE, "privacy.code-flip-epsilon": 1.0}
    first, second = train(config, PID, ROUND), train(config, PID, ROUND)
    assert _differs(first, second)


def test_cross_run_control_no_privacy_claimed_is_reproducible():
    # the same seed gives the same update (and metrics) where no privacy is claimed
    assert not _differs(train(BASE, PID, ROUND), train(BASE, PID, ROUND))


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("cross-run") / "keys"
    generate_keys(out, num_clients=4, key_bits=512, allow_test_keys=True)
    return out


def test_cross_run_dphe_updates_differ(key_dir, monkeypatch):
    # Under DPHE the ciphertexts always differ (Paillier's randomness); what the
    # keyholder decrypts is the plaintext update, recorded here as it is encrypted.
    config = {
        **BASE,
        "secure-aggregation": "dphe",
        "dphe.key-dir": str(key_dir),
        "min-train-nodes": 3,
    }
    settings = RunSettings.from_config(config)
    plaintexts: list[np.ndarray] = []
    real = transport.encrypt_update

    def recording(vector: np.ndarray, **kwargs: Any) -> Any:
        plaintexts.append(np.array(vector, copy=True))
        return real(vector, **kwargs)

    monkeypatch.setattr(transport, "encrypt_update", recording)
    phi = load_client_bundle(key_dir / f"client-{PID}.json").phi_seed
    for session in ("11" * 16, "22" * 16):  # run 1, run 2: new keyholder sessions
        # the keyholder's proof that the session serves this client's run
        # (_context's run id 1); each run opens a new session
        proof = session_proof(phi, bytes.fromhex(session), 1).hex()
        content = RecordDict(
            {
                K.ARRAYS: global_model(settings, PID),
                K.CONFIG: ConfigRecord(
                    {
                        K.SERVER_ROUND: ROUND,
                        K.DPHE_SESSION: session,
                        K.DPHE_SESSION_PROOF: proof,
                    }
                ),
            }
        )
        reply = build_client_app()(
            request_to(7, content, MessageType.TRAIN), _context(PID, config)
        )
        assert K.DPHE in reply.content and K.ARRAYS not in reply.content
    assert len(plaintexts) == 2
    first, second = plaintexts
    # the updates (the loss coordinate aside) are not bit-identical
    assert not np.array_equal(first[:-1], second[:-1])
