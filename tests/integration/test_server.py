import numpy as np
import pytest
from flwr.app import ConfigRecord, MessageType, RecordDict

from server.evaluation import _codes_problem
from server.experiment import run_experiment
from server.results import RunResults
from settings.run_settings import ConfigError, RunSettings
from tests.fixtures import write_feature_npz
from tests.messages import reply_from


def test_results_dir_is_final_only_after_finish(tmp_path):
    res = RunResults(tmp_path, "run1")
    res.write_json("config.json", {"a": np.float32(1.5), "b": float("nan")})
    res.append_round({"round": 0, "x": np.int64(3)})
    assert res.dir.name == "run1.incomplete"
    assert not (tmp_path / "run1").exists()
    final = res.finish()
    assert final == tmp_path / "run1"
    assert (final / "config.json").read_text().count("null") == 1
    with pytest.raises(FileExistsError):
        RunResults(tmp_path, "run1")


def test_failed_run_keeps_incomplete_suffix_and_error(tmp_path):
    res = RunResults(tmp_path, "run2")
    res.append_round({"round": 0})
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        res.fail(exc)
    assert (
        "RuntimeError: boom" in (tmp_path / "run2.incomplete" / "error.txt").read_text()
    )
    assert (tmp_path / "run2.incomplete" / "rounds.jsonl").exists()
    assert not (tmp_path / "run2").exists()


Q_SINGLE = np.zeros(4, dtype=np.int64)


@pytest.mark.parametrize(
    ("packed", "labels", "bits", "fragment"),
    [
        (np.zeros((3, 2), np.uint8), np.zeros(3, np.int64), 12, "12-bit codes"),
        (np.zeros((3, 2), np.int32), np.zeros(3, np.int64), 16, "uint8"),
        (np.zeros((3, 3), np.uint8), np.zeros(3, np.int64), 16, "packed width"),
        (np.zeros((3, 2), np.uint8), np.zeros(2, np.int64), 16, "2 labels for 3"),
        (np.zeros((3, 2), np.uint8), np.zeros((3, 5), np.uint8), 16, "label space"),
        (np.zeros((3, 2), np.uint8), np.zeros(3, np.float32), 16, "label space"),
        (np.zeros((3, 2), np.uint8), np.array([0, 1, 10]), 16, "outside 0..9"),
        (np.zeros((3, 2), np.uint8), np.array([0, -1, 3]), 16, "outside 0..9"),
    ],
)
def test_bad_published_codes_are_described(packed, labels, bits, fragment):
    assert fragment in _codes_problem(packed, labels, bits, 16, Q_SINGLE, 10)


def test_good_published_codes_pass():
    packed = np.zeros((3, 2), np.uint8)
    assert _codes_problem(packed, np.ones(3, np.int64), 16, 16, Q_SINGLE, 10) is None


class DescribeGrid:
    """Answers discovery like SuperNodes with the given node configs would."""

    def __init__(self, partitions: dict[int, tuple[int, int]]):
        self.partitions = partitions
        self.sent = []

    def get_node_ids(self):
        return list(self.partitions)

    def send_and_receive(self, messages, timeout=None):
        replies = []
        for m in messages:
            self.sent.append(m.metadata.message_type)
            pid, num = self.partitions[m.metadata.dst_node_id]
            cfg = ConfigRecord(
                {
                    "partition-id": pid,
                    "num-partitions": num,
                    "num-database": 1,
                    "device": "cpu",
                }
            )
            replies.append(
                reply_from(
                    m.metadata.dst_node_id,
                    RecordDict({"config": cfg}),
                    message_type=MessageType.QUERY,
                )
            )
        return replies


def settings(tmp_path, **kw):
    return RunSettings(results_dir=str(tmp_path / "results"), **kw)


@pytest.mark.usefixtures("task_identity")
def test_missing_data_file_stops_before_any_message_or_results_dir(tmp_path):
    grid = DescribeGrid({1: (0, 1)})
    s = settings(tmp_path, dataset="npz", data_path=str(tmp_path / "nope.npz"))
    # a ConfigError: the ServerApp logs it as one line (server/log_filters.py)
    with pytest.raises(ConfigError, match="dataset='npz'.*data-path.*nope.npz"):
        run_experiment(grid, s)
    assert grid.sent == []
    assert not (tmp_path / "results").exists()


@pytest.mark.usefixtures("task_identity")
def test_more_clients_than_samples_stops_before_training(tmp_path):
    path = write_feature_npz(tmp_path / "tiny.npz", n=8, num_classes=2)
    grid = DescribeGrid({i + 10: (i, 8) for i in range(8)})
    s = settings(
        tmp_path,
        dataset="npz",
        data_path=str(path),
        min_train_nodes=1,
        query_fraction=0.5,
    )
    with pytest.raises(ValueError, match="more clients than samples"):
        run_experiment(grid, s)
    assert grid.sent == ["query.describe"] * 8  # discovery only, no training
    assert not (tmp_path / "results").exists()


@pytest.mark.usefixtures("task_identity")
def test_classes_per_client_above_label_space_is_refused(tmp_path):
    grid = DescribeGrid({1: (0, 2), 2: (1, 2)})
    s = settings(tmp_path, partitioning="pathological", classes_per_client=11)
    with pytest.raises(ValueError, match="classes-per-client"):
        run_experiment(grid, s)
    assert not (tmp_path / "results").exists()


@pytest.mark.usefixtures("task_identity")
def test_model_that_does_not_fit_the_data_is_refused(tmp_path):
    path = write_feature_npz(tmp_path / "f.npz", n=40, num_classes=2)
    grid = DescribeGrid({1: (0, 1)})
    s = settings(tmp_path, dataset="npz", data_path=str(path), model="cnn")
    with pytest.raises(ValueError, match="model='cnn' needs images"):
        run_experiment(grid, s)
    assert grid.sent == []
