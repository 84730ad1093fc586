"""Argument checks of ``python -m experiments.suite``: refused before any run."""

import subprocess

import pytest

from experiments import suite


def _plan(*argv: str) -> suite.Plan:
    return suite.build_plan(suite.parser().parse_args(list(argv)))


def _refused(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        suite.main(list(argv))
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.fixture
def no_runs(monkeypatch):
    """Fail the test if the suite starts any driver."""

    def refuse(*args, **kwargs):
        raise AssertionError("a driver was started")

    monkeypatch.setattr(subprocess, "Popen", refuse)


def test_unknown_paper_names_the_accepted_ones(capsys, no_runs) -> None:
    err = _refused(capsys, "--paper", "fedprox")
    assert "unknown paper 'fedprox'" in err
    assert "fedhap, pfmh, phashing, dphe, dpcode, all" in err


def test_unknown_dataset_names_the_accepted_ones(capsys, no_runs) -> None:
    err = _refused(capsys, "--paper", "fedhap", "--dataset", "imagenet")
    assert "unknown dataset 'imagenet' for paper fedhap" in err
    assert "digits (default), mirflickr, mirflickr-paper" in err
    err = _refused(capsys, "--paper", "all", "--dataset", "pfmh=cifar10")
    assert "accepted: multiview-digits (default), wiki" in err


def test_several_papers_need_paper_equals_name(capsys, no_runs) -> None:
    err = _refused(capsys, "--paper", "all", "--dataset", "digits")
    assert "--dataset PAPER=NAME" in err
    err = _refused(capsys, "--paper", "pfmh", "--dataset", "fedhap=mirflickr")
    assert "paper 'fedhap' is not run here" in err


def test_bad_seeds_are_refused(capsys, no_runs) -> None:
    err = _refused(capsys, "--paper", "dpcode", "--seeds", "0,one")
    assert "--seeds: expected comma-separated integers" in err


def test_missing_data_file_is_refused_before_any_run(capsys, tmp_path, no_runs):
    out = tmp_path / "out"
    err = _refused(
        capsys,
        "--paper",
        "all",
        "--dataset",
        "pfmh=wiki",
        "--data-dir",
        str(tmp_path),
        "--out",
        str(out),
    )
    assert f"data file not found: {tmp_path / 'wiki.npz'}" in err
    # and which recipe makes it
    assert f"python -m hashdata.prepare wiki --source DIR --out {tmp_path}" in err
    # dpcode's default dataset needs MIRFlickr too: every missing file is named
    assert str(tmp_path / "mirflickr25k_tags.npz") in err
    assert not out.exists()


def test_plan_passes_the_dataset_seeds_and_resume(tmp_path) -> None:
    (tmp_path / "cifar10_jpeg.npz").write_bytes(b"")
    plan = _plan(
        "--paper",
        "phashing",
        "--dataset",
        "cifar10",
        "--data-dir",
        str(tmp_path),
        "--out",
        str(tmp_path / "res"),
        "--seeds",
        "3,4",
        "--resume",
    )
    (run,) = plan.runs
    argv = list(run.argv)
    assert run.out == tmp_path / "res" / "phashing-cifar10"
    assert argv[:4] == ["--seeds", "3,4", "--out", str(run.out)]
    assert "dataset=npz" in argv and "image-shape=32,32,3" in argv
    assert f'data-path="{tmp_path / "cifar10_jpeg.npz"}"' in argv
    assert "--resume" in argv  # the driver resumes from its rows.jsonl
    assert not plan.notes


def test_quick_plan_takes_one_seed_and_default_folders(tmp_path) -> None:
    plan = _plan(
        "--paper",
        "all",
        "--quick",
        "--resume",
        "--dataset",
        "dpcode=digits",
        "--out",
        str(tmp_path),
    )
    assert [r.paper.name for r in plan.runs] == list(suite.PAPERS)
    assert {r.seeds for r in plan.runs} == {(0,)}
    folders = [r.out.name for r in plan.runs]
    assert folders == ["fedhap", "pfmh", "phashing", "dphe", "dpcode-digits"]
    resumed = {r.paper.name for r in plan.runs if "--resume" in r.argv}
    assert resumed == {"fedhap", "pfmh", "phashing", "dpcode"}
    assert all(r.key() == [a for a in r.argv if a != "--resume"] for r in plan.runs)


def test_arguments_after_double_dash_go_to_the_one_driver(
    capsys, tmp_path, no_runs
) -> None:
    # refused before the data files are looked for (an empty --data-dir)
    err = _refused(
        capsys, "--paper", "all", "--data-dir", str(tmp_path), "--", "--bits", "32"
    )
    assert "need exactly one --paper" in err and "--bits 32" in err
    assert suite.main(["--paper", "pfmh", "--dry-run", "--", "--bits", "32"]) == 0
    shown = capsys.readouterr().out
    assert shown.strip().endswith("--bits 32")


def test_mirflickr_paper_is_the_paper_split_table_and_its_quick_run_is_small(
    tmp_path,
) -> None:
    (tmp_path / "mirflickr25k_tags.npz").write_bytes(b"")
    base = ["--paper", "fedhap", "--dataset", "mirflickr-paper"]
    base += ["--data-dir", str(tmp_path), "--out", str(tmp_path / "res")]
    (run,) = _plan(*base, "--resume").runs
    argv = list(run.argv)
    # the folder and the arguments of docs/results/fedhap-mirflickr-paper
    assert run.out == tmp_path / "res" / "fedhap-mirflickr-paper"
    assert run.module == "experiments.tables.real_data_table"
    assert argv[argv.index("--train-size") + 1] == "10000"
    assert argv[argv.index("--lr-grid") + 1] == "0.002,0.005,0.01,0.02,0.05"
    assert argv[argv.index("--ceiling-lr-grid") + 1] == "0.0002,0.0005,0.002,0.005,0.01"
    # the smoke run overrides both grids with one rate (the last value counts)
    (quick,) = _plan(*base, "--quick").runs
    q = list(quick.argv)
    last = {
        flag: q[len(q) - 1 - q[::-1].index(flag) + 1]
        for flag in ("--lr-grid", "--ceiling-lr-grid")
    }
    assert last == {"--lr-grid": "0.0005", "--ceiling-lr-grid": "0.0005"}


def test_cifar10_features_runs_the_feature_file_from_the_data_dir(tmp_path) -> None:
    from experiments.suite import CIFAR10_FEATURES

    (tmp_path / CIFAR10_FEATURES).write_bytes(b"")
    for paper, module_arg in (("phashing", "dataset=npz"), ("fedhap", "--data-path")):
        plan = _plan(
            "--paper", paper, "--dataset", "cifar10-features",
            "--data-dir", str(tmp_path), "--out", str(tmp_path / "res"),
        )  # fmt: skip
        (run,) = plan.runs
        assert run.out == tmp_path / "res" / f"{paper}-cifar10-features"
        assert module_arg in run.argv
        assert any(CIFAR10_FEATURES in a for a in run.argv)
        assert "image-shape=32,32,3" not in run.argv  # features, not images
        # tuned on a validation split of the database, not run untuned
        assert "--lr-grid" in run.argv and "--untuned" not in run.argv


def test_quick_cifar10_features_runs_on_a_subset_written_before_the_driver(
    tmp_path,
) -> None:
    import numpy as np

    from experiments.suite import CIFAR10_FEATURES, QUICK_FEATURES_SUBSET
    from hashdata.subset import is_subset_of, write_subset

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 150)
    split = np.tile(np.r_[np.zeros(120, np.int8), np.ones(30, np.int8)], 10)
    np.savez(
        tmp_path / CIFAR10_FEATURES,
        x_image=rng.standard_normal((1500, 4)).astype(np.float32),
        labels=labels,
        split=split,
        backbone=np.array("efficientnet-lite0"),
    )
    for paper in ("phashing", "fedhap"):
        plan = _plan(
            "--paper", paper, "--dataset", "cifar10-features", "--quick",
            "--data-dir", str(tmp_path), "--out", str(tmp_path / "res"),
        )  # fmt: skip
        (run,) = plan.runs
        source, sub, q, d = run.subset
        assert (q, d) == QUICK_FEATURES_SUBSET and source == tmp_path / CIFAR10_FEATURES
        assert sub.parent == tmp_path / "res" / "quick-data"
        # the driver reads the subset, never the whole file
        assert any(str(sub) in a for a in run.argv)
        assert not any(str(source) in a for a in run.argv)
    assert not is_subset_of(sub, source, queries=q, database=d)  # not written yet
    write_subset(source, sub, queries=q, database=d, seed=0)
    assert is_subset_of(sub, source, queries=q, database=d)
    assert not is_subset_of(sub, source, queries=q, database=d + 10)
    assert not is_subset_of(sub, source, queries=q, database=d, seed=1)  # another draw
    with np.load(sub) as got:
        assert got["x_image"].shape == (q + d, 4)
        assert (got["split"] == 1).sum() == q and (got["split"] == 0).sum() == d
        # class-balanced: every class has d/10 database rows and q/10 queries
        assert set(np.bincount(got["labels"][got["split"] == 0])) == {d // 10}
        assert str(got["subset_of"]) == CIFAR10_FEATURES
        assert str(got["backbone"]) == "efficientnet-lite0"  # other arrays kept
    # a source that changed makes the subset stale
    np.savez(tmp_path / CIFAR10_FEATURES, x_image=np.zeros((3, 4)), labels=np.arange(3))
    assert not is_subset_of(sub, source, queries=q, database=d)
    # and a full (non-quick) plan still names the whole file
    (full,) = _plan(
        "--paper", "fedhap", "--dataset", "cifar10-features",
        "--data-dir", str(tmp_path), "--out", str(tmp_path / "res"),
    ).runs  # fmt: skip
    assert full.subset is None and any(CIFAR10_FEATURES in a for a in full.argv)
