"""A SuperNode that checks FAB manifests: ``python -m deploy.supernode_guard``.

Usage: ``python -m deploy.supernode_guard --fab-state-dir DIR [flower-supernode
arguments...]``: runs Flower's ``flower-supernode`` with the same arguments, in the
same process, after wrapping its FAB check.

Flower 1.42's SuperNode checks, on the first message of each run, that the FAB is
signed by one of its ``--trusted-entities`` (``_verify_fab`` in
``flwr.supernode.start_client_internal``); a FAB that fails gets a
``FAB_VERIFICATION_ERROR`` reply and is never run. That signature covers no version
and no expiry (``deploy/fab_manifest.py``). Flower has no hook for a further check,
so this wrapper replaces that one function by one that runs Flower's check first and
then :func:`deploy.fab_manifest.check_manifest` and the node's
:class:`~deploy.fab_manifest.VersionLedger` (``DIR/fab-versions.json``): an
unsigned manifest, an expired one, or a version older than one this node already
ran is refused the same way, with one log line naming the rule. The wrapper is the
node's own code (its image), so an older FAB cannot switch it off.

It patches a private Flower function: :func:`install` fails loudly when this Flower
no longer has it with the expected signature (``flwr`` is pinned to 1.42 in
``pyproject.toml``; the unit test checks the hook point).
"""

from __future__ import annotations

import argparse
import inspect
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from deploy.fab_manifest import ManifestRefused, VersionLedger, check_manifest

log = logging.getLogger("supernode_guard")
HOOK_MODULE = "flwr.supernode.start_client_internal"
HOOK = "_verify_fab"


def guarded(
    flower_check: Callable[[Any, dict[str, str]], bool],
    ledger: VersionLedger,
    *,
    clock: Callable[[], float] = time.time,
) -> Callable[[Any, dict[str, str]], bool]:
    """Flower's FAB check followed by the manifest and version checks."""

    def verify_fab(fab: Any, trusted_entities: dict[str, str]) -> bool:
        if not flower_check(fab, trusted_entities):
            return False
        try:
            manifest = check_manifest(
                fab.content, fab.verifications, trusted_entities, now=clock()
            )
            ledger.admit(manifest)
        except ManifestRefused as refusal:
            log.error("FAB refused by this node: %s", refusal)
            return False
        log.info(
            "FAB %s==%s accepted (manifest valid until %d)",
            manifest.fab_id,
            manifest.version,
            manifest.expires_at,
        )
        return True

    return verify_fab


def install(ledger: VersionLedger) -> None:
    """Wrap Flower's SuperNode FAB check in this process."""
    import importlib  # noqa: PLC0415

    module = importlib.import_module(HOOK_MODULE)
    original = getattr(module, HOOK, None)
    if original is None or list(inspect.signature(original).parameters) != [
        "fab",
        "trusted_entities",
    ]:
        raise RuntimeError(
            f"{HOOK_MODULE}.{HOOK}(fab, trusted_entities) not found in this Flower: "
            "the FAB manifest check cannot be installed"
        )
    setattr(module, HOOK, guarded(original, ledger))


def build_parser() -> argparse.ArgumentParser:
    """Our one flag; everything else goes to ``flower-supernode``."""
    parser = argparse.ArgumentParser(
        prog="python -m deploy.supernode_guard",
        description="flower-supernode that refuses expired FABs and FABs older than "
        "one this node already ran (signed manifests, deploy/fab_manifest.py)",
    )
    parser.add_argument(
        "--fab-state-dir",
        required=True,
        help="writable folder of this node: fab-versions.json (newest version run)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Install the check, then run Flower's SuperNode with the other arguments."""
    args, rest = build_parser().parse_known_args(argv)
    if "--trusted-entities" not in rest:
        print(
            "supernode_guard: --trusted-entities is required (the manifest check "
            "runs only where Flower checks signatures)",
            file=sys.stderr,
        )
        return 2
    state = Path(args.fab_state_dir)
    try:
        state.mkdir(parents=True, exist_ok=True)
        VersionLedger(state).load()
    except (OSError, ValueError) as error:
        print(f"supernode_guard: --fab-state-dir={state}: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    install(VersionLedger(state))
    from flwr.supernode.cli import flower_supernode  # noqa: PLC0415

    sys.argv = ["flower-supernode", *rest]
    flower_supernode()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
