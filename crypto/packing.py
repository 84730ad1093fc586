"""Pack several non-negative integers into one Paillier plaintext.

Slot ``s`` of a packed value occupies bits ``[s * slot_bits, (s + 1) * slot_bits)``.
Adding two packed values adds them slot by slot as long as no slot sum reaches
``2**slot_bits``; :mod:`crypto.fixed_point` sizes ``slot_bits`` so that a sum of up
to ``max_summands`` encoded values never does. One Paillier operation then serves
``P`` coordinates (the plaintext must stay below ``n``; see
:func:`crypto.fixed_point.max_packing`).

No Flower imports.
"""

from __future__ import annotations

from collections.abc import Sequence


def pack(slots: Sequence[int], slot_bits: int) -> int:
    """Pack integers into one non-negative integer, slot ``s`` at bit ``s * slot_bits``.

    Parameters
    ----------
    slots : sequence of int
        ``(P,)`` values, each in ``[0, 2**slot_bits)``.
    slot_bits : int
        Width of one slot in bits, ``>= 1``.

    Returns
    -------
    int
        ``sum(slots[s] << (s * slot_bits))``, below ``2**(P * slot_bits)``.

    Raises
    ------
    ValueError
        If ``slot_bits < 1`` or a value does not fit its slot.
    """
    _check_slot_bits(slot_bits)
    limit = 1 << slot_bits
    value = 0
    for index in range(len(slots) - 1, -1, -1):
        slot = int(slots[index])
        if not 0 <= slot < limit:
            raise ValueError(f"slot {index} holds {slot}, outside [0, 2**{slot_bits})")
        value = (value << slot_bits) | slot
    return value


def unpack(value: int, count: int, slot_bits: int) -> list[int]:
    """Split a packed integer back into ``count`` slots.

    Parameters
    ----------
    value : int
        Packed value, ``0 <= value < 2**(count * slot_bits)``.
    count : int
        Number of slots ``P``, ``>= 1``.
    slot_bits : int
        Width of one slot in bits, ``>= 1``.

    Returns
    -------
    list of int
        ``(P,)`` slot values, slot 0 first.

    Raises
    ------
    ValueError
        If ``value`` is negative or has bits set at or above ``count * slot_bits``
        (a carry out of the last slot, or corruption).
    """
    _check_slot_bits(slot_bits)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be an integer >= 1, got {count!r}")
    value = int(value)
    if value < 0:
        raise ValueError(f"packed value must be non-negative, got {value}")
    if value >> (count * slot_bits):
        raise ValueError(
            f"packed value has stray bits above bit {count * slot_bits} "
            f"({count} slots of {slot_bits} bits): overflow or corruption"
        )
    mask = (1 << slot_bits) - 1
    slots = []
    for _ in range(count):
        slots.append(value & mask)
        value >>= slot_bits
    return slots


def _check_slot_bits(slot_bits: int) -> None:
    if isinstance(slot_bits, bool) or not isinstance(slot_bits, int) or slot_bits < 1:
        raise ValueError(f"slot_bits must be an integer >= 1, got {slot_bits!r}")
