"""The centralized ceiling trains the run's own loss (it used to train DPSH always)."""

from experiments.centralized import train_centralized
from settings.run_settings import RunSettings


def test_centralized_ceiling_trains_the_configured_loss(monkeypatch) -> None:
    import experiments.centralized as centralized

    seen = []
    real = centralized.build_hash_loss

    def spy(settings, num_classes, **kw):
        seen.append((settings.loss, num_classes))
        return real(settings, num_classes, **kw)

    monkeypatch.setattr(centralized, "build_hash_loss", spy)
    losses = {}
    for loss in ("dpsh", "csq", "hashnet", "dch", "greedyhash"):
        cfg = {"loss": loss, "rounds": 1, "local-epochs": 1, "code-length": 16}
        out = train_centralized(RunSettings.from_config(cfg))
        losses[loss] = out["train_loss"]
        assert out["config"]["loss"] == loss
        assert 0.0 <= out["final"]["map_all"] <= 1.0
    assert seen == [(name, 10) for name in losses]
    assert len({round(v, 6) for v in losses.values()}) == 5
