"""Streaming shards: write, train, evaluate; once per epoch under DDP; mid-epoch resume after a real kill;
deterministic order; clear errors for missing or damaged shards; Hugging Face sets saved to disk.

Every image of the test set is one flat colour that encodes its id (R, G = id // 256, id % 256), so the ids a
training step saw can be read back from the normalised batch: no hook in vitpos is needed to observe the order.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from PIL import Image

from vitpos.config import ConfigError, DataConfig
from vitpos.data import build_datamodule
from vitpos.data.shard import write_shards
from vitpos.data.shards import ShardsDataModule
from vitpos.data.torchvision_sets import IMAGENET_MEAN, IMAGENET_STD
from vitpos.training import main

ROOT = Path(__file__).resolve().parents[1]
CLASSES = ("a", "b", "c")
# 199: prime, so no batch x ranks divides it and every epoch ends with a padded batch; 39: odd, so an even split of
# the validation images between two ranks would need a padded duplicate
N_TRAIN, N_VAL = 199, 39
VAL_ID0 = 1000
PIXEL_ATOL = 1e-6  # lossless storage: only float rounding between the two paths
TINY = ["--pos", "learned", "--embed-dim", "32", "--depth", "1", "--num-heads", "2"]

# Run train.py with training_step wrapped to log, per rank, "epoch global_step id id ..." for every batch.
LOGGING_TRAIN = f"""
import os, sys, time
import torch
from vitpos.lit import LitViT
from vitpos.training import main

MEAN, STD = torch.tensor({list(IMAGENET_MEAN)})[:2], torch.tensor({list(IMAGENET_STD)})[:2]
real_step = LitViT.training_step

def ids_of_batch(x):
    rg = (x[:, :2, 0, 0] * STD + MEAN) * 255
    return (rg.round().long() * torch.tensor([256, 1])).sum(1).tolist()

def logged(self, batch, batch_idx):
    w = batch[2].tolist() if len(batch) == 3 else [1.0] * len(batch[1])
    real = [i for i, wi in zip(ids_of_batch(batch[0]), w) if wi > 0]  # padding copies have weight 0
    with open(os.environ["SEEN_LOG"] + f".{{self.global_rank}}", "a") as f:
        f.write(f"{{self.current_epoch}} {{self.global_step}} " + " ".join(map(str, real)) + "\\n")
    time.sleep(float(os.environ.get("STEP_DELAY", "0")))
    return real_step(self, batch, batch_idx)

def eval_logged(stage, real):
    def step(self, batch, batch_idx):
        if not self.trainer.sanity_checking:
            with open(os.environ["SEEN_LOG"] + f"-{{stage}}.{{self.global_rank}}", "a") as f:
                f.write(f"{{self.current_epoch}} " + " ".join(map(str, ids_of_batch(batch[0]))) + "\\n")
        return real(self, batch, batch_idx)
    return step

LitViT.validation_step = eval_logged("val", LitViT.validation_step)
LitViT.test_step = eval_logged("test", LitViT.test_step)
LitViT.training_step = logged
sys.exit(main(sys.argv[1:]))
"""


def colour_image(i: int) -> Image.Image:
    return Image.new("RGB", (32, 32), (i // 256, i % 256, 7))


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """An ImageFolder set: 192 training images (ids 0..191), 39 validation images (ids 1000..1038)."""
    root = tmp_path_factory.mktemp("folder")
    for split, n, id0 in (("train", N_TRAIN, 0), ("val", N_VAL, VAL_ID0)):
        for k in range(n):
            d = root / split / CLASSES[k % 3]
            d.mkdir(parents=True, exist_ok=True)
            colour_image(id0 + k).save(d / f"{k:04d}.png")
    return root


@pytest.fixture(scope="module")
def shards(folder, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("shards") / "set"
    write_shards(DataConfig(name="imagefolder", data_dir=str(folder)), out, workers=2, verbose=False)
    return out


@pytest.fixture(scope="module")
def trained(shards, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "run"
    code = main([*TINY, "--data", "shards", "--data-dir", str(shards), "--out", str(out), "--epochs", "1",
                 "--batch-size", "32", "--eval-resolutions", "32", "48"])  # fmt: skip
    assert code == 0
    return out


def run(cmd: list[str], timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def seen(log: Path) -> list[tuple[int, int, list[int]]]:
    """(epoch, global_step, ids) per training batch, from every rank's log file."""
    rows = []
    for f in sorted(log.parent.glob(log.name + ".*")):
        for line in f.read_text().splitlines(keepends=True):
            if line.endswith("\n"):  # a line being written while the test polls is read next time
                e, s, *ids = map(int, line.split())
                rows.append((e, s, ids))
    return rows


