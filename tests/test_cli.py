"""One declaration per setting: train.py, python -m vitpos.evaluate and python -m vitpos.data.shard take the flags they
share from the same config fields, with the same names, help, choices and checks."""

from __future__ import annotations

import argparse

import pytest

from vitpos.cli import build_parser, given_fields
from vitpos.data import shard
from vitpos.errors import ConfigError
from vitpos.evaluate import __main__ as evaluate

SHARED = {"evaluate": (evaluate.build_parser, (*evaluate.DATA_FLAGS, *evaluate.DEVICE_FLAGS, "model.init_arch")),
          "shard": (shard.build_parser, ("data.name", *shard.CONFIG_FLAGS))}  # fmt: skip


def actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS}


@pytest.mark.parametrize("command", SHARED)
def test_a_shared_flag_is_declared_as_train_declares_it(command):
    make, names = SHARED[command]
    train, other = actions(build_parser()), actions(make())
    for name in names:
        field = name.split(".")[1]
        a, b = train[field], other[field]
        assert a.option_strings == b.option_strings, name  # one name per setting
        shape = [(getattr(x.type, "__name__", x.type), x.nargs, x.choices, x.metavar, type(x)) for x in (a, b)]
        assert shape[0] == shape[1], name
        text = a.help.split(" (default:")[0]
        assert b.help.startswith(text), (name, a.help, b.help)


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--crop-ratio", "0"], "--crop-ratio must be in (0, 1]"), (["--batch-size", "0"], "--batch-size must be a"),
     (["--data", "nowhere"], "unknown --data 'nowhere'"), (["--strategy", "dpp"], "unknown --strategy 'dpp'"),
     (["--precision", "bf17"], "unknown --precision 'bf17'"), (["--num-workers", "-1"], "--num-workers must be >= 0")],
)  # fmt: skip
def test_a_shared_flag_is_checked_as_train_checks_it(argv, message):
    args = evaluate.build_parser().parse_args(["--resolutions", "32", *argv])
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        given_fields(args, (*evaluate.DATA_FLAGS, *evaluate.DEVICE_FLAGS))


def test_an_absent_flag_keeps_the_checkpoints_setting_and_the_old_spellings_still_parse():
    parse = evaluate.build_parser().parse_args
    assert given_fields(parse(["--resolutions", "32"]), evaluate.DATA_FLAGS) == {}
    old = given_fields(parse(["--resolutions", "32", "--resize", "full", "--data-name", "digits"]), evaluate.DATA_FLAGS)
    new = given_fields(parse(["--resolutions", "32", "--eval-resize", "full", "--data", "digits"]), evaluate.DATA_FLAGS)
    assert old == new == {"data.name": "digits", "data.eval_resize": "full"}


def test_shard_takes_the_data_sets_sizes_and_seed_from_the_config_fields():
    args = shard.build_parser().parse_args(["--data", "shapes", "--out", "x", "--train-size", "64", "--seed", "3"])
    assert given_fields(args, ("data.name", *shard.CONFIG_FLAGS)) == {
        "data.name": "shapes", "data.train_size": 64, "trainer.seed": 3}  # fmt: skip
