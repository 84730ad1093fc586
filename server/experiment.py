"""One federated hashing experiment, from validated settings to a results directory.

Order of work: validate everything that can be validated (settings, strategy name,
data files, model/input fit, partitioning against the connected nodes) *before* the
results directory exists or any training starts; build the method's strategy last,
from what those steps learnt (:class:`strategies.protocol.RunContext`); then train,
evaluating retrieval every ``eval-every`` rounds; then write the summary and plots
and make the results directory final.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid

from hashdata import (
    load_split,
    modality_dims,
    require_multimodal,
    validate_partitioning,
)
from hashing.models import resolve_model_name
from hashing.pfmh.metric_names import LOCAL_MAP_ALL
from hashing.train import select_device
from privacy.ledger import PrivacyLedger
from privacy.noise import SEEDED_WARNING
from server.charging_grid import ChargingGrid
from server.checkpoint import (
    Checkpoint,
    open_ledger,
    read_checkpoint,
    resume_dir,
    write_checkpoint,
)
from server.discovery import describe_nodes
from server.evaluation import Evaluation, QuerySet, RetrievalEvaluator
from server.fault_grid import FaultGrid
from server.plots import (
    plot_loss_per_round,
    plot_map_per_round,
    plot_pr_curve,
    plot_precision_at_k,
    run_title,
)
from server.provenance import run_provenance
from server.results import RunResults
from server.run_id import default_run_id
from server.state_key import KEY_NAME, server_key
from settings import keys as K
from settings.run_settings import ConfigError, RunSettings
from settings.runtime import default_size_warning
from strategies.dphe.server_setup import build_secure_components
from strategies.protocol import HashingStrategy, RunContext
from strategies.server_side import (
    ServerSide,
    build_strategy,
    initial_arrays,
    server_side,
)

_DATASET = RunSettings.key("dataset")


@dataclass(frozen=True)
class PreparedData:
    """Server-side view of the data protocol."""

    queries: QuerySet
    num_database: int
    database_labels: np.ndarray
    input_shape: tuple[int, ...] | dict[str, int]  # PFMH: modality -> size
    num_classes: int
    multi_label: bool
    description: str
    scaling: tuple[str, ...] = ()  # feature-scaling applied, one line per modality
    query_text: str = ""  # how the query set was chosen (seeded fraction or the file's)
    train_text: str = ""  # which database rows are trained on (train-size)


def prepare_data(settings: RunSettings) -> PreparedData:
    """Load the dataset and split the server's query set off (seeded, stratified).

    For PFMH every modality is kept (query inputs as a dict); a dataset with fewer
    than two modalities, or modalities of different lengths, is a ConfigError
    naming ``dataset`` before any work starts, and so is a data file that is
    missing or cannot be read. Inputs are scaled as ``feature-scaling`` says, with
    statistics of the database part (the clients apply the same map).
    """
    try:
        split = load_split(settings.dataset, **settings.split_options())
    except (ValueError, FileNotFoundError) as exc:
        # a missing or unreadable data file, arrays of different lengths: the
        # user fixes the config or the file (one ERROR line, server/log_filters.py)
        raise ConfigError(f"{_DATASET}={settings.dataset!r}: {exc}") from None
    data, x = split.dataset, split.inputs
    q_idx, db_idx = split.query_index, split.database_index
    inputs: torch.Tensor | dict[str, torch.Tensor] = torch.from_numpy(x[q_idx])
    input_shape: tuple[int, ...] | dict[str, int] = tuple(x.shape[1:])
    if settings.method.multimodal:
        try:
            require_multimodal(data)
        except ValueError as exc:
            raise ConfigError(f"{_DATASET}={settings.dataset!r}: {exc}") from None
        inputs = {m: torch.from_numpy(data.inputs[m][q_idx]) for m in data.modalities}
        input_shape = modality_dims(data)
    return PreparedData(
        queries=QuerySet(
            inputs=inputs,
            labels=data.labels[q_idx],
            num_classes=data.num_classes,
        ),
        num_database=len(db_idx),
        database_labels=data.labels[db_idx],
        input_shape=input_shape,
        num_classes=data.num_classes,
        multi_label=data.multi_label,
        description=data.description,
        scaling=split.scaling,
        query_text=split.query_text,
        train_text="" if split.train_mask is None else split.train_text,
    )


def protocol_text(
    settings: RunSettings,
    data: PreparedData,
    clients: int,
    side: ServerSide | None = None,
) -> str:
    """Describe the evaluation protocol in words (README and every results file)."""
    relevance = (
        "relevant = shares at least one label"
        if data.multi_label
        else "relevant = same class"
    )
    k = settings.partition_repeats
    partitioned = (
        f"partitioned {settings.partitioning} over {clients} clients, each training "
        "on and encoding only its own partition"
        if k == 1
        else f"split {k} times ({settings.partitioning}, differently seeded) over "
        f"{clients // k} clients each, so {clients} clients each training on its own "
        f"partition and every sample held by {k} clients (partition-repeats={k}); "
        f"only the first split's {clients // k} clients encode and publish their "
        "partitions, so the retrieval database holds every sample once"
    )
    text = (
        f"query set: {data.query_text}, {len(data.queries.labels)} samples held by the "
        f"server; database: the other {data.num_database} samples, {partitioned}"
        + (f" ({data.train_text})" if data.train_text else "")
        + "; ranking: Hamming distance between the "
        "server's query codes and all published database codes, ties broken by "
        f"database order (partition id, then dataset order); {relevance}; "
        f"mAP@ALL and mAP@{settings.map_top_k}"
    )
    if data.scaling:
        text += (
            f"; inputs scaled (feature-scaling={settings.feature_scaling}; "
            "statistics, where used, from the database part only; one map for the "
            "queries and every client): " + "; ".join(data.scaling)
        )
    describe = (side or server_side(settings.strategy)).describe_protocol
    return describe(settings, text) if describe is not None else text


class RoundReporter:
    """``evaluate_fn`` for ``Strategy.start``: progress line, metrics, rounds.jsonl."""

    def __init__(
        self,
        settings: RunSettings,
        evaluator: RetrievalEvaluator,
        strategy: HashingStrategy,
        results: RunResults,
        ledger: PrivacyLedger,
        key: bytes,
    ) -> None:
        self.settings = settings
        self.evaluator = evaluator
        self.strategy = strategy
        self.results = results
        self.start = time.perf_counter()
        self._since = self.start  # end of the previous call: what follows is training
        self.rows: list[dict[str, Any]] = []
        # charged by the ChargingGrid as replies arrive, appended to its journal
        self.ledger = ledger
        self.key = key
        self.last: Evaluation | None = None
        self.last_round = -1

    def due(self, server_round: int) -> bool:
        """Evaluate at round 0, every ``eval-every`` rounds, and at the last round."""
        s = self.settings
        return server_round % s.eval_every == 0 or server_round == s.rounds

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Evaluate if due; log one progress line; append to rounds.jsonl."""
        strategy = self.strategy
        train = strategy.train_history.get(server_round)
        loss = float(train[K.TRAIN_LOSS]) if train and K.TRAIN_LOSS in train else None
        row: dict[str, Any] = {
            "round": server_round,
            "train_loss": loss,
            "train_round_s": time.perf_counter() - self._since if server_round else 0.0,
        }
        row.update(strategy.comm_history.get(server_round, {}))
        clients = strategy.client_train_history.get(server_round)
        if clients:  # {partition id: that client's train metrics}
            row["clients"] = clients
        secure = strategy.secure_aggregation
        if secure is not None and server_round in secure.history:
            row["dphe"] = secure.history[server_round]
        protos = strategy.prototype_history.get(server_round)
        if protos is not None:
            row["prototype_classes"] = len(protos["classes"])
            if "filled_mean" in protos:  # PFMH: classes completed per client
                row["prototype_filled_mean"] = protos["filled_mean"]
        metrics = None
        if self.due(server_round):
            ev = self.evaluator.evaluate(server_round, arrays)
            self.last, self.last_round = ev, server_round
            rep = ev.report
            values = {k: v for k, v in ev.per_client.items() if v is not None}
            if rep is not None:
                row.update(
                    map_all=rep.map_all,
                    map_at_k=rep.map_at_k,
                    precision_at_k=dict(zip(rep.ks, rep.precision_at_k, strict=True)),
                )
                values.update(
                    {"map-all": rep.map_all, f"map-at-{rep.top_k}": rep.map_at_k}
                )
            row.update(ev.per_client)
            row.update(eval_clients=ev.clients, eval_seconds=ev.seconds)
            metrics = MetricRecord(values)
        row["elapsed_s"] = time.perf_counter() - self.start
        self.rows.append(row)
        self.results.append_round(row)
        if len(self.ledger):  # rewritten atomically every round: a crash keeps it
            self.ledger.write(self.results.path("privacy_ledger.json"))
        if 1 <= server_round < self.settings.rounds:  # server/checkpoint.py
            write_checkpoint(
                self.results.dir,
                server_round=server_round,
                settings=self.settings,
                arrays=arrays,
                strategy_state=self.strategy.state_dict(),
                rows=self.rows,
                journal=self.ledger.journal,
                key=self.key,
            )
        log(INFO, "%s", self.progress_line(row))
        self._since = time.perf_counter()
        return metrics

    def resume_from(self, checkpoint: Checkpoint) -> None:
        """Continue after ``checkpoint``: its rows, its elapsed time.

        The ledger is the checkpoint's (every charge of the journal, the crashed
        round's included); it was handed to the constructor.
        """
        self.rows = list(checkpoint.rows)
        elapsed = self.rows[-1]["elapsed_s"] if self.rows else 0.0
        self.start = time.perf_counter() - elapsed
        self._since = time.perf_counter()
        self.results.rewrite_rounds(self.rows)

    def progress_line(self, row: dict[str, Any]) -> str:
        """``round  3/15 | mAP@ALL 0.512 | ... | 12.3 s | ETA 49 s``.

        The ETA is the rounds left times the mean time of the rounds so far
        (training and evaluation, measured from the end of round 0).
        """
        k = self.settings.map_top_k
        eta = eta_text(row["round"], self.settings.rounds, self._round_times())

        def fmt(v: float | None, spec: str) -> str:
            return "-" if v is None else format(v, spec)

        local = (
            f"local mAP@ALL {fmt(row.get(LOCAL_MAP_ALL), '.4f')} | "
            if LOCAL_MAP_ALL in row
            else ""
        )
        return (
            f"round {row['round']:>3}/{self.settings.rounds} | "
            f"mAP@ALL {fmt(row.get('map_all'), '.4f')} | "
            f"mAP@{k} {fmt(row.get('map_at_k'), '.4f')} | {local}"
            f"loss {fmt(row['train_loss'], '.4f')} | {row['elapsed_s']:.1f} s{eta}"
        )

    def _round_times(self) -> list[float]:
        """Seconds of each completed training round (round >= 1)."""
        elapsed = {r["round"]: r["elapsed_s"] for r in self.rows}
        return [
            elapsed[r] - elapsed[r - 1]
            for r in sorted(elapsed)
            if r >= 1 and r - 1 in elapsed
        ]