def seen_rank(log: Path, rank: int) -> list[tuple[int, int, list[int]]]:
    f = log.with_name(f"{log.name}.{rank}")
    return [(int(e), int(s), list(map(int, ids))) for e, s, *ids in (ln.split() for ln in f.read_text().splitlines())]


def ids_of(rows, epoch: int, steps=range(10**9)) -> list[int]:
    return [i for e, s, ids in rows if e == epoch and s in steps for i in ids]


# -- writing -----------------------------------------------------------------------------------------------------
def test_shards_hold_every_split_with_the_files_bytes_labels_and_class_names(shards, folder):
    from litdata import StreamingDataset
    from torchvision.datasets import ImageFolder

    meta = json.loads((shards / "meta.json").read_text())
    assert meta["classes"] == list(CLASSES) and meta["source"] == "imagefolder"
    assert meta["splits"] == {"train": N_TRAIN, "val": N_VAL, "test": N_VAL}  # no test/: test is val
    for split in ("train", "val"):
        source = ImageFolder(str(folder / split))
        stored = StreamingDataset(str(shards / split))
        assert len(stored) == len(source)
        by_index = {s["index"]: s for s in (stored[i] for i in range(len(stored)))}
        assert sorted(by_index) == list(range(len(source)))
        for i, (path, label) in enumerate(source.samples):  # bytes as found, not re-encoded
            assert by_index[i]["image"] == Path(path).read_bytes() and by_index[i]["label"] == label


def test_sharding_again_keeps_finished_splits_and_completes_the_rest(shards, folder, tmp_path):
    cfg = DataConfig(name="imagefolder", data_dir=str(folder))
    out = tmp_path / "partial"
    write_shards(cfg, out, splits=["train"], workers=1, verbose=False)
    before = {p.name: p.stat().st_mtime_ns for p in (out / "train").iterdir()}
    meta = write_shards(cfg, out, workers=1, verbose=False)  # the same command again, all splits
    assert {p.name: p.stat().st_mtime_ns for p in (out / "train").iterdir()} == before  # kept, not rewritten
    assert meta["splits"] == {"train": N_TRAIN, "val": N_VAL, "test": N_VAL}
    assert (out / "val" / "index.json").is_file() and not (out / "val" / ".checkpoints").exists()
    with pytest.raises(ConfigError, match="another set"):
        write_shards(cfg, out, quality=90, workers=1, verbose=False)  # another encoding into the same folder


@pytest.mark.parametrize("name", ["digits", "shapes"])
def test_arrays_are_stored_losslessly_so_shards_serve_what_the_source_serves(name, tmp_path):
    cfg = DataConfig(name=name, val_size=24)
    write_shards(cfg, tmp_path / "sh", splits=["val"], workers=1, verbose=False)
    source = build_datamodule(cfg, 32).eval_dataset(32, "val")
    shards = build_datamodule(DataConfig(name="shards", data_dir=str(tmp_path / "sh")), 32).eval_dataset(32, "val")
    assert len(shards) == len(source)
    for i in range(len(source)):
        (xs, ys), (xh, yh) = source[i], shards[i]
        assert ys == yh
        torch.testing.assert_close(xh, xs, rtol=0, atol=PIXEL_ATOL)


