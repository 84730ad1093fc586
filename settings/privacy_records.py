"""Privacy mechanism reports <-> Flower ConfigRecord (record ``privacy``)."""

from __future__ import annotations

from flwr.app import ConfigRecord

from privacy.ledger import MechanismUse
from settings import keys as K


def privacy_record(uses: list[MechanismUse]) -> ConfigRecord:
    """Pack the mechanisms a client applied to one reply."""
    return ConfigRecord(
        {
            K.PRIV_MECHANISMS: [u.mechanism for u in uses],
            K.PRIV_EPSILONS: [float(u.epsilon) for u in uses],
            K.PRIV_DELTAS: [float(u.delta) for u in uses],
            K.PRIV_UNITS: [u.unit for u in uses],
        }
    )


def missing_mechanisms(
    uses: list[MechanismUse], required: tuple[str, ...]
) -> str | None:
    """Why a reply's privacy report falls short of the run's, or ``None``."""
    missing = [name for name in required if name not in {u.mechanism for u in uses}]
    if missing:
        return (
            f"the reply does not report {', '.join(missing)}, which this run "
            "requires; its content is not used"
        )
    return None


def read_privacy(record: ConfigRecord) -> list[MechanismUse]:
    """Inverse of :func:`privacy_record` (ValueError if malformed)."""
    try:
        cols = [
            list(record[k])
            for k in (K.PRIV_MECHANISMS, K.PRIV_EPSILONS, K.PRIV_DELTAS, K.PRIV_UNITS)
        ]
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed '{K.PRIVACY}' record: {exc!r}") from None
    if len({len(c) for c in cols}) != 1:
        raise ValueError(f"'{K.PRIVACY}' record columns differ in length")
    return [
        MechanismUse(str(m), float(e), float(d), str(u))
        for m, e, d, u in zip(*cols, strict=True)
    ]
