"""What a deployed node must hold locally, checked when the server describes it.

In deployment every SuperNode carries its own node config (``--node-config``):

* ``data-path`` -- this node's copy of the dataset (the ``.npz`` file or the
  CIFAR-10 root). It overrides the run config's ``data-path`` on this node only, so
  the ServerApp (which reads the run config's path for its query set) and each node
  may mount the data wherever they like.
* ``dphe-key-bundle`` -- this node's ``client-<partition-id>.json`` (DPHE).

:func:`check_node_inputs` runs on the ``describe`` query, before any training: a node
whose data or key bundle is missing or unreadable answers with an error that names
the node-config key, and the server's discovery leaves it out
(``server/discovery.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from settings import keys as K
from settings.run_settings import PATH_DATASETS, RunSettings
from strategies.dphe.config import DPHEConfig


def with_node_data_path(
    config: Mapping[str, Any], node_config: Mapping[str, Any]
) -> dict[str, Any]:
    """Return the run config as this node sees it: node ``data-path`` wins.

    Parameters
    ----------
    config : mapping
        The run config (``context.run_config`` plus any overrides).
    node_config : mapping
        ``context.node_config``.

    Returns
    -------
    dict
        A copy of ``config``; ``data-path`` replaced by the node's when the node
        config gives a non-empty one.
    """
    out = dict(config)
    node_path = node_config.get(K.NODE_DATA_PATH, "")
    if node_path != "":
        out[RunSettings.key('data_path')] = str(node_path)
    return out


def check_node_inputs(
    settings: RunSettings, *, node_config: Mapping[str, Any], partition_id: int
) -> None:
    """Raise if this node lacks the data or DPHE bundle the run needs.

    Parameters
    ----------
    settings : RunSettings
        This node's settings (after :func:`with_node_data_path`).
    node_config : mapping
        ``context.node_config``.
    partition_id : int
        This node's partition id.

    Raises
    ------
    FileNotFoundError
        A missing data path or key bundle, naming the config key it came from.
    ValueError
        A key bundle that cannot be read or belongs to another partition.
    """
    if settings.dataset in PATH_DATASETS and not (
        settings.dataset == "cifar10" and settings.download
    ):
        path = Path(settings.data_path)
        source = (
            f"node config {K.NODE_DATA_PATH}"
            if node_config.get(K.NODE_DATA_PATH, "") != ""
            else f"run config {RunSettings.key('data_path')}"
        )
        wanted = "file" if settings.dataset == "npz" else "folder"
        exists = path.is_file() if settings.dataset == "npz" else path.is_dir()
        if not exists:
            raise FileNotFoundError(
                f"{source}={str(path)!r}: no such {wanted} on this node (dataset "
                f"{settings.dataset!r}); mount the data and start the SuperNode "
                f"with --node-config \"{K.NODE_DATA_PATH}='<path>'\""
            )
    if settings.secure_aggregation != "dphe":
        return
    # the Paillier code only where the run uses it (a ClientApp process starts per
    # message in a deployment)
    from strategies.dphe.setup import cached_client_bundle, client_bundle_path

    node_bundle = str(node_config.get(K.DPHE_KEY_BUNDLE, ""))
    path = client_bundle_path(settings, partition_id, node_bundle)
    try:
        cached_client_bundle(str(path), partition_id)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        source = (
            f"node config {K.DPHE_KEY_BUNDLE}"
            if node_bundle
            else f"run config {DPHEConfig.key('key_dir')}"
        )
        raise ValueError(
            f"{source}: DPHE key bundle {str(path)!r} is unusable for partition "
            f"{partition_id}: {exc}"
        ) from None