def test_quality_reencodes_as_jpeg_and_a_bad_source_image_is_one_line(folder, tmp_path, capsys):
    from litdata import StreamingDataset

    from vitpos.data import shard

    write_shards(DataConfig(name="imagefolder", data_dir=str(folder)), tmp_path / "q", splits=["val"], quality=80,
                 workers=1, verbose=False)  # fmt: skip
    assert StreamingDataset(str(tmp_path / "q" / "val"))[0]["image"][:2] == b"\xff\xd8"  # JPEG
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    (bad / "val" / "b" / "0001.png").write_bytes(b"not an image")
    with own_process_group():
        before = group_processes()
        code = shard.main(["--data", "imagefolder", "--data-dir", str(bad), "--out", str(tmp_path / "o"),
                           "--splits", "val", "--workers", "2", "--quiet"])  # fmt: skip
        left = group_processes() - before  # no writer, nor a process a writer started, outlives the failed command
    err = capsys.readouterr().err.strip()
    assert code == 2 and "0001.png" in err and len(err.splitlines()) == 1, err
    assert not left, left


@contextlib.contextmanager
def own_process_group():
    """This process leads a process group of its own while the block runs, so that group_processes() sees what it
    forks and nothing that another test worker (the same session's group) starts meanwhile."""
    old = os.getpgid(0)
    os.setpgid(0, 0)
    try:
        yield
    finally:
        os.setpgid(0, old)


def group_processes() -> set[int]:
    """The processes of this process group (Linux): what this process forks, and what those fork, stay in it."""
    group, found = os.getpgid(0), set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[2]) == group:  # fields after the name: state ppid pgrp
                found.add(int(stat.parent.name))
    return found


# -- class-sorted sources ----------------------------------------------------------------------------------------
SORTED_CLASSES, SORTED_TRAIN, SORTED_VAL = 4, 256, 25  # per class


def sorted_image(c: int, rng) -> Image.Image:
    """16 px, class c: a bright 8 px square in quadrant c of a noisy field (position is all that tells the classes)."""
    pixels = torch.randint(0, 60, (16, 16, 3), generator=rng)
    y, x = divmod(c, 2)
    pixels[8 * y : 8 * y + 8, 8 * x : 8 * x + 8] += 140
    return Image.fromarray(pixels.clamp(0, 255).byte().numpy())


@pytest.fixture(scope="module")
def class_sorted(tmp_path_factory) -> tuple[Path, Path, Path]:
    """An image folder (ImageFolder lists it class by class, as every real one), its shards in one file (600
    images, far below the default 64 MB) and in files of about 40 images, a class or two each in the source's order."""
    rng = torch.Generator().manual_seed(0)
    root = tmp_path_factory.mktemp("sorted")
    folder = root / "folder"
    for split, n in (("train", SORTED_TRAIN), ("val", SORTED_VAL)):
        for c in range(SORTED_CLASSES):
            d = folder / split / f"class{c}"
            d.mkdir(parents=True)
            for k in range(n):
                sorted_image(c, rng).save(d / f"{k:03d}.png")
    cfg = DataConfig(name="imagefolder", data_dir=str(folder))
    write_shards(cfg, root / "one-file", img_size=16, workers=1, verbose=False)
    write_shards(cfg, root / "small-files", img_size=16, splits=["train"], chunk_bytes="32kB", workers=1, verbose=False)
    return folder, root / "one-file", root / "small-files"


def label_counts(loader) -> list[list[int]]:
    """Samples per class in each full batch of one epoch (read to its end: a LitData reader left half-way keeps
    threads that a later fork in this process would inherit mid-operation)."""
    return [torch.bincount(y, minlength=SORTED_CLASSES).tolist() for _, y, w in loader if bool((w > 0).all())]


def mixed(counts: list[list[int]]) -> bool:
    """Every batch of 32 holds 3 or 4 classes and none more than 20 times (8 expected; sd 2.4)."""
    return all(sum(n > 0 for n in c) >= 3 and max(c) <= 20 for c in counts)


