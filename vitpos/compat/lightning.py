"""Where vitpos reaches into Lightning's internals, and only here: the exact metrics history across a kill.

A run killed and resumed writes the same ``logs/metrics.csv`` as an uninterrupted one (tests/test_reliability.py):

* :class:`HistoryCSVLogger` keeps the rows logged before the checkpoint, drops those after it (the resumed run logs
  them again) and never leaves the file half-written (Lightning's CSV writer rewrites it in place);
* :class:`EpochSummary` keeps an epoch's summary row in the checkpoint written at that epoch's end, for a kill
  between that checkpoint and the row;
* :class:`PartialEpoch` carries an unfinished epoch's aggregates across a mid-epoch checkpoint, so that the resumed
  epoch's summary row covers the whole epoch.

Every private name used is listed in :data:`PRIVATE`; tests/test_compat.py checks each against the installed
Lightning and fails first, naming the one an upgrade removed. pyproject.toml bounds Lightning to the versions tested.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_warn

# (owner, attribute): "trainer." owners are attributes of a Trainer's objects, the others classes by import path.
PRIVATE = (
    ("lightning.pytorch.loggers.csv_logs.ExperimentWriter", "_check_log_dir_exists"),
    ("lightning.pytorch.loggers.csv_logs.ExperimentWriter", "_rewrite_with_new_header"),
    ("lightning.pytorch.loggers.CSVLogger", "_experiment"),
    ("trainer.fit_loop.epoch_loop", "_results"),
    ("trainer.fit_loop.epoch_loop", "_num_ready_batches_reached"),
    ("lightning.pytorch.trainer.connectors.logger_connector.result._ResultCollection", "metrics"),
    ("lightning.pytorch.trainer.connectors.logger_connector.result._ResultMetric", "meta"),
    ("lightning.pytorch.trainer.connectors.logger_connector.result._ResultMetric", "value"),
    ("lightning.pytorch.trainer.connectors.logger_connector.result._ResultMetric", "cumulated_batch_size"),
    ("lightning.pytorch.trainer.connectors.logger_connector.result._ResultMetric", "is_tensor"),
    ("lightning.pytorch.trainer.connectors.logger_connector.result._Metadata", "on_epoch"),
    ("lightning.pytorch.trainer.connectors.logger_connector.result._Metadata", "is_mean_reduction"),
    ("lightning.pytorch.trainer.connectors.logger_connector.result._Metadata", "is_sum_reduction"),
    ("lightning.pytorch.trainer.connectors.logger_connector.result._Metadata", "metric_attribute"),
)


def mid_epoch(trainer: L.Trainer) -> bool:
    """Whether the training loop stands inside an epoch: some of its batches done, not all."""
    loop = trainer.fit_loop.epoch_loop
    return loop.batch_progress.current.ready > 0 and not loop._num_ready_batches_reached()


class KeepHistoryWriter(ExperimentWriter):
    """Lightning's CSV writer, except that a resumed run keeps the rows logged before its checkpoint, and that
    no kill can leave the file half-written: Lightning rewrites ``metrics.csv`` in place (truncate, then write)
    whenever a new metric name appears, which a SIGKILL in between would leave empty.

    ``epoch_summary`` is the checkpoint's :class:`EpochSummary` entry: written back, once, where the file lacks it."""

    def __init__(self, log_dir: str, resume_step: int | None, epoch_summary: dict | None = None):
        self.resume_step, self.epoch_summary = resume_step, epoch_summary
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:
        path = Path(self.metrics_file_path)
        if self.resume_step is None or not path.is_file():
            return super()._check_log_dir_exists()
        text = path.read_text()
        if not text.endswith("\n"):  # a kill during an append: the torn last row is dropped
            text = text[: text.rfind("\n") + 1]
        reader = csv.DictReader(io.StringIO(text, newline=""))
        keys = list(reader.fieldnames or [])
        # Rows logged after the checkpoint (a run killed mid-epoch) are logged again by the resumed run.
        rows = [r for r in reader if r.get("step") not in (None, "") and int(float(r["step"])) < self.resume_step]
        _write_csv(path, keys, rows)
        self.metrics_keys = keys
        summary = self.epoch_summary
        if summary and not any(_is_summary_row(r, summary) for r in rows):
            # the run was killed between the checkpoint and Lightning's summary row: the row as Lightning logs it
            self.log_metrics({**summary["metrics"], "epoch": summary["epoch"]}, step=summary["step"])
            self.save()

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        path = Path(self.metrics_file_path)
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        _write_csv(path, fieldnames, rows)


def _is_summary_row(row: dict[str, str], summary: dict) -> bool:
    step = row.get("step") or ""
    return step != "" and int(float(step)) == summary["step"] and all(row.get(k) for k in summary["metrics"])