def eta_text(current: int, total: int, round_times: list[float]) -> str:
    """`` | ETA 1 min 5 s`` from the mean round time, or ``""`` before round 1."""
    left = total - current
    if left <= 0 or not round_times:
        return ""
    seconds = left * sum(round_times) / len(round_times)
    minutes, rest = divmod(int(round(seconds)), 60)
    shown = f"{minutes} min {rest} s" if minutes else f"{rest} s"
    return f" | ETA {shown}"


def final_table(
    rows: list[dict[str, Any]], side: ServerSide, *, k: int, ks: tuple[int, ...]
) -> str:
    """Fixed-width table of the evaluated rounds (mAP@``k``, precision@``ks``)."""
    own = side.results_table
    if own is not None:
        return own(rows)
    head = f"{'round':>5} | {'mAP@ALL':>7} | {f'mAP@{k}':>7} | " + " | ".join(
        f"{f'P@{kk}':>6}" for kk in ks
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.get("map_all") is None:
            continue
        pk = r["precision_at_k"]
        lines.append(
            f"{r['round']:>5} | {r['map_all']:>7.4f} | {r['map_at_k']:>7.4f} | "
            + " | ".join(f"{pk[kk]:>6.4f}" for kk in ks)
        )
    return "\n".join(lines)


def run_experiment(
    grid: Grid,
    settings: RunSettings,
    *,
    simulation: bool = False,
    side: ServerSide | None = None,
) -> RunResults:
    """Validate, train, evaluate and write ``results/<run-id>/``; return the results.

    ``simulation`` (the ServerApp's grid is the simulation engine's) allows the
    in-process DPHE keyholder; otherwise the keyholder must be a service. ``side``:
    the method's server side, as the ServerApp looked it up (else looked up here).
    """
    side = side or server_side(settings.strategy)  # unknown -> ConfigError
    checkpoint = None
    if settings.resume:  # wrong dir, config, code version or HMAC -> ConfigError
        resumed = resume_dir(settings)
        key = server_key(resumed.parent, create=False)
        checkpoint = read_checkpoint(resumed, settings, key=key)
    else:  # an existing key that is unusable is refused before any work
        key = b""
        if (Path(settings.results_dir) / KEY_NAME).exists():
            key = server_key(settings.results_dir, create=False)
    data = prepare_data(settings)  # missing/bad files -> errors
    model_name = side.model_name or resolve_model_name(settings.model, data.input_shape)

    def model_factory() -> torch.nn.Module:
        return side.build_model(settings, data.input_shape, data.num_classes)

    torch.manual_seed(settings.seed)
    initial = model_factory()  # model/input mismatch -> error
    nodes = describe_nodes(
        grid, min_nodes=settings.min_train_nodes, timeout_s=settings.round_timeout
    )
    partitions = {n: i.partition_id for n, i in nodes.items()}
    num_partitions = next(iter(nodes.values())).num_partitions
    if simulation and (note := default_size_warning(len(nodes))):
        log(WARNING, "%s", note)  # flwr run . without a federation size
    validate_partitioning(
        data.database_labels,
        scheme=settings.partitioning,
        num_partitions=num_partitions,
        alpha=settings.dirichlet_alpha,
        classes_per_client=settings.classes_per_client,
        repeats=settings.partition_repeats,
    )
    initial_state = initial_arrays(side, settings, initial, data.num_classes)
    secure_model = secure_prototypes = None
    if settings.secure_aggregation == "dphe":
        secure_model, secure_prototypes = build_secure_components(
            settings.dphe_run,
            dimension=sum(int(v.numel()) for v in initial_state.values()),
            partition_ids=[i.partition_id for i in nodes.values()],
            num_classes=data.num_classes,
            simulation=simulation,
            run_id=int(grid.run.run_id),  # the keyholder session serves this run
        )
    # the strategy last, from what the steps above learnt
    run = RunContext(
        node_partitions=partitions,
        num_classes=data.num_classes,
        required_mechanisms=settings.required_train_mechanisms,
        secure_aggregation=secure_model,
        secure_prototypes=secure_prototypes,
        checkpoint=None if checkpoint is None else checkpoint.strategy,
    )
    try:
        strategy = build_strategy(settings, side, run)
    except ValueError as exc:
        if checkpoint is None:
            raise
        # the checkpoint's state does not fit the connected nodes
        raise ConfigError(f"{RunSettings.key('resume')}: {exc}") from None

    device = select_device(settings.device, deterministic=settings.cuda_deterministic)
    protocol = protocol_text(settings, data, len(nodes), side)
    if checkpoint is not None:
        results = RunResults.reopen(resumed)
        ledger = checkpoint.ledger
        log(
            INFO,
            "Resuming %s after round %d of %d; the privacy ledger keeps all %d "
            "charges, %d of them for releases after that checkpoint (before the "
            "crash); the redo is charged again",
            results.dir,
            checkpoint.round,
            settings.rounds,
            len(ledger),
            checkpoint.after,
        )
    else:
        results = RunResults(settings.results_dir, default_run_id(settings))
        _write_config(
            results, settings.to_dict(), model_name, protocol, data, nodes, device, grid
        )
        key = key or server_key(results.root)  # created by a folder's first run
        ledger = open_ledger(results.dir, key)
    results.set_logger(settings.logger)  # opt-in TensorBoard (server/tracking.py)
    log(INFO, "Protocol: %s", protocol)
    log(INFO, "Results: %s", results.dir)
    try:
        grid = ChargingGrid(
            grid,
            ledger,
            partitions,
            note=SEEDED_WARNING if settings.seeded_noise else "",
        )
        if settings.faults.clients:  # tests and benchmarks (simulation only)
            grid = FaultGrid(
                grid,
                clients=settings.faults.clients,
                kind=settings.faults.kind,
                delay=settings.round_timeout + 2.0,
                seed=settings.seed,
                partitions=partitions,
            )
        args = (grid, nodes, data.queries, model_factory)
        kwargs: dict[str, Any] = {
            "bits": settings.code_length,
            "top_k": settings.map_top_k,
            "ks": settings.precision_ks(),
            "device": device,
            "required_mechanisms": settings.required_encode_mechanisms,
            "timeout_s": settings.round_timeout,
        }
        evaluator = (
            side.evaluator(settings, *args, **kwargs)
            if side.evaluator is not None
            else RetrievalEvaluator(*args, **kwargs)
        )
        reporter = RoundReporter(settings, evaluator, strategy, results, ledger, key)
        arrays, first_round = ArrayRecord(initial_state), 1
        if checkpoint is not None:
            reporter.resume_from(checkpoint)
            checkpoint.restore_rng()
            arrays, first_round = checkpoint.arrays, checkpoint.round + 1
        started = time.perf_counter()
        result = strategy.start(
            grid=grid,
            initial_arrays=arrays,
            num_rounds=settings.rounds,
            timeout=settings.round_timeout,
            evaluate_fn=reporter,
            first_round=first_round,
        )
        if len(result.arrays):  # final global arrays (network [+ discriminator])
            torch.save(result.arrays.to_torch_state_dict(), results.path("model.pt"))
        _write_summary(
            results, settings, reporter, protocol, time.perf_counter() - started
        )
        table = final_table(
            reporter.rows, side, k=settings.map_top_k, ks=settings.precision_ks()
        )
        log(INFO, "Final retrieval results:\n%s", table)
        if len(reporter.ledger):
            table = reporter.ledger.table()
            log(INFO, "Privacy ledger (basic composition):\n%s", table)
            if settings.seeded_noise:
                log(WARNING, "Privacy ledger: %s", SEEDED_WARNING)
        for old in results.dir.glob("checkpoint*"):  # the run is complete
            old.unlink()
        final = results.finish()
        log(INFO, "Results written to %s", final)
        return results
    except BaseException as exc:
        results.fail(exc)
        raise


def _write_config(
    results: RunResults,
    config: dict[str, Any],
    model_name: str,
    protocol: str,
    data: PreparedData,
    nodes: dict[int, Any],
    device: torch.device,
    grid: Grid,
) -> None:
    results.write_json(
        "config.json",
        {
            "config": config,
            "model": model_name,
            "protocol": protocol,
            "data": data.description,
            "num_query": len(data.queries.labels),
            "num_database": data.num_database,
            "nodes": [
                {
                    "partition_id": i.partition_id,
                    "num_database": i.num_database,
                    "device": i.device,
                }
                for i in sorted(nodes.values(), key=lambda i: i.partition_id)
            ],
            "server_device": str(device),
            "torch": torch.__version__,
            # versions, git commit, FAB hash (a fake grid in tests has no run)
            "provenance": run_provenance(getattr(grid, "run", None)),
        },
    )


def _round_costs(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Mean training wall time and bytes per client over the trained rounds."""
    trained = [r for r in rows if r["round"] > 0]

    def mean(key: str) -> float | None:
        vals = [r[key] for r in trained if r.get(key) is not None]
        return float(np.mean(vals)) if vals else None

    return {
        "train_round_s_mean": mean("train_round_s"),
        "down_bytes_per_client_mean": mean("down_bytes_per_client"),
        "up_bytes_per_client_mean": mean("up_bytes_per_client"),
    }


def _privacy_summary(ledger: PrivacyLedger) -> dict[str, Any]:
    """Largest composed (epsilon, delta) over clients, per unit; {} if none."""
    worst: dict[str, list[float]] = {}
    for units in ledger.totals_by_client().values():
        for unit, (eps, delta) in units.items():
            cur = worst.setdefault(unit, [0.0, 0.0])
            cur[0], cur[1] = max(cur[0], eps), max(cur[1], delta)
    return {
        unit: {"max_client_epsilon": e, "max_client_delta": d}
        for unit, (e, d) in worst.items()
    }


def _write_summary(
    results: RunResults,
    settings: RunSettings,
    reporter: RoundReporter,
    protocol: str,
    seconds: float,
) -> None:
    last = reporter.last
    if last is None:
        raise RuntimeError("no evaluation happened; nothing to summarise")
    rep = last.report
    # personalized PFMH has no union ranking: its headline is the per-client mAP
    key = "map_all" if rep is not None else LOCAL_MAP_ALL
    evaluated = [r for r in reporter.rows if r.get(key) is not None]
    best = max(evaluated, key=lambda r: r[key]) if evaluated else None
    initial = next(
        (r for r in reporter.rows if r["round"] == 0 and "eval_seconds" in r), None
    )
    per_client = {}
    if last.per_client:
        per_client = {
            "final_per_client": dict(last.per_client),
            "initial_per_client": (
                {k: initial.get(k) for k in last.per_client} if initial else None
            ),
        }
    results.write_json(
        "summary.json",
        {
            "protocol": protocol,
            "strategy": settings.strategy,
            "code_length": settings.code_length,
            "rounds": settings.rounds,
            "final_round": reporter.last_round,
            "final": rep.to_dict() if rep is not None else None,
            "initial_map_all": initial.get("map_all") if initial else None,
            **per_client,
            "best_round": best["round"] if best else None,
            f"best_{key}": best[key] if best else None,
            "train_seconds": seconds,
            "seconds_per_round": seconds / settings.rounds,
            **_round_costs(reporter.rows),
            "privacy": _privacy_summary(reporter.ledger),
            "privacy_noise": {
                "mode": settings.privacy.noise,
                "holds_against_server": not settings.seeded_noise,
                **({"warning": SEEDED_WARNING} if settings.seeded_noise else {}),
            },
        },
    )
    title = run_title(settings.to_dict(), reporter.last_round)
    plot_map_per_round(
        reporter.rows, settings.map_top_k, results.path("map_per_round.png"), title
    )
    plot_loss_per_round(reporter.rows, title, results.path("loss_per_round.png"))
    if rep is None:  # personalized PFMH: no union ranking, no PR / P@K plots
        return
    plot_pr_curve(rep.to_dict()["pr"], title, results.path("pr_curve.png"))
    plot_precision_at_k(
        rep.ks, rep.precision_at_k, title, results.path("precision_at_k.png")
    )
