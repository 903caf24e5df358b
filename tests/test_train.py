"""Training: flags reach the model, every scheme trains, checkpoints round-trip, bad input fails in one line."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

import vitpos
from vitpos.checkpoint import load_checkpoint, model_from_checkpoint
from vitpos.cli import build_parser, config_from_args
from vitpos.config import Config, ConfigError, model_from_config
from vitpos.data import build_datamodule
from vitpos.lit import LitViT
from vitpos.optim import param_groups
from vitpos.pos.rope2d import Rope2dPos
from vitpos.stems import ConvStem
from vitpos.training import cpu_name, main

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--embed-dim", "32", "--depth", "1", "--num-heads", "2", "--batch-size", "16", "--train-size", "64",
        "--val-size", "32", "--test-size", "32"]  # fmt: skip


def tiny_config(**trainer) -> Config:
    cfg = Config()
    cfg.model.embed_dim, cfg.model.depth, cfg.model.num_heads = 32, 2, 2
    cfg.data.train_size, cfg.data.val_size, cfg.data.test_size, cfg.data.batch_size = 64, 32, 32, 16
    cfg.optim.epochs = 1
    for k, v in trainer.items():
        setattr(cfg.trainer, k, v)
    return cfg


def test_flags_reach_config_and_model():
    args = build_parser().parse_args(
        ["--pos", "rope2d", "--stem", "conv", "--img-size", "48", "--patch-size", "8", "--embed-dim", "64",
         "--depth", "3", "--num-heads", "4", "--epochs", "7", "--batch-size", "32", "--lr", "0.002",
         "--seed", "5", "--devices", "2", "--strategy", "ddp", "--num-nodes", "3", "--precision", "bf16-mixed",
         "--accelerator", "gpu", "--data", "digits", "--pos-kwarg", "theta=10", "--class-token"]
    )  # fmt: skip
    cfg = config_from_args(args)
    assert (cfg.optim.epochs, cfg.data.batch_size, cfg.optim.lr, cfg.trainer.seed) == (7, 32, 0.002, 5)
    assert (cfg.trainer.devices, cfg.trainer.strategy, cfg.trainer.num_nodes) == (2, "ddp", 3)
    assert (cfg.trainer.precision, cfg.trainer.accelerator, cfg.data.name) == ("bf16-mixed", "gpu", "digits")
    model = model_from_config(cfg)
    assert isinstance(model.pos, Rope2dPos) and model.pos.theta == 10
    assert isinstance(model.stem, ConvStem)
    assert model.grid == (6, 6) and len(model.blocks) == 3 and model.cls_token is not None
    assert model.blocks[0].attn.num_heads == 4 and model.head.in_features == 64


def test_preset_then_explicit_dims_override(tmp_path):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("model:\n  depth: 2\noptim:\n  epochs: 3\n")
    cfg = config_from_args(build_parser().parse_args(["--config", str(yaml_file), "--model", "tiny", "--depth", "5"]))
    assert (cfg.model.embed_dim, cfg.model.num_heads, cfg.model.depth) == (192, 3, 5)
    assert cfg.optim.epochs == 3  # from the YAML, untouched by flags not given


def test_config_round_trips_through_yaml(tmp_path):
    cfg = tiny_config()
    cfg.model.pos_kwargs = {"theta": 10.0}
    cfg.save_yaml(tmp_path / "c.yaml")
    assert Config.from_yaml(tmp_path / "c.yaml") == cfg
    with pytest.raises(ConfigError, match="unknown config key"):
        Config.from_dict({"model": {"emb_dim": 3}})


def test_no_weight_decay_on_position_norms_and_biases():
    for pos in vitpos.POS_SCHEMES:
        model = vitpos.create_model(pos, embed_dim=32, depth=2, num_heads=2)
        decay, no_decay = param_groups(model, 0.05, 1e-3)
        no_decay_ids = {id(p) for p in no_decay["params"]}
        for name, p in model.named_parameters():
            expect_no_decay = name.startswith("pos.") or p.ndim <= 1
            assert (id(p) in no_decay_ids) == expect_no_decay, name
        assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0


@pytest.mark.parametrize("pos", vitpos.POS_SCHEMES)
def test_fast_dev_run_every_scheme(pos, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--pos", pos, "--fast-dev-run", *TINY]) == 0


def test_fast_dev_run_none_with_conv_stem(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--pos", "none", "--stem", "conv", "--fast-dev-run", *TINY]) == 0


def test_checkpoint_round_trip_gives_identical_model(tmp_path):
    cfg = tiny_config()
    cfg.model.pos = "relbias"
    L.seed_everything(0)
    dm = build_datamodule(cfg.data, img_size=cfg.model.img_size)
    cfg.model.num_classes, cfg.model.in_chans = dm.num_classes, dm.in_chans
    lit = LitViT(cfg.to_dict())
    trainer = L.Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, limit_val_batches=1)  # fmt: skip
    trainer.fit(lit, datamodule=dm)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    cfg2, model = model_from_checkpoint(path)
    assert cfg2.model == cfg.model
    x = torch.randn(3, 3, 40, 24)
    lit.model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x), lit.model(x), rtol=0, atol=0)
    public = vitpos.load_model(path)  # the public loader: same weights, eval mode
    assert not public.training
    with torch.no_grad():
        torch.testing.assert_close(public(x), lit.model(x), rtol=0, atol=0)
    # and the state really changed from initialisation (the test would pass trivially otherwise)
    fresh = model_from_config(cfg2)
    assert not torch.equal(fresh.pos.table, model.pos.table)


def test_short_run_writes_checkpoints_config_logs(tmp_path):
    out = tmp_path / "run"
    assert main(["--pos", "sincos2d", "--epochs", "1", "--out", str(out), *TINY]) == 0
    assert (out / "checkpoints" / "last.ckpt").is_file()
    assert list((out / "checkpoints").glob("best-*.ckpt"))
    assert Config.from_yaml(out / "config.yaml").model.pos == "sincos2d"
    assert (out / "logs" / "metrics.csv").is_file() and list((out / "tb").glob("events.*"))
    ckpt = load_checkpoint(out / "checkpoints" / "last.ckpt")
    assert ckpt["hyper_parameters"]["config"]["model"]["pos"] == "sincos2d"
    # The same --out again without --resume must not overwrite the run.
    assert main(["--pos", "sincos2d", "--epochs", "1", "--out", str(out), *TINY]) == 2
    assert (out / "checkpoints" / "last.ckpt").is_file()


def test_a_run_keeps_where_its_position_parameters_started_what_it_fitted_and_on_what(tmp_path):
    """The default rule reaches the optimizer: the position group decays towards the start that the checkpoint's
    optimizer state holds (so a resume pulls towards it too); results.json says how well training fitted and on
    what hardware."""
    out = tmp_path / "run"
    assert main(["--pos", "learned", "--epochs", "1", "--log-every-n-steps", "1", "--out", str(out), *TINY]) == 0
    ckpt = load_checkpoint(out / "checkpoints" / "last.ckpt")
    (opt,) = ckpt["optimizer_states"]
    pulled = [g for g in opt["param_groups"] if g.get("decay_to_start")]
    assert len(pulled) == 1 and pulled[0]["decay_to_start"] == Config().optim.pos_weight_decay > 0
    assert pulled[0]["lr"] > 0 and pulled[0]["weight_decay"] == 0.0
    (index,) = pulled[0]["params"]
    table = ckpt["state_dict"]["model.pos.table"]
    start = opt["state"][index]["start"]
    assert start.shape == table.shape and 0 < (table - start).abs().max() < 1  # moved, and from there
    assert not any("start" in st for i, st in opt["state"].items() if i != index)
    res = json.loads((out / "results.json").read_text())
    fitted = res["last_train"]
    assert 0 <= fitted["train/top1"] <= 1 and math.isfinite(fitted["train/loss_epoch"])
    assert res["hardware"] == f"1 x {cpu_name()}" != "1 x unknown CPU"  # where its seconds were spent
    assert res["threads"] == torch.get_num_threads() >= 1  # and with how many threads: they set the sums' order
    with (out / "logs" / "metrics.csv").open(newline="") as f:
        logged = [float(row["pos/rms"]) for row in csv.DictReader(f) if row.get("pos/rms")]
    assert len(logged) == res["global_step"]  # one per step (--log-every-n-steps 1)
    # step 0 is logged before the first update: the rms of where the table started; then it moves
    assert logged[0] == pytest.approx(start.square().mean().sqrt().item(), rel=1e-6) != logged[-1]


@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_each_step_logs_the_size_of_the_position_parameters_and_of_their_gradients(name, monkeypatch):
    """pos/rms and pos/grad_rms: the rms over all of the scheme's parameters that have a gradient, whatever the
    scheme; a scheme without parameters logs neither."""
    cfg = tiny_config()
    cfg.model.pos = name
    lit = LitViT(cfg.to_dict())
    lit.model.train()
    lit.model(torch.randn(2, 3, 32, 32)).logsumexp(-1).sum().backward()
    logged = {}
    monkeypatch.setattr(lit, "log", lambda key, value, **kw: logged.__setitem__(key, float(value)))
    lit.on_before_optimizer_step(None)
    params = [p for n, p in lit.model.named_parameters() if n.startswith("pos.") and p.grad is not None]
    if not params:
        assert logged == {}
        return
    n = sum(p.numel() for p in params)
    rms = math.sqrt(sum(p.detach().double().square().sum().item() for p in params) / n)
    grad_rms = math.sqrt(sum(p.grad.double().square().sum().item() for p in params) / n)
    assert logged == pytest.approx({"pos/rms": rms, "pos/grad_rms": grad_rms}, rel=1e-5)
    assert grad_rms > 0


BAD_INPUT = [
    (["--pos", "bogus"], "valid: learned"),
    (["--stem", "bogus"], "valid: patch, conv"),
    (["--data", "bogus"], "valid: shapes"),
    (["--data", "cifar10", "--data-dir", "{tmp}/nowhere"], "nowhere"),
    (["--img-size", "30"], "multiple of the patch size"),
    (["--epochs", "0"], "--epochs must be a positive integer"),
    (["--batch-size", "-4"], "--batch-size must be a positive integer"),
    (["--eval-resolutions", "0"], "positive"),
    (["--resume", "--out", "{tmp}/no_run"], "nothing to resume"),
    (["--config", "{tmp}/missing.yaml"], "config file not found"),
    (["--pos", "rope2d", "--embed-dim", "24", "--num-heads", "4"], "head dim divisible by 4"),
    (["--config", "{tmp}/betas.yaml"], "optim.betas must be a list of 2 numbers, got 0.9"),
    (["--label-smoothing", "2"], "--label-smoothing must be in [0, 1), got 2"),
    (["--pos", "rope2d", "--pos-kwarg", "bogus=1"], "rope2d has no option bogus; its options: theta"),
    (["--pos", "rope2d", "--pos-kwarg", "theta=abc"], "--pos rope2d with --pos-kwarg {'theta': 'abc'}"),
    (["--pos-kwarg", "theta"], "--pos-kwarg expects KEY=VALUE"),
    (["--out", "{tmp}/a_file"], "is a file, not a folder"),
    (["--out", "{tmp}/a_file/run"], "cannot create --out"),
    (["--precision", "bf17-mixed"], "unknown --precision 'bf17-mixed'; valid: 32-true"),
    (["--strategy", "dpp"], "unknown --strategy 'dpp'; valid: auto, ddp"),
    (["--accelerator", "tpu9"], "unknown --accelerator 'tpu9'"),
    (["--data", "imagefolder", "--data-dir", "{tmp}/one_class"], "has one class folder (cat)"),
    (
        ["--data", "imagefolder", "--data-dir", "{tmp}/corrupt", "--verify-images"],
        "2 image(s) cannot be decoded: {tmp}/corrupt/train/cat/bad.png, {tmp}/corrupt/val/dog/bad.jpg",
    ),
    (["--warmup-epochs", "-1"], "--warmup-epochs must be >= 0, got -1"),
    (["--mixup", "-1"], "--mixup must be >= 0, got -1"),
    (["--lr", "inf"], "--lr must be a finite number, got inf"),
    (["--weight-decay", "nan"], "--weight-decay must be a finite number, got nan"),
    (["--lr", "0"], "--lr must be a positive number, got 0"),
    (["--global-pool", "token"], "--global-pool token needs --class-token"),
]


def _bad_input_files(tmp: Path) -> None:
    """The files some BAD_INPUT cases point at."""
    from PIL import Image

    (tmp / "betas.yaml").write_text("optim:\n  betas: 0.9\n")
    (tmp / "a_file").write_text("not a folder")
    for root, classes in ((tmp / "one_class", ["cat"]), (tmp / "corrupt", ["cat", "dog"])):
        for split in ("train", "val"):
            for c in classes:
                (root / split / c).mkdir(parents=True, exist_ok=True)
                Image.new("RGB", (8, 8), 100).save(root / split / c / "ok.png")
    (tmp / "corrupt" / "train" / "cat" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    (tmp / "corrupt" / "val" / "dog" / "bad.jpg").write_bytes(b"")


@pytest.mark.parametrize(("argv", "needle"), BAD_INPUT)
def test_bad_input_is_one_line_and_nonzero(argv, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _bad_input_files(tmp_path)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main([*TINY, *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle.replace("{tmp}", str(tmp_path)) in err and "Traceback" not in err
    assert not list(tmp_path.glob("runs/*"))  # nothing was started


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_gpu_without_a_gpu_is_one_line(tmp_path, capsys):
    assert main(["--accelerator", "gpu", "--out", str(tmp_path / "run"), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "train.py: error: --accelerator gpu: no CUDA GPU is available here; use --accelerator cpu"
    assert not (tmp_path / "run").exists()  # the failed start cleaned up after itself


def test_yaml_numbers_in_exponent_form_are_floats(tmp_path):
    (tmp_path / "c.yaml").write_text("optim:\n  lr: 1e-3\n  weight_decay: 5e-2\n  betas: [0.9, 0.95]\n")
    cfg = config_from_args(build_parser().parse_args(["--config", str(tmp_path / "c.yaml")]))
    assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.optim.betas) == (1e-3, 5e-2, (0.9, 0.95))
    assert isinstance(cfg.optim.lr, float)


def _wrong_value(tp):
    """A YAML value of the wrong type for a field annotated ``tp``."""
    import typing

    base = next(a for a in typing.get_args(tp) if a is not type(None)) if type(None) in typing.get_args(tp) else tp
    if typing.get_origin(base) in (list, tuple, dict):
        return 3
    return {bool: "yes", int: "three", float: "three", str: 3}[base]


def _fields():
    import typing

    from vitpos.config import walk

    return [(name, f.name, typing.get_type_hints(type(section))[f.name]) for name, section, f in walk(Config())]


@pytest.mark.parametrize(("section", "name", "tp"), _fields(), ids=[f"{s}.{n}" for s, n, _ in _fields()])
def test_every_config_field_is_type_checked(section, name, tp, tmp_path):
    (tmp_path / "c.yaml").write_text(f"{section}:\n  {name}: {_wrong_value(tp)!r}\n")
    with pytest.raises(ConfigError, match=rf"config key {section}\.{name}(\[0\])? must be") as e:
        Config.from_yaml(tmp_path / "c.yaml")
    assert "\n" not in str(e.value)


def test_help_lists_every_field_with_its_choices_and_default(capsys):
    from vitpos.cli import choices_of
    from vitpos.config import flag_of, walk

    parser = build_parser()
    actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    for _, _, f in walk(Config()):
        if not f.metadata.get("cli", True):
            assert f.name in ("num_classes", "in_chans")  # set from the data set, never typed
            continue
        action = actions[flag_of(f)]
        assert "(default: " in action.help, flag_of(f)
        for choice in choices_of(f) or ():
            assert choice in action.help, (flag_of(f), choice)
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    text = capsys.readouterr().out
    for needle in ("rope2d+learned", "conv", "fashion-mnist", "bf16-mixed", "ddp", "(default: rope2d)", "--ema"):
        assert needle in text


def test_a_field_without_metadata_still_gets_its_flag():
    """A field added with a plain default (no help, choices or bounds) is on the command line for free."""
    import dataclasses

    from vitpos import cli
    from vitpos import config as config_module

    @dataclasses.dataclass
    class Optim(config_module.OptimConfig):
        brand_new_scale: float = 1.0

    @dataclasses.dataclass
    class Cfg(Config):
        optim: Optim = dataclasses.field(default_factory=Optim)

    real = cli.Config
    try:
        cli.Config = Cfg
        args = cli.build_parser().parse_args(["--brand-new-scale", "0.5"])
    finally:
        cli.Config = real
    assert args.brand_new_scale == 0.5


def test_each_flag_sets_its_field(monkeypatch):
    """Every generated flag reaches its field through train.py's parse-and-resolve path (checks aside)."""
    import typing

    from vitpos import cli
    from vitpos.cli import choices_of
    from vitpos.config import flag_of, walk

    monkeypatch.setattr(cli, "validate", lambda cfg: None)  # the values here are about routing, not sense
    for name, section, f in walk(Config()):
        if not f.metadata.get("cli", True):
            continue
        tp = typing.get_type_hints(type(section))[f.name]
        optional = type(None) in typing.get_args(tp)
        base = next(a for a in typing.get_args(tp) if a is not type(None)) if optional else tp
        default, flag = getattr(section, f.name), flag_of(f)
        if base is bool:
            argv, expect = ([f"--no-{flag[2:]}"], False) if default else ([flag], True)
        elif typing.get_origin(base) is dict:
            argv, expect = [flag, "theta=7", flag, "mode=x"], {"theta": 7, "mode": "x"}
        elif typing.get_origin(base) is list:
            argv, expect = [flag, "32", "48"], [32, 48]
        elif typing.get_origin(base) is tuple:
            argv, expect = [flag, "0.8", "0.9"], (0.8, 0.9)
        elif choices_of(f):
            argv, expect = [flag, choices_of(f)[-1]], choices_of(f)[-1]
        else:
            text = {int: "3", float: "0.5", str: "x"}[base]
            argv, expect = [flag, text], base(text)
        cfg = cli.config_from_args(build_parser().parse_args(argv))
        assert getattr(getattr(cfg, name), f.name) == expect, (name, f.name)


@pytest.mark.cli
def test_bad_input_from_the_shell_has_no_traceback(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "train.py"), "--pos", "bogus"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)  # fmt: skip
    assert r.returncode == 2
    assert r.stderr.strip().startswith("train.py: error: unknown --pos 'bogus'")
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_every_shipped_config_parses_and_builds_its_model():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        cfg = Config.from_yaml(path)
        cfg.model.depth = 1  # the build is what is checked, not the size
        model = model_from_config(cfg)
        assert model.grid == (cfg.model.img_size // cfg.model.patch_size,) * 2, path.name
