"""Where vitpos reaches into LitData's internals, and only here: its plan for an epoch, its ranks, its storage.

* :func:`force_single_node_plan`: LitData's multi-node plan gives a chunk shared by two nodes to both (see
  vitpos.data.streaming); the dataset is told it runs on one node by replacing its distributed environment.
* :func:`epoch_plan` and :func:`sample_count`: the intervals of samples the shuffler gives each worker of each rank
  in an epoch (the call each of LitData's workers makes) and the samples its chunks hold, from which
  ``EveryOnceLoader`` computes the samples no rank is given.
* :func:`download`: one file of a remote shard folder, through the storage clients LitData streams with.

tests/test_compat.py checks every name in :data:`PRIVATE` against the installed LitData.
"""

from __future__ import annotations

from typing import Any

from litdata import StreamingDataset

PRIVATE = (
    ("litdata.utilities.env", "_DistributedEnv"),
    ("litdata.streaming.resolver", "_get_fs_provider"),
    ("litdata.streaming.shuffle.Shuffle", "get_chunks_and_intervals_per_workers"),
    ("litdata.streaming.cache.Cache", "get_chunk_intervals"),
    ("litdata.StreamingDataset", "get_len"),
    ("litdata.StreamingDataset", "shuffler"),  # set by get_len
    ("litdata.StreamingDataset", "distributed_env"),
)


def force_single_node_plan(dataset: StreamingDataset) -> StreamingDataset:
    """Make LitData plan every epoch over all ranks as one node; returns ``dataset``."""
    from litdata.utilities.env import _DistributedEnv

    env = dataset.distributed_env
    dataset.distributed_env = _DistributedEnv(env.world_size, env.global_rank, 1)
    return dataset


def _shuffler(dataset: StreamingDataset, num_workers: int, batch_size: int) -> Any:
    dataset.get_len(num_workers, batch_size)  # builds the shuffler in this process if needed
    return dataset.shuffler


def sample_count(dataset: StreamingDataset, num_workers: int, batch_size: int) -> int:
    """The samples the dataset's chunks hold."""
    intervals = _shuffler(dataset, num_workers, batch_size).cache.get_chunk_intervals()
    return sum(int(iv[2] - iv[1]) for iv in intervals)


def epoch_plan(dataset: StreamingDataset, num_workers: int, batch_size: int, epoch: int) -> list[list[Any]]:
    """For every worker of every rank, the (chunk, start, end, ...) intervals of samples LitData gives it in
    ``epoch``."""
    shuffler = _shuffler(dataset, num_workers, batch_size)
    _, per_worker = shuffler.get_chunks_and_intervals_per_workers(
        dataset.distributed_env, max(1, num_workers), batch_size, epoch
    )
    return per_worker


def download(url: str, local: str) -> None:
    """Copy the remote file ``url`` to the local path ``local``."""
    from litdata.streaming.resolver import _get_fs_provider

    _get_fs_provider(url).download_file(url, local)