def _write_csv(path: Path, keys: list[str], rows: list[dict]) -> None:
    """Write ``path`` whole or not at all (a temp file renamed into place)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


class HistoryCSVLogger(CSVLogger):
    """CSV logs that survive a resume: one ``metrics.csv`` holds the rows from before and after it."""

    def __init__(self, *args, resume_step: int | None = None, epoch_summary: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.resume_step, self.epoch_summary = resume_step, epoch_summary

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            os.makedirs(self.root_dir, exist_ok=True)
            self._experiment = KeepHistoryWriter(self.log_dir, self.resume_step, self.epoch_summary)
        return self._experiment


class EpochSummary(Callback):
    """Keeps an epoch's training summary row (``train/loss_epoch``, ``train/top1``, ...) in the checkpoint
    written at the end of that epoch.

    Lightning logs that row only after the epoch's checkpoint is written, and a run resumed from the checkpoint
    does not log it again, so a kill in between would lose it for good; the resumed run's CSV logger writes it
    back from here (``checkpoint["epoch_summary"]``) when ``metrics.csv`` lacks it."""

    KEY = "epoch_summary"

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        loop = trainer.fit_loop.epoch_loop
        if not loop._num_ready_batches_reached():  # mid-epoch: the summary is not known yet
            return
        # The training results, also while validation is the active loop. Every rank saves, so a metric that
        # syncs across ranks (torchmetrics) syncs here as it would at the epoch's end, which then reuses the value.
        logged = loop._results.metrics(on_step=False)["log"]
        if logged:
            checkpoint[self.KEY] = {
                "epoch": trainer.current_epoch,
                # the step Lightning logs the row at: the epoch's last optimizer step, counted from 0
                "step": trainer.global_step - 1,
                "metrics": {k: float(v) for k, v in logged.items()},
            }


class PartialEpoch(Callback):
    """Carries the training aggregates of an unfinished epoch across a mid-epoch checkpoint, so that a run resumed from
    it logs that epoch's summary row (``train/loss_epoch``, ``train/top1``, ...) over the whole epoch, not over the
    steps after the resume.

    ``checkpoint["epoch_partial"]`` holds, for every rank (every rank saves, and the values are gathered), what the
    epoch's ``self.log(..., on_epoch=True)`` calls have accumulated: the weighted sum and count behind a logged
    tensor's epoch mean (or its sum), and the states of a logged torchmetrics object. Each rank takes back its own:
    under DDP a tensor's epoch value is its own rank's (unless logged with ``sync_dist``) and a torchmetrics object
    syncs its states at the epoch's end, as in an uninterrupted run. A checkpoint without the entry resumes with the
    epoch's aggregates empty."""

    KEY = "epoch_partial"

    def __init__(self) -> None:
        self.pending: dict | None = None  # this rank's part of the checkpoint's entry, until restored

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        if not mid_epoch(trainer):
            return  # not inside an epoch: nothing is half-accumulated (an epoch's end is EpochSummary's)
        loop = trainer.fit_loop.epoch_loop
        sums, metrics = {}, {}
        for key, entry in sorted(loop._results.items()):  # the same order on every rank: each gather is collective
            if not entry.meta.on_epoch:
                continue
            if entry.is_tensor and entry.meta.is_mean_reduction:
                sums[key] = {n: _gather(pl_module, getattr(entry, n)) for n in ("value", "cumulated_batch_size")}
            elif entry.is_tensor and entry.meta.is_sum_reduction:
                sums[key] = {"value": _gather(pl_module, entry.value)}
            elif not entry.is_tensor and entry.meta.metric_attribute:
                states = entry.value.metric_state
                metrics[entry.meta.metric_attribute] = {n: _gather(pl_module, v) for n, v in states.items()}
        checkpoint[self.KEY] = {"world_size": trainer.world_size, "sums": sums, "metrics": metrics}

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        saved = checkpoint.get(self.KEY)
        if saved is None:
            return
        if saved["world_size"] != trainer.world_size:
            rank_zero_warn(
                f"the checkpoint's unfinished epoch was trained on {saved['world_size']} rank(s), this run has "
                f"{trainer.world_size}: that epoch's summary row covers the steps after the resume only"
            )
            return
        rank = trainer.global_rank
        self.pending = {
            part: {key: {n: v[rank] for n, v in values.items()} for key, values in saved[part].items()}
            for part in ("sums", "metrics")
        }

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.pending is None:
            return
        for attribute, states in self.pending["metrics"].items():  # the module's own objects, before any update
            metric = pl_module.get_submodule(attribute)
            for name, value in states.items():
                setattr(metric, name, value.to(getattr(metric, name).device))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        if self.pending is None:
            return
        # Lightning creates a logged tensor's accumulator at its first self.log: now, after the first resumed batch,
        # each holds that batch alone, and the checkpoint's part of the epoch is added to it.
        results = trainer.fit_loop.epoch_loop._results
        for key, saved in self.pending["sums"].items():
            if key in results:
                entry = results[key]
                for name, value in saved.items():
                    setattr(entry, name, getattr(entry, name) + value.to(entry.value.device))
        self.pending = None


def _gather(pl_module: L.LightningModule, value: torch.Tensor) -> torch.Tensor:
    """``value`` of every rank, stacked on a first dimension (world_size, ...), on the CPU."""
    gathered = pl_module.all_gather(value.detach())
    return (gathered if pl_module.trainer.world_size > 1 else gathered.unsqueeze(0)).cpu()
