"""The audit reads a finished FedHAP run back: its network, its D, its database."""

import json

import pytest
import torch

from experiments.discriminator_audit import SCORES, run_scores
from experiments.lib.overrides import app_defaults
from settings.run_model import build_run_model
from settings.run_settings import RunSettings
from strategies.fedhap.model import fedhap_initial_state


@pytest.mark.parametrize("kind", ["concat", "projection"])
def test_run_scores_rebuild_the_runs_discriminator(tmp_path, kind):
    cfg = {
        **app_defaults(),
        "strategy": "fedhap",
        "dataset": "digits",
        "code-length": 16,
        "fedhap.discriminator": kind,
    }
    settings = RunSettings.from_config(cfg)
    model = build_run_model(settings, (1, 8, 8))
    run = tmp_path / "run"
    run.mkdir()
    torch.save(fedhap_initial_state(settings, model, 10), run / "model.pt")
    (run / "config.json").write_text(json.dumps({"config": cfg}))
    row = run_scores(run)
    assert row is not None and row["discriminator"] == kind
    assert all(0 < row[s] < 1 for s in SCORES)
    cfg["fedhap.variant"] = "fedhap-3"  # no discriminator: nothing to audit
    (run / "config.json").write_text(json.dumps({"config": cfg}))
    assert run_scores(run) is None


def test_scores_of_runs_no_longer_on_disk_are_kept_and_reaudited_ones_replaced():
    from experiments.discriminator_audit import merge_scores

    def row(run, seed, real, kind="concat"):
        return {"run": run, "seed": seed, "discriminator": kind,
                "discriminator_input": "relaxed", "real": real}  # fmt: skip

    old = [row("a", 0, 0.1), row("b", 1, 0.2), row("p", 0, 0.3, "projection")]
    new = [row("c", 3, 0.4), row("b", 1, 0.9)]
    got = merge_scores(old, new)
    assert [(r["run"], r["real"]) for r in got] == [
        ("a", 0.1),  # kept: its run folder is gone
        ("b", 0.9),  # audited again: the new row
        ("c", 0.4),
        ("p", 0.3),
    ]
