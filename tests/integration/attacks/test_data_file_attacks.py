"""A data file that is not the official one must never be unpickled.

The attacker can write into the folder a run config's ``data-path`` names (an
unsigned run config names it). The old CIFAR-10 loader unpickled every complete set
of files and only warned when their md5 was not the official archive's: a crafted
``data_batch_1`` ran its code in the node's or the server's process.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from torchvision.datasets import CIFAR10

from hashdata import load_dataset
from tests.fixtures import cifar10_fixture_md5, write_cifar10_fixture


class _Payload:
    """Unpickling this writes ``marker`` (what any code an attacker chose could do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: D105
        return (Path.write_text, (self.marker, "code ran"))


@pytest.mark.parametrize("victim", ["data_batch_1", "test_batch", "batches.meta"])
def test_malicious_cifar10_pickle_is_refused_before_unpickling(
    tmp_path, monkeypatch, victim
):
    root = write_cifar10_fixture(tmp_path / "data", images_per_file=2)
    # the other files stand in for the official archive, so the loader gets as far
    # as ``victim``
    sums = cifar10_fixture_md5(root)
    monkeypatch.setattr(
        "hashdata.loaders.official_cifar10_md5", lambda: sums, raising=False
    )
    marker = tmp_path / "pwned"
    path = root / "cifar-10-batches-py" / victim
    path.write_bytes(pickle.dumps(_Payload(marker), protocol=2))
    # one line naming the file and the md5 accepted; nothing was unpickled
    with pytest.raises(ValueError, match=rf"{victim}.*not the official {sums[victim]}"):
        load_dataset("cifar10", data_path=str(root))
    assert not marker.exists(), "the data file's code ran"


def test_unofficial_cifar10_files_name_the_official_md5(tmp_path):
    root = write_cifar10_fixture(tmp_path / "data", images_per_file=2)
    official = dict(CIFAR10.train_list)["data_batch_1"]  # torchvision's sum
    with pytest.raises(ValueError, match=rf"data_batch_1.*not the official {official}"):
        load_dataset("cifar10", data_path=str(root))
