"""Data families other than `shapes`: registry, eval protocol, digits, CIFAR, idx files, image folders.

Every file a test reads is written by the test into tmp_path (no downloads, no system data)."""

from __future__ import annotations

import gzip
import pickle
import random
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import ROOT  # noqa: E402
from PIL import Image

from vitpos.config import Config, ConfigError, DataConfig
from vitpos.data import DATA_NAMES, DATASETS, build_datamodule
from vitpos.data.mnist import FashionMNISTDataModule
from vitpos.data.transforms import eval_transform, train_transform

OFFLINE = {"shapes", "digits"}
PIXEL = 1e-3  # a resized band of one colour keeps it, up to interpolation at its edges


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VITPOS_CACHE", str(tmp_path / "cache"))


# -- registry -------------------------------------------------------------------------------
def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(ConfigError) as e:
        build_datamodule(DataConfig(name="cifar11"), 32)
    msg = str(e.value)
    assert "cifar11" in msg and "\n" not in msg
    assert all(name in msg for name in DATA_NAMES)


@pytest.mark.parametrize("name", [n for n in DATA_NAMES if n not in ("imagefolder", "shards")])
def test_registry_entry_constants_and_missing_data(name, tmp_path):
    dm = build_datamodule(DataConfig(name=name, data_dir=str(tmp_path / "nothing")), 32)
    assert isinstance(dm, DATASETS[name]) and dm.name == name
    assert dm.num_classes >= 2 and dm.in_chans in (1, 3) and dm.native_size > 0
    assert len(dm.mean) == len(dm.std) == dm.in_chans
    if name not in OFFLINE:  # no data there: a one-line ConfigError naming the folder
        with pytest.raises(ConfigError) as e:
            dm.setup("fit")
        assert str(tmp_path / "nothing") in str(e.value) and "\n" not in str(e.value)
        assert "--download" in str(e.value)