def test_the_first_batches_from_shards_of_a_class_sorted_folder_hold_every_class(class_sorted):
    shards = class_sorted[2]
    assert len(list((shards / "train").glob("*.bin"))) > SORTED_CLASSES  # files of one class in the source's order
    dm = build_datamodule(DataConfig(name="shards", data_dir=str(shards), batch_size=32), 16, seed=0)
    dm.train_set = dm.train_dataset()  # (only the training split here)
    counts = label_counts(dm.train_dataloader())
    assert mixed(counts[:4]), counts


def _sorted_sample(i: int) -> dict:
    """Sample i of a shard file written class by class: 150 samples of each of 4 labels, its id in the pixel."""
    buf = io.BytesIO()
    colour_image(i).save(buf, format="PNG")
    return {"image": buf.getvalue(), "label": i // 150, "index": i}


def test_the_reader_permutes_all_the_samples_of_a_shard_file_not_blocks_of_them(tmp_path):
    """One shard file of 600 samples stored class by class (as an older writer left them): LitData's default
    in-file shuffle permutes blocks of 256 consecutive samples, whose batches then hold one or two classes."""
    from litdata import optimize

    root = tmp_path / "set"
    optimize(fn=_sorted_sample, inputs=list(range(600)), output_dir=str(root / "train"), chunk_bytes="64MB",
             num_workers=1, verbose=False)  # fmt: skip
    meta = {"format": 1, "source": "imagefolder", "num_classes": 4, "classes": list("abcd"), "in_chans": 3,
            "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD), "native_size": 32, "shuffle": {"train": 0},
            "splits": {"train": 600}}  # fmt: skip
    (root / "meta.json").write_text(json.dumps(meta))
    dm = build_datamodule(DataConfig(name="shards", data_dir=str(root), batch_size=32), 32, seed=0)
    dm.train_set = dm.train_dataset()  # (no val split here)
    counts = label_counts(dm.train_dataloader())
    assert mixed(counts[:4]), counts


def test_shards_of_a_class_sorted_folder_train_as_well_as_the_folder(class_sorted, tmp_path):
    folder, shards, _ = class_sorted
    top1 = {}
    for name, data_dir in (("imagefolder", folder), ("shards", shards)):
        out = tmp_path / name
        args = [*TINY, "--data", name, "--data-dir", str(data_dir), "--img-size", "16", "--patch-size", "8",
                "--epochs", "5", "--batch-size", "32", "--lr", "3e-3", "--warmup-epochs", "0",
                "--pos-lr-warmup-epochs", "0", "--out", str(out)]  # fmt: skip
        assert main(args) == 0
        top1[name] = json.loads((out / "results.json").read_text())["best_val_top1"]
    # chance is 0.25; a run fed one class per batch ends near it
    assert top1["imagefolder"] >= 0.9 and top1["shards"] >= 0.9, top1
    assert abs(top1["shards"] - top1["imagefolder"]) <= 0.1, top1


def test_the_writer_records_its_shuffle_and_a_rerun_asking_for_another_order_or_size_is_refused(class_sorted, tmp_path):
    folder, shards, _ = class_sorted
    meta = json.loads((shards / "meta.json").read_text())
    assert meta["shuffle"] == {"train": 0} and meta["splits"]["train"] == SORTED_CLASSES * SORTED_TRAIN
    from litdata import StreamingDataset

    stored = [s["index"] for s in StreamingDataset(str(shards / "train"))]
    assert sorted(stored) == list(range(SORTED_CLASSES * SORTED_TRAIN)) and stored != sorted(stored)
    assert [s["index"] for s in StreamingDataset(str(shards / "val"))] == list(range(SORTED_CLASSES * SORTED_VAL))
    cfg = DataConfig(name="imagefolder", data_dir=str(folder))
    with pytest.raises(ConfigError, match="differ in shuffle"):
        write_shards(cfg, shards, img_size=16, seed=1, workers=1, verbose=False)
    out = tmp_path / "shapes"
    write_shards(DataConfig(name="shapes", train_size=40), out, splits=["train"], workers=1, verbose=False)
    with pytest.raises(ConfigError, match="holds 40 images, this command gives 50"):
        write_shards(DataConfig(name="shapes", train_size=50), out, splits=["train"], workers=1, verbose=False)


# -- training and evaluation -------------------------------------------------------------------------------------
def test_shard_train_evaluate(trained):
    res = json.loads((trained / "results.json").read_text())
    assert res["global_step"] == -(-N_TRAIN // 32) and "test/top1" in res["test"]  # the last batch padded
    records = json.loads((trained / "resolution" / "resolution.json").read_text())
    assert {r["resolution"] for r in records} == {32, 48}
    assert all(r["samples"] == N_VAL and r["data"] == "shards" for r in records)


@pytest.mark.cli
@pytest.mark.ddp
def test_the_evaluator_counts_every_shard_image_once_under_ddp(trained, tmp_path):
    ckpt = trained / "checkpoints" / "last.ckpt"
    r = run([sys.executable, "-m", "vitpos.evaluate", "--ckpt", str(ckpt), "--resolutions", "32", "--devices", "2",
             "--strategy", "ddp", "--batch-size", "8", "--out", str(tmp_path / "ddp")])  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (ddp,) = json.loads((tmp_path / "ddp" / "resolution.json").read_text())
    (one,) = [x for x in json.loads((trained / "resolution" / "resolution.json").read_text()) if x["resolution"] == 32]
    assert ddp["samples"] == N_VAL  # 39 on two ranks: 20 + 19, no padded duplicate
    assert ddp["correct"] == one["correct"]


def test_order_is_a_permutation_fixed_by_seed_and_epoch(shards):
    def orders(seed: int, epochs: int = 2) -> list[list[int]]:
        cfg = DataConfig(name="shards", data_dir=str(shards), batch_size=16)
        dm = build_datamodule(cfg, 32, seed=seed)
        dm.setup("fit")
        loader = dm.train_dataloader()
        out = []
        for _ in range(epochs):
            out.append([i for x, _, w in loader for i, wi in zip(id_from_pixels(x), w) if wi > 0])
        return out

    a, b, other = orders(0), orders(0), orders(1)
    assert a == b  # same seed: the same order, epoch by epoch
    assert all(sorted(o) == list(range(N_TRAIN)) for o in a + other)  # each epoch: every sample once
    assert a[0] != a[1] and a[0] != other[0]  # reshuffled per epoch, and per seed


def id_from_pixels(x: torch.Tensor) -> list[int]:
    rg = (x[:, :2, 0, 0] * torch.tensor(IMAGENET_STD[:2]) + torch.tensor(IMAGENET_MEAN[:2])) * 255
    return (rg.round().long() * torch.tensor([256, 1])).sum(1).tolist()


@pytest.mark.parametrize(
    "batch, world, nodes, workers", [(16, 2, 1, 0), (16, 3, 1, 2), (64, 2, 1, 1), (256, 2, 1, 0), (16, 4, 2, 0)]
)
def test_every_sample_once_per_epoch_for_any_batch_and_rank_count(shards, batch, world, nodes, workers):
    """Each rank simulated in this process (LitData plans from the dataset's `distributed_env`), two epochs: the same
    number of full-size batches on every rank, every sample once per epoch, and loss weights that make DDP's gradient
    average the mean over the real samples of each step (weight x real samples of the step over all ranks = batch x
    ranks). On two nodes too: LitData's own multi-node plan repeats samples from the second epoch on."""
    from litdata.utilities.env import _DistributedEnv

    from vitpos.compat.litdata import force_single_node_plan

    per_rank: list[list[list]] = [[] for _ in range(2)]  # epoch -> rank -> batches
    for rank in range(world):
        cfg = DataConfig(name="shards", data_dir=str(shards), batch_size=batch, num_workers=workers)
        dm = build_datamodule(cfg, 32, seed=3)
        dm.setup("fit")
        dm.train_set.distributed_env = _DistributedEnv(world, rank, nodes)
        force_single_node_plan(dm.train_set)
        loader = dm.train_dataloader()
        for epoch in range(2):
            batches = [(id_from_pixels(x), w.tolist(), x.shape[0]) for x, _, w in loader]
            assert len(batches) == len(loader) == -(-N_TRAIN // (batch * world))  # ceil: the rest is one more batch
            assert all(size == batch for *_, size in batches)
            per_rank[epoch].append(batches)
    for epoch in range(2):
        real = [i for b in per_rank[epoch] for ids, w, _ in b for i, wi in zip(ids, w, strict=True) if wi > 0]
        assert sorted(real) == list(range(N_TRAIN)), f"epoch {epoch}: a sample seen twice or never"
        for step in zip(*per_rank[epoch], strict=True):
            weights = [wi for _, w, _ in step for wi in w if wi > 0]
            assert weights and all(wi * len(weights) == pytest.approx(batch * world) for wi in weights)


def test_weighted_loss_is_the_mean_over_the_real_samples_only():
    import warnings

    import torch.nn.functional as F

    from vitpos.config import Config
    from vitpos.lit import LitViT

    cfg = Config()
    cfg.model.embed_dim, cfg.model.depth, cfg.model.num_heads, cfg.model.num_classes = 32, 1, 2, 3
    lit = LitViT(cfg.to_dict())
    x, y = torch.randn(8, 3, 32, 32), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    w = torch.tensor([8 / 3] * 3 + [0.0] * 5)  # one rank, 3 real samples padded to 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log outside a Trainer
        loss = lit.training_step((x, y, w), 0)
        unweighted = lit.training_step((x, y), 0)
    with torch.no_grad():
        logits = lit(x)
    ls = cfg.optim.label_smoothing
    torch.testing.assert_close(loss, F.cross_entropy(logits[:3], y[:3], label_smoothing=ls))
    torch.testing.assert_close(unweighted, F.cross_entropy(logits, y, label_smoothing=ls))
    top1 = lit.metrics["train_top1"]
    assert int(top1.tp.sum() + top1.fn.sum()) == 3 + 8  # samples counted: padding is not


def eval_seen(log: Path, stage: str) -> dict[int, list[tuple[int, list[int]]]]:
    """rank -> (epoch, image ids) per validation or test batch."""
    out = {}
    for k in (0, 1):
        rows = (ln.split() for ln in log.with_name(f"{log.name}-{stage}.{k}").read_text().splitlines())
        out[k] = [(int(e), list(map(int, ids))) for e, *ids in rows]
    return out


@pytest.mark.cli
@pytest.mark.ddp
def test_two_ddp_processes_train_on_every_sample_once_per_epoch_and_score_every_image_once(shards, tmp_path):
    script = tmp_path / "logging_train.py"
    script.write_text(LOGGING_TRAIN)
    log = tmp_path / "seen"
    r = run([sys.executable, str(script), *TINY, "--data", "shards", "--data-dir", str(shards), "--epochs", "2",
             "--batch-size", "16", "--devices", "2", "--strategy", "ddp", "--out", str(tmp_path / "run")],
            SEEN_LOG=str(log))  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    rows = seen(log)
    ranks = [seen_rank(log, k) for k in (0, 1)]
    for epoch in (0, 1):
        # 199 = 6 full batches of 16 per rank + 7 left: a 7th batch on each rank (4 + 3 real, the rest padding)
        assert [sum(e == epoch for e, _, _ in rk) for rk in ranks] == [7, 7]  # the same number of steps
        mine = [ids_of(rk, epoch) for rk in ranks]
        assert sorted(mine[0] + mine[1]) == list(range(N_TRAIN)), f"epoch {epoch}: a sample seen twice or never"
    assert ids_of(rows, 0) != ids_of(rows, 1)
    val, test = eval_seen(log, "val"), eval_seen(log, "test")
    images = list(range(VAL_ID0, VAL_ID0 + N_VAL))
    for epoch in (0, 1):  # validation after each epoch: 20 + 19 images, none twice
        assert sorted(i for k in (0, 1) for e, ids in val[k] if e == epoch for i in ids) == images
    assert sorted(i for k in (0, 1) for _, ids in test[k] for i in ids) == images


STEPS_8 = -(-N_TRAIN // 8)  # batch 8, one process: 24 full batches and the padded one with the other 7 samples


@pytest.mark.cli
@pytest.mark.parametrize(
    "ckpt_every, kill_at, epochs, delay",
    [(5, STEPS_8 + 8, 2, "0.1"),  # checkpoint at step 30: 5 batches into epoch 1
     (2 * STEPS_8 - 1, 2 * STEPS_8 - 1, 3, "0.3")],  # at step 49: after epoch 1's last full batch, before its rest
)  # fmt: skip
def test_killed_mid_epoch_then_resumed_sees_each_sample_once_in_that_epoch(
    shards, tmp_path, ckpt_every, kill_at, epochs, delay
):
    script = tmp_path / "logging_train.py"
    script.write_text(LOGGING_TRAIN)
    out, log, steps_per_epoch = tmp_path / "run", tmp_path / "seen", STEPS_8
    args = [sys.executable, str(script), *TINY, "--data", "shards", "--data-dir", str(shards), "--out", str(out),
            "--epochs", str(epochs), "--batch-size", "8", "--num-workers", "2",
            "--ckpt-every-n-steps", str(ckpt_every)]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "SEEN_LOG": str(log),
           "STEP_DELAY": delay}  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    deadline = time.time() + 240
    # kill in the second epoch, after its mid-epoch checkpoint
    while proc.poll() is None and time.time() < deadline:
        rows = seen(log) if log.with_suffix(".0").exists() else []
        if any(e == 1 and s >= kill_at for e, s, _ in rows):
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)  # a real crash: no handler runs
    proc.wait()
    from vitpos.checkpoint import load_checkpoint

    step = load_checkpoint(out / "checkpoints" / "last.ckpt")["global_step"]
    assert step == ckpt_every * (kill_at // ckpt_every), step  # the checkpoint the test meant to resume from
    assert steps_per_epoch < step < 2 * steps_per_epoch and step % steps_per_epoch, step  # mid-epoch 1
    killed = seen(log)
    for f in tmp_path.glob("seen.*"):
        f.unlink()

    r = run([*args, "--resume"], SEEN_LOG=str(log))
    assert r.returncode == 0, r.stderr[-3000:]
    resumed = seen(log)
    assert min(s for _, s, _ in resumed) == step  # it restarts at the checkpoint's step
    assert sum(e == 1 for e, _, _ in resumed) == 2 * steps_per_epoch - step  # the steps left in epoch 1, no more
    first = ids_of(killed, 1, range(step)) + ids_of(resumed, 1)
    assert sorted(first) == list(range(N_TRAIN)), "a sample of the interrupted epoch was seen twice or skipped"
    # and it continues with the very samples the killed run had drawn after the checkpoint
    redo = ids_of(killed, 1, range(step, 10**9))
    assert redo and ids_of(resumed, 1)[: len(redo)] == redo
    for epoch in range(2, epochs):  # and the epochs after it are whole again
        assert sorted(ids_of(resumed, epoch)) == list(range(N_TRAIN))


# -- errors ------------------------------------------------------------------------------------------------------
def _damage(kind: str, root: Path) -> None:
    chunk = sorted((root / "train").glob("*.bin"))[0]
    if kind == "no-folder":
        import shutil

        shutil.rmtree(root)
    elif kind == "no-meta":
        (root / "meta.json").unlink()
    elif kind == "no-index":
        (root / "train" / "index.json").unlink()
    elif kind == "missing-chunk":
        chunk.unlink()
    elif kind == "truncated-chunk":
        chunk.write_bytes(chunk.read_bytes()[:100])
    elif kind == "garbage-index":
        (root / "train" / "index.json").write_text("{not json")


@pytest.mark.parametrize(
    "kind, needle",
    [("no-folder", "no folder"), ("no-meta", "meta.json not found"), ("no-index", "index.json not found"),
     ("missing-chunk", "is missing"), ("truncated-chunk", "is corrupt"), ("garbage-index", "cannot read")],
)  # fmt: skip
def test_missing_or_corrupt_shards_are_one_line_errors(kind, needle, shards, tmp_path, capsys):
    import shutil

    root = tmp_path / "set"
    shutil.copytree(shards, root)
    _damage(kind, root)
    code = main([*TINY, "--data", "shards", "--data-dir", str(root), "--out", str(tmp_path / "run"), "--epochs", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and len(err.splitlines()) == 1, err


def test_undecodable_bytes_in_a_shard_are_a_clear_error(tmp_path):
    from vitpos.data.shards import DecodeSample

    with pytest.raises(ConfigError, match="cannot decode the image of train sample 3"):
        DecodeSample(lambda x: x, 3, "train")({"image": b"\x89PNG garbage", "label": 0, "index": 3})


def test_shards_need_a_data_dir():
    with pytest.raises(ConfigError, match="--data-dir"):
        ShardsDataModule(DataConfig(name="shards"), 32)


# -- Hugging Face datasets ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hf_set(tmp_path_factory) -> Path:
    datasets = pytest.importorskip("datasets")
    feats = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=list(CLASSES))})
    train = datasets.Dataset.from_dict(
        {"img": [colour_image(k) for k in range(60)], "label": [k % 3 for k in range(60)]}, features=feats
    )
    test = datasets.Dataset.from_dict(
        {"img": [colour_image(500 + k) for k in range(12)], "label": [k % 3 for k in range(12)]}, features=feats
    )
    path = tmp_path_factory.mktemp("hf") / "set"
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(path))
    return path


def test_hf_set_saved_to_disk_reads_its_columns_splits_and_classes(hf_set):
    dm = build_datamodule(DataConfig(name=f"hf:{hf_set}", holdout_size=6), 32)
    assert dm.classes == list(CLASSES) and dm.num_classes == 3 and dm.in_chans == 3
    # no validation split: 6 images carved from train (fixed seed); test is the saved test split
    assert (len(dm.raw("train")), len(dm.raw("val")), len(dm.raw("test"))) == (54, 6, 12)
    train_ids = {id_from_pixels(dm.eval_dataset(32, "train")[i][0][None])[0] for i in range(54)}
    val_ids = {id_from_pixels(dm.eval_dataset(32, "val")[i][0][None])[0] for i in range(6)}
    assert not train_ids & val_ids and train_ids | val_ids == set(range(60))
    img, label = dm.raw("test")[4]
    assert img.getpixel((0, 0)) == (500 // 256, 504 % 256, 7) and label == 4 % 3


def test_hf_set_trains_and_shards_keeping_its_stored_bytes(hf_set, tmp_path):
    import datasets

    out = tmp_path / "run"
    assert main([*TINY, "--data", f"hf:{hf_set}", "--out", str(out), "--epochs", "1", "--batch-size", "16"]) == 0
    assert json.loads((out / "results.json").read_text())["global_step"] == 54 // 16
    meta = write_shards(DataConfig(name=f"hf:{hf_set}"), tmp_path / "sh", splits=["test"], workers=1, verbose=False)
    assert meta["classes"] == list(CLASSES) and meta["splits"] == {"test": 12}
    from litdata import StreamingDataset

    stored = datasets.load_from_disk(str(hf_set))["test"].cast_column("img", datasets.Image(decode=False))
    got = StreamingDataset(str(tmp_path / "sh" / "test"))
    for k in range(12):
        s = got[k]
        assert s["image"] == stored[s["index"]]["img"]["bytes"]


def test_hf_unknown_name_is_one_line_and_never_goes_online(tmp_path, capsys):
    code = main([*TINY, "--data", "hf:nobody/no-such-set", "--out", str(tmp_path / "run"), "--epochs", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "cannot load 'nobody/no-such-set'" in err and len(err.splitlines()) == 1, err
