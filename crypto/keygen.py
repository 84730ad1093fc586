"""Command line of the key generator G: ``python -m crypto.keygen``.

Usage: ``python -m crypto.keygen --out DIR --clients N [--key-bits 2048]
[--allow-test-keys] [--overwrite]``.

Writes ``keyholder.json``, ``aggregator.json`` and ``client-<id>.json`` (see
:mod:`crypto.keys`) and prints which bundle goes to which party.

No Flower imports.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from crypto.keys import generate_keys, key_id_of, load_aggregator_bundle


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the key generator."""
    parser = argparse.ArgumentParser(
        prog="python -m crypto.keygen",
        description="Generate DPHE keys: a Paillier key pair, permutation seeds "
        "and the keyholder auth token, one JSON bundle per party.",
    )
    parser.add_argument("--out", required=True, help="output directory (mode 0700)")
    parser.add_argument(
        "--clients", type=int, required=True, help="number of clients N (ids 0..N-1)"
    )
    parser.add_argument(
        "--key-bits", type=int, default=2048, help="Paillier modulus bits (2048, 3072)"
    )
    parser.add_argument(
        "--allow-test-keys",
        action="store_true",
        help="accept insecure small keys (tests and benchmarks only)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace existing bundles"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the key generator.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        Exit status: 0 on success, 2 on a refused argument or existing bundle.
    """
    args = build_parser().parse_args(argv)
    try:
        paths = generate_keys(
            args.out,
            num_clients=args.clients,
            key_bits=args.key_bits,
            allow_test_keys=args.allow_test_keys,
            overwrite=args.overwrite,
        )
    except (ValueError, FileExistsError) as error:
        print(f"keygen: {error}", file=sys.stderr)
        return 2
    n = load_aggregator_bundle(paths.aggregator).n
    print(f"DPHE keys: {args.key_bits}-bit Paillier, key id {key_id_of(n).hex()}")
    if args.allow_test_keys and args.key_bits not in (2048, 3072):
        print("WARNING: test-size key, insecure; bundles are marked test_key")
    print(f"  {paths.keyholder}: secret key, phi seed, auth token -> keyholder ONLY")
    print(f"  {paths.aggregator}: public key, all client seeds, auth token -> server")
    for client_id, path in enumerate(paths.clients):
        print(f"  {path}: public key, phi seed, own seed -> client {client_id} ONLY")
    return 0


if __name__ == "__main__":
    sys.exit(main())