# -- eval protocol --------------------------------------------------------------------------
def _bands(h: int = 32, w: int = 64) -> Image.Image:
    """Red left quarter, green middle half, blue right quarter."""
    a = np.zeros((h, w, 3), np.uint8)
    a[:, : w // 4, 0] = 255
    a[:, w // 4 : 3 * w // 4, 1] = 255
    a[:, 3 * w // 4 :, 2] = 255
    return Image.fromarray(a)


def _ev(resolution, mode, crop_ratio=1.0):
    cfg = DataConfig(eval_resize=mode, crop_ratio=crop_ratio)
    return eval_transform(resolution, cfg, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))


def test_eval_crop_keeps_aspect_and_centre():
    x = _ev(32, "crop")(_bands())  # short side already 32: centre 32 columns are green
    assert x.shape == (3, 32, 32)
    assert torch.allclose(x[1], torch.ones(32, 32), atol=PIXEL) and x[0].max() < PIXEL
    # crop_ratio 0.5: short side to 32, crop 16 -> only the centre of a 32x32 image
    img = np.zeros((32, 32, 3), np.uint8)
    img[8:24, 8:24] = 255
    y = _ev(16, "crop", 0.5)(Image.fromarray(img))
    assert y.shape == (3, 16, 16) and y.min() > 0.99


def test_eval_full_keeps_everything_and_serves_non_square():
    x = _ev(32, "full")(_bands())
    assert x.shape == (3, 32, 32)
    assert x[0, :, :4].min() > 0.9 and x[2, :, -4:].min() > 0.9  # both ends survive
    assert _ev((16, 48), "full")(_bands()).shape == (3, 16, 48)
    assert _ev((16, 48), "crop")(_bands(32, 32)).shape == (3, 16, 48)


@pytest.mark.parametrize("field,value", [("eval_resize", "stretch"), ("crop_ratio", 0.0), ("crop_ratio", 1.5)])
def test_bad_eval_protocol_is_a_config_error(field, value):
    with pytest.raises(ConfigError, match=field):
        build_datamodule(DataConfig(name="digits", **{field: value}), 32)


def test_bad_resolution_is_a_config_error():
    dm = build_datamodule(DataConfig(name="digits"), 32)
    with pytest.raises(ConfigError, match="resolution"):
        dm.eval_dataset((16, 0))


def test_train_transform_all_augmentations_rgb_and_gray():
    cfg = DataConfig(
        random_resized_crop=True, hflip=True, randaugment="rand-m9-mstd0.5-inc1", random_erasing=1.0, random_crop_pad=4
    )
    torch.manual_seed(0)
    x = train_transform(24, cfg, (0.5,) * 3, (0.5,) * 3)(_bands())
    assert x.shape == (3, 24, 24)
    assert (x == 0).any()  # random erasing (p=1) writes value 0
    g = train_transform(24, cfg, (0.5,), (0.5,))(_bands().convert("L"))
    assert g.shape == (1, 24, 24)
    with pytest.raises(ConfigError, match="randaugment"):
        train_transform(24, DataConfig(randaugment="augmix-m3"), (0.5,) * 3, (0.5,) * 3)


def test_randaugment_posterize_down_to_0_bits_is_a_black_image_not_an_error():
    """`rand-m9-mstd0.5-inc1` reaches 0 bits now and then (magnitude noise at the top of the range); Pillow refuses
    that, so an unpatched op would end a run mid-epoch. Magnitude 10 asks for 0 bits every time."""
    from timm.data import rand_augment_transform

    from vitpos.compat.timm import posterize_to_black

    hp = {"translate_const": 10, "img_mean": (128, 128, 128)}
    ra = rand_augment_transform("rand-m10-n1-inc1", hp, transforms=["PosterizeIncreasing"])
    ra.ops[0].prob = 1.0
    img = _bands()
    with pytest.raises(ValueError, match="bits"):
        ra(img)  # timm and Pillow alone
    out = np.asarray(posterize_to_black(ra)(img))
    assert out.shape == np.asarray(img).shape and not out.any()
    ra4 = posterize_to_black(rand_augment_transform("rand-m0-n1-inc1", hp, transforms=["PosterizeIncreasing"]))
    ra4.ops[0].prob = 1.0
    assert (np.asarray(ra4(img)) == (np.asarray(img) & 0xF0)).all()  # 4 bits kept: Pillow's own posterize
    steps = train_transform(24, DataConfig(randaugment="rand-m9-mstd0.5-inc1"), (0.5,) * 3, (0.5,) * 3).transforms
    (vitpos_ra,) = [t for t in steps if hasattr(t, "ops")]
    posterize = [op.aug_fn for op in vitpos_ra.ops if op.name.startswith("Posterize")]
    assert posterize and all(fn is ra.ops[0].aug_fn for fn in posterize)  # what training uses is the patched op


# -- digits ---------------------------------------------------------------------------------
def test_digits_splits_and_loaders():
    dm = build_datamodule(DataConfig(name="digits", batch_size=64), 32, seed=5)
    assert (dm.num_classes, dm.in_chans) == (10, 1)
    dm.setup()
    sizes = [len(dm.train_set), len(dm.val_set), len(dm.test_set)]
    assert sum(sizes) == 1797 and sizes[1] == 180 and sizes[2] == 359
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (64, 1, 32, 32) and y.min() >= 0 and y.max() <= 9
    assert abs(x.mean().item()) < 0.3  # normalised with the data set's own mean / std
    assert len(dm.train_dataloader()) == len(dm.train_set) // 64  # drop_last in training
    # the split does not depend on the run seed
    other = build_datamodule(DataConfig(name="digits"), 32, seed=6)
    assert torch.equal(dm.eval_dataset(16, "test")[7][0], other.eval_dataset(16, "test")[7][0])
    assert dm.eval_dataset((8, 24), "val")[0][0].shape == (1, 8, 24)


# -- CIFAR ----------------------------------------------------------------------------------
def _write_cifar(root: Path, hundred: bool, n_per_batch: int = 4, n_test: int = 5) -> None:
    folder = root / ("cifar-100-python" if hundred else "cifar-10-batches-py")
    folder.mkdir(parents=True)
    key = "fine_labels" if hundred else "labels"
    names = ["train"] if hundred else [f"data_batch_{i}" for i in range(1, 6)]
    per = n_per_batch * (5 if hundred else 1)
    label = 0
    for name in [*names, "test"] if hundred else [*names, "test_batch"]:
        n = n_test if "test" in name else per
        labels = [(label + i) % 10 for i in range(n)]
        label += n
        data = np.repeat(np.array(labels, np.uint8)[:, None] * 20, 3072, 1)  # pixel value = 20 * label
        (folder / name).write_bytes(pickle.dumps({"data": data, key: labels}))
    meta_key = "fine_label_names" if hundred else "label_names"
    (folder / ("meta" if hundred else "batches.meta")).write_bytes(
        pickle.dumps({meta_key: [str(i) for i in range(10)]})
    )


@pytest.mark.parametrize("name", ["cifar10", "cifar100"])
def test_cifar_from_written_batches(name, tmp_path):
    _write_cifar(tmp_path, hundred=name == "cifar100")
    cfg = DataConfig(name=name, data_dir=str(tmp_path), batch_size=4, eval_resize="full")
    dm = build_datamodule(cfg, 32)
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (18, 2, 5)  # holdout capped at 10 %
    mean, std = torch.tensor(dm.mean)[:, None, None], torch.tensor(dm.std)[:, None, None]
    for ds in (dm.val_set, dm.test_set, dm.eval_dataset(48, "train")):
        for i in range(len(ds) if len(ds) < 6 else 6):
            x, y = ds[i]
            pixel = (x * std + mean).mean().item()
            assert abs(pixel - 20 * y / 255) < 0.01  # image and label stay together
    assert dm.eval_dataset(48, "train")[0][0].shape == (3, 48, 48)
    # holdout_size=0: train on all, val is the test split
    dm0 = build_datamodule(DataConfig(name=name, data_dir=str(tmp_path), holdout_size=0), 32)
    dm0.setup()
    assert (len(dm0.train_set), len(dm0.val_set)) == (20, 5)


def test_train_limit_is_a_fixed_subset_of_train(tmp_path):
    _write_cifar(tmp_path, hundred=False)
    sets = []
    for seed in (0, 1):
        dm = build_datamodule(DataConfig(name="cifar10", data_dir=str(tmp_path), train_limit=7), 32, seed=seed)
        dm.setup()
        _, train_idx, val_idx = dm._train_and_holdout()
        assert len(dm.train_set) == 7 and len(dm.val_set) == 2
        assert not set(train_idx) & set(val_idx)
        sets.append(train_idx)
    assert sets[0] == sets[1]  # the run seed does not change which images
    with pytest.raises(ConfigError, match="train-limit"):
        build_datamodule(DataConfig(name="shapes", train_limit=7), 32)


def test_cifar_incomplete_files_is_a_config_error(tmp_path):
    _write_cifar(tmp_path, hundred=False)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(ConfigError, match="cifar-10-batches-py") as e:
        build_datamodule(DataConfig(name="cifar10", data_dir=str(tmp_path)), 32).setup("fit")
    assert str(tmp_path) in str(e.value) and "--download" in str(e.value)


# -- idx files (fashion-mnist / mnist) -----------------------------------------------------
def _idx_bytes(arr: np.ndarray) -> bytes:
    return struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def _write_idx(folder: Path, gz: bool, n_train: int = 20, n_test: int = 6) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        images = np.repeat(labels[:, None, None] * 25, 28 * 28, 1).reshape(n, 28, 28).astype(np.uint8)
        for kind, arr in (("images-idx3", images), ("labels-idx1", labels)):
            path = folder / f"{prefix}-{kind}-ubyte"
            data = _idx_bytes(arr)
            if gz:
                Path(f"{path}.gz").write_bytes(gzip.compress(data))
            else:
                path.write_bytes(data)


def _check_idx_module(dm) -> None:
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (18, 2, 6)
    assert dm.in_chans == 1
    x, y = dm.test_set[3]
    assert x.shape == (1, 28, 28) and y == 3
    assert abs((x * dm.std[0] + dm.mean[0]).mean().item() - 75 / 255) < 0.01
    x, _ = next(iter(dm.train_dataloader()))
    assert x.shape[1:] == (1, 28, 28)


@pytest.mark.parametrize("gz", [True, False])
def test_fashion_mnist_from_idx_files(gz, tmp_path):
    src = tmp_path / "src"
    _write_idx(src, gz)
    before = sorted(p.name for p in src.iterdir())
    cfg = DataConfig(name="fashion-mnist", data_dir=str(src), batch_size=4, random_crop_pad=4, random_erasing=0.25)
    dm = build_datamodule(cfg, 28)
    _check_idx_module(dm)
    assert sorted(p.name for p in src.iterdir()) == before  # the source folder is never written to
    prepared = list((tmp_path / "cache" / "idx").iterdir())
    assert len(prepared) == 1 and (prepared[0] / "FashionMNIST" / "raw" / "t10k-images-idx3-ubyte").is_file()
    build_datamodule(cfg, 28).setup("test")  # a second run reuses the prepared copy
    assert list((tmp_path / "cache" / "idx").iterdir()) == prepared


def test_fashion_mnist_system_folder_default(tmp_path, monkeypatch):
    system = tmp_path / "usr-share-datasets-fashion-mnist"
    _write_idx(system, gz=True)
    monkeypatch.setattr(FashionMNISTDataModule, "system_dir", system)
    before = sorted(p.name for p in system.rglob("*"))
    _check_idx_module(build_datamodule(DataConfig(name="fashion-mnist"), 28))
    assert sorted(p.name for p in system.rglob("*")) == before  # decompressed into the cache, not there
    assert (tmp_path / "cache" / "idx").is_dir()


def test_mnist_in_torchvision_layout_is_read_in_place(tmp_path):
    _write_idx(tmp_path / "d" / "MNIST" / "raw", gz=False)
    _check_idx_module(build_datamodule(DataConfig(name="mnist", data_dir=str(tmp_path / "d")), 28))
    assert not (tmp_path / "cache" / "idx").exists()


def test_fashion_mnist_missing_files_message(tmp_path, monkeypatch):
    monkeypatch.setattr(FashionMNISTDataModule, "system_dir", tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError) as e:
        build_datamodule(DataConfig(name="fashion-mnist", data_dir=str(tmp_path / "empty")), 28).setup("fit")
    msg = str(e.value)
    assert "apt-get install dataset-fashion-mnist" in msg and "--download" in msg
    assert str(tmp_path / "empty") in msg and "\n" not in msg
    # without data_dir and without the system folder, it names the cache folder and the system folder it tried
    with pytest.raises(ConfigError, match=f"{tmp_path / 'cache'}.* nor in {tmp_path / 'absent'}"):
        build_datamodule(DataConfig(name="fashion-mnist"), 28).setup("fit")


# -- image folders --------------------------------------------------------------------------
def _write_folder(root: Path, split: str, cls: str, values: list[int], size=(20, 12)) -> None:
    (root / split / cls).mkdir(parents=True, exist_ok=True)
    for i, v in enumerate(values):
        Image.fromarray(np.full((size[1], size[0], 3), v, np.uint8)).save(root / split / cls / f"{i}.png")


def test_imagefolder_reads_pngs_and_fails_loudly_on_a_corrupt_one(tmp_path):
    _write_folder(tmp_path, "train", "cat", [10, 20, 30])
    _write_folder(tmp_path, "train", "dog", [200, 210])
    _write_folder(tmp_path, "val", "cat", [40])
    _write_folder(tmp_path, "val", "dog", [220])
    bad = tmp_path / "val" / "dog" / "zz-bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    cfg = DataConfig(name="imagefolder", data_dir=str(tmp_path), batch_size=2, eval_resize="full")
    dm = build_datamodule(cfg, 16)
    assert (dm.num_classes, dm.in_chans, dm.native_size) == (2, 3, 16)
    dm.setup()
    assert (len(dm.train_set), len(dm.val_set), len(dm.test_set)) == (5, 3, 3)  # test = val without test/
    x, y = dm.val_set[0]
    assert x.shape == (3, 16, 16) and y == 0
    assert (
        abs((x * torch.tensor(dm.std)[:, None, None] + torch.tensor(dm.mean)[:, None, None]).mean() - 40 / 255) < 0.01
    )
    assert dm.eval_dataset((8, 24), "test")[1][0].shape == (3, 8, 24)
    with pytest.raises(ConfigError, match="cannot decode image .*zz-bad.png"):
        dm.val_set[2]


def test_imagefolder_layout_errors(tmp_path):
    with pytest.raises(ConfigError, match="data-dir"):
        build_datamodule(DataConfig(name="imagefolder"), 16)
    _write_folder(tmp_path, "train", "cat", [1])
    with pytest.raises(ConfigError, match="val"):
        build_datamodule(DataConfig(name="imagefolder", data_dir=str(tmp_path)), 16)
    _write_folder(tmp_path, "val", "dog", [1])
    with pytest.raises(ConfigError, match="differ .*: it lacks cat; it has dog that train/ lacks"):
        build_datamodule(DataConfig(name="imagefolder", data_dir=str(tmp_path)), 16)


def test_imagefolder_reads_no_hidden_folder_or_file(tmp_path):
    for split in ("train", "val"):
        _write_folder(tmp_path, split, "cat", [10, 20])
        _write_folder(tmp_path, split, "dog", [200])
    _write_folder(tmp_path, "train", ".ipynb_checkpoints", [99])  # a notebook's, beside the classes
    _write_folder(tmp_path, "val", "cat/.ipynb_checkpoints", [99])  # and inside one
    Image.new("RGB", (4, 4)).save(tmp_path / "train" / "dog" / ".hidden.png")
    dm = build_datamodule(DataConfig(name="imagefolder", data_dir=str(tmp_path)), 16)
    assert dm.classes == ["cat", "dog"]
    assert [len(dm.raw(s)) for s in ("train", "val")] == [3, 3]


def gradient16(path: Path, size: int = 64) -> np.ndarray:
    """A 16-bit grayscale PNG: a horizontal ramp over the whole 0..65535 range; its values."""
    ramp = np.tile(np.linspace(0, 65535, size).round().astype(np.uint16), (size, 1))
    Image.fromarray(ramp).save(path)
    assert Image.open(path).mode == "I;16"
    return ramp


def test_a_16_bit_image_is_scaled_to_8_bits_not_clipped(tmp_path):
    from vitpos.data.imagefolder import load_rgb
    from vitpos.data.shards import decode

    ramp = gradient16(tmp_path / "g.png")
    expected = np.round(ramp / 257)
    for img in (load_rgb(str(tmp_path / "g.png")), decode((tmp_path / "g.png").read_bytes(), 3, "train sample 0")):
        got = np.asarray(img)
        assert img.mode == "RGB" and np.abs(got[..., 0] - expected).max() <= 1
        assert (got == 255).mean() < 0.05  # PIL's own conversion makes 99 % of it white
    assert np.abs(np.asarray(decode((tmp_path / "g.png").read_bytes(), 1, "x")) - expected).max() <= 1  # and gray


def test_an_image_over_the_pixel_limit_is_one_line_naming_it_in_every_reader(tmp_path, capsys):
    from vitpos.data import shard
    from vitpos.training import main

    for split in ("train", "val"):
        _write_folder(tmp_path / "set", split, "cat", [10], size=(8, 8))
        _write_folder(tmp_path / "set", split, "dog", [200], size=(8, 8))
    big = tmp_path / "set" / "train" / "dog" / "big.png"
    Image.new("RGB", (40, 40)).save(big)  # 1600 pixels: over twice a limit of 500
    common = ["--data", "imagefolder", "--data-dir", str(tmp_path / "set"), "--max-image-pixels", "500"]
    tiny = ["--embed-dim", "16", "--depth", "1", "--num-heads", "2", "--img-size", "8", "--batch-size", "3"]
    for argv in ([*common, *tiny, "--fast-dev-run"], [*common, *tiny, "--verify-images", "--out", str(tmp_path / "r")]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "big.png has 1,600 pixels" in err and "--max-image-pixels" in err, err
    assert shard.main([*common, "--out", str(tmp_path / "sh"), "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "big.png has 1,600 pixels" in err, err
    assert main([*common[:-1], "2000", *tiny, "--fast-dev-run"]) == 0  # the flag raises it


@pytest.mark.parametrize("name", ["cifar10", "cifar100", "imagenet"])
def test_recipe_randaugment_never_asks_for_an_invalid_operation(name):
    """The recipes' RandAugment draws magnitudes around 9 with std 0.5; at 10 posterize would ask Pillow
    for 0 bits, which Pillow 13 refuses mid-epoch. 3,000 draws see that case with near certainty."""
    from timm.data import rand_augment_transform

    spec = Config.from_yaml(ROOT / "configs" / f"{name}.yaml").data.randaugment
    t = rand_augment_transform(spec, {})
    img = Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype("uint8"))
    random.seed(0)
    for _ in range(3000):
        t(img)
