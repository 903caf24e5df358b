"""The summary and protocol pages: numbers and structure come from the JSON alone (test split, the validation-chosen
method), the decision guide's verdicts are the statistics module's, and the README's table is the page's."""

from __future__ import annotations

import json
import math
import re

import pytest
import scipy.stats
import torch
from helpers import ROOT, tables

import vitpos
from benchmarks import stats
from benchmarks.pages import __main__ as pages
from benchmarks.pages import augmentation, common, frontier, multires, protocol, real_data, summary

SEEDS = [0, 1, 2]
# test top-1 per (scheme, method, regime, size) and seed
TOP1 = {
    ("rope2d", "extrapolate", "zoom", 32): [0.99, 0.98, 0.99],
    ("rope2d", "interpolate", "zoom", 32): [0.99, 0.98, 0.99],
    ("rope2d", "extrapolate", "zoom", 64): [0.20, 0.25, 0.22],
    ("rope2d", "interpolate", "zoom", 64): [0.60, 0.70, 0.65],
    ("rope2d", "interpolate", "canvas", 64): [0.40, 0.45, 0.50],
    ("rope2d", "extrapolate", "canvas", 64): [0.30, 0.31, 0.32],
    ("learned", "bicubic", "zoom", 32): [0.97, 0.96, 0.98],
    ("learned", "bicubic", "zoom", 64): [0.50, 0.52, 0.49],
    ("learned", "bicubic", "canvas", 64): [0.70, 0.72, 0.75],
}


def study_json() -> dict:
    records = [{"scheme": s, "stem": "patch", "method": m, "regime": g, "resolution": r, "split": "test", "seed": k,
                "top1": v, "pool": "all", "logit_scaling": "none", "hardware": "1 x CPU", "device": "cpu",
                "commit": "abc", "torch": "2.x"}
               for (s, m, g, r), vals in TOP1.items() for k, v in zip(SEEDS, vals, strict=True)]  # fmt: skip
    # a validation record and a control record must never reach a cell
    records.append(records[0] | {"split": "val", "resolution": 64, "top1": 1.0})
    records.append(records[0] | {"pool": "scene", "resolution": 64, "top1": 1.0})
    runs = [{"spec": f"{s}:patch", "seed": k, "run": f"runs/{s}-{k}", "hardware": "1 x CPU", "device": "cpu",
             "commit": "abc", "torch": "2.x"} for s in ("learned", "rope2d") for k in SEEDS]  # fmt: skip
    choices = {"rope2d:patch": {"method": "interpolate", "val_mean": {"interpolate": 0.6, "extrapolate": 0.3},
                                "cells": 6},
               "learned:patch": {"method": "bicubic", "val_mean": {"bicubic": 0.5}, "cells": 3}}  # fmt: skip
    return {"command": "python -m benchmarks.study", "budget": {"img_size": 32, "patch_size": 4}, "seeds": SEEDS,
            "sizes": ["32", "64"], "runs": runs, "choices": choices, "records": records}  # fmt: skip


def test_cells_are_test_means_of_the_chosen_method_only():
    s = summary.Study(study_json())
    assert summary.cell(list(s.values("rope2d:patch", ("zoom", 2.0)).values())).startswith("65.0 ±")
    assert list(s.values("rope2d:patch", ("canvas", 2.0)).values()) == [0.40, 0.45, 0.50]
    row = s.row("rope2d:patch", summary.COLUMNS)
    assert row[0] == "`rope2d`" and row[2] == "`interpolate`"
    assert s.specs == ["learned:patch", "rope2d:patch"]  # main runs in their order


def test_the_figure_sets_the_choice_against_the_best_on_test_over_the_cells_every_method_has():
    data = study_json()
    s = summary.Study(data)
    assert summary.hindsight_best(s, "rope2d:patch") == "interpolate"  # 0.55 pooled against 0.26
    assert summary.hindsight_line(s).endswith("for 1 of the 1 schemes with more than one method.")  # learned: one
    # extrapolate ahead on test at 64 px; a far cell that one method alone has (a low 4x) must not tip it
    for r in data["records"]:
        if r["scheme"] == "rope2d" and r["resolution"] == 64 and r["split"] == "test" and r["pool"] == "all":
            r["top1"] = {"interpolate": 0.5, "extrapolate": 0.52}[r["method"]]
    data["records"].append(data["records"][0] | {"method": "extrapolate", "resolution": 128, "top1": 0.0})
    s = summary.Study(data)
    assert summary.hindsight_best(s, "rope2d:patch") == "extrapolate"
    assert "another is best for `rope2d` (`extrapolate` over the chosen `interpolate`)" in summary.hindsight_line(s)


def test_guide_lines_carry_the_paired_holm_corrected_difference():
    s = summary.Study(study_json())
    lines = summary.guide(s)
    assert len(lines) <= 8
    zoom2 = next(line for line in lines if "2x (zoom)" in line)
    assert "`rope2d` with `interpolate`" in zoom2
    diffs = []
    for column in [("zoom", 1.0), ("zoom", 2.0), ("canvas", 2.0)]:  # the decision guide's columns with data, in order
        means = {k: sum(v.values()) / 3 for k in s.specs if (v := s.values(k, column))}
        best, runner = sorted(means, key=lambda k: -means[k])
        diffs.append(stats.paired(list(s.values(best, column).values()), list(s.values(runner, column).values())))
    expected = stats.holm(diffs)[1]
    assert f"{100 * expected.diff:+.1f} [{100 * expected.low:+.1f}, {100 * expected.high:+.1f}]" in zoom2
    assert f"Holm p = {expected.p_holm:.3g}" in zoom2
    canvas2 = next(line for line in lines if "2x (canvas)" in line)
    assert "`learned` with `bicubic`" in canvas2
    data = study_json()  # a third scheme, one seed, far above the rest at 2x: not ranked while others have seeds
    data["runs"].append({"spec": "relbias:patch", "seed": 0, "run": "runs/relbias-0"})
    data["choices"]["relbias:patch"] = {"method": "resize"}
    one = {"scheme": "relbias", "method": "resize", "resolution": 64, "top1": 1.0}
    data["records"].append(data["records"][0] | one)
    zoom2 = next(line for line in summary.guide(summary.Study(data)) if "2x (zoom)" in line)
    assert "`rope2d` with `interpolate`" in zoom2


def test_summary_page_has_its_table_figure_and_missing_columns(tmp_path):
    page, block = summary.render(study_json(), tmp_path)
    assert (tmp_path / "summary.png").stat().st_size > 0
    assert (
        "Columns not swept yet: zoom 0.75x, zoom 1.5x, zoom 4x, canvas 1.5x, canvas 4x, fine-tuned 2x, Fashion-MNIST."
        in page
    )
    rows = [ln for ln in page.splitlines() if ln.startswith("| `")]
    assert len(rows) == 2 and len(rows[0].split("|")) == len(summary.COLUMNS) + 4  # + scheme, method, two edges
    assert block.splitlines()[0].startswith("| scheme | 1x | method (val) | zoom 2x | zoom 4x | canvas 2x")
    assert "commit abc" in page
    data = study_json() | {"far": ["128"]}  # 4x swept apart, with the chosen method
    page, _ = summary.render(data, tmp_path)
    assert (
        "Columns not swept yet: zoom 0.75x, zoom 1.5x, zoom 4x, canvas 1.5x, canvas 4x, fine-tuned 2x, Fashion-MNIST."
        in page
    )
    data["records"] += [r | {"resolution": 128} for r in data["records"] if r["resolution"] == 64]
    page, _ = summary.render(data, tmp_path)
    assert "Columns not swept yet: zoom 0.75x, zoom 1.5x, canvas 1.5x, fine-tuned 2x, Fashion-MNIST." in page
    assert "Sizes swept: 32, 64 px; 128 px on test with the chosen method only." in page


TINY = dict(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)


@pytest.mark.parametrize("pos", vitpos.POS_SCHEMES)
def test_fine_tuning_starts_where_the_named_method_serves_the_new_grid(pos):
    """What the summary says a fine-tuning run starts from is what it starts from: the model carried to a new grid
    serves it exactly as the named method serves it without fine-tuning (the whole model's logits); a scheme that
    carries its parameters by its chosen method is not named."""
    from vitpos.pretrained import transfer_weights

    method = summary.rebuilt_start(f"{pos}:patch")
    if method is None:
        assert not vitpos.create_model(pos, **TINY).pos.serves_by_method
        return
    torch.manual_seed(0)
    old = vitpos.create_model(pos, **TINY).eval()
    with torch.no_grad():
        for p in old.parameters():  # weights that make position visible in the logits
            p.add_(0.3 * torch.randn_like(p))
    new = vitpos.create_model(pos, **(TINY | {"img_size": 2 * TINY["img_size"]})).eval()
    transfer_weights(old, new)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        start = new(x)
        old.pos.method = method
        torch.testing.assert_close(old(x), start)
        others = [m for m in old.pos.methods if m != method]
        for m in others:
            old.pos.method = m
            assert not torch.allclose(old(x), start, atol=1e-4), m


def test_the_fine_tuned_column_and_guide_line_read_the_fine_tuned_runs_only(tmp_path):
    data = study_json() | {"finetune": ["64"], "finetune_recipe": ["--epochs", "1"]}
    data["finetuned"] = [{"spec": f"{s}:patch", "seed": k, "size": 64, "top1": v, "commit": "ft1"}
                         for s, vals in (("rope2d", [0.90, 0.92, 0.94]), ("learned", [0.80, 0.81, 0.83]))
                         for k, v in zip(SEEDS, vals, strict=True)]  # fmt: skip
    s = summary.Study(data)
    assert s.values("rope2d:patch", ("finetune", 2.0)) == {0: 0.90, 1: 0.92, 2: 0.94}
    assert s.values("rope2d:patch", ("zoom", 2.0)) == {0: 0.60, 1: 0.70, 2: 0.65}  # the direct cell is untouched
    at = 2 + summary.COLUMNS.index(("finetune", 2.0))  # a row: scheme, 1x, method, then the other columns
    assert s.row("rope2d:patch", summary.COLUMNS)[at].startswith("92.0 ±")
    line = next(ln for ln in summary.guide(s) if "fine-tuning" in ln)
    diffs = []
    for column in [("zoom", 1.0), ("zoom", 2.0), ("canvas", 2.0), ("finetune", 2.0)]:  # the decision guide's, with data
        means = {k: sum(v.values()) / 3 for k in s.specs if (v := s.values(k, column))}
        best, runner = sorted(means, key=lambda k: -means[k])
        diffs.append(stats.paired(list(s.values(best, column).values()), list(s.values(runner, column).values())))
    d = stats.holm(diffs)[3]
    assert line.startswith("- **To serve 2x after one epoch of fine-tuning there**: `rope2d`")
    assert f"{100 * d.diff:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}] points over `learned`" in line
    assert f"Holm p = {d.p_holm:.3g}" in line
    page, block = summary.render(data, tmp_path)
    assert "fine-tuned 2x" not in page.split("Columns not swept yet")[-1].split(".")[0]
    assert "seeds fine-tuned per scheme: `learned` 3, `rope2d` 3." in page and "--init-from ... --epochs 1" in page
    assert "- fine-tuning runs: ? (?), torch ?, commit ft1, threads not recorded" in page  # where they trained
    assert "not start from the method validation chose: `rope2d` starts as `extrapolate` serves the new grid." in page
    assert block.splitlines()[0].endswith("| fine-tuned 2x | Fashion-MNIST |")
    # the README's note is the short form: seeds per scheme and per column, the detail left to the page
    assert "fine-tuned: one epoch at 64 px, 3 seeds" in block and "Seeds trained per scheme" not in block
    assert summary.span([3, 5, 5]) == "3-5" and summary.span([5, 5]) == "5"


def test_the_fashion_mnist_column_is_its_study_at_the_native_size_under_its_own_chosen_method(tmp_path):
    fm = {"budget": {"img_size": 16}, "sizes": ["20", "28"],
          "runs": [{"spec": "rope2d:patch", "seed": k} for k in SEEDS],
          "choices": {"rope2d:patch": {"method": "extrapolate"}},
          "records": [{"scheme": "rope2d", "stem": "patch", "method": m, "regime": g, "resolution": r, "split": sp,
                       "seed": k, "top1": v + 0.01 * k}
                      for m, g, r, sp, v in (("extrapolate", "zoom", 28, "test", 0.80), ("interpolate", "zoom", 28,
                                             "test", 0.10), ("extrapolate", "canvas", 28, "test", 0.30),
                                             ("extrapolate", "zoom", 20, "test", 0.50),
                                             ("extrapolate", "zoom", 28, "val", 0.99),
                                             ("extrapolate", "zoom", 56, "test", 0.05))  # a --far size: upsampled
                      for k in SEEDS]}  # fmt: skip
    s = summary.Study(study_json(), fmnist=fm)
    assert s.values("rope2d:patch", ("fmnist", "native")) == {k: 0.80 + 0.01 * k for k in SEEDS}  # test, zoom, 28 px
    assert s.values("learned:patch", ("fmnist", "native")) == {}
    assert s.row("rope2d:patch", summary.COLUMNS)[-1].startswith("81.0 ±")
    line = next(ln for ln in summary.guide(s) if "real data" in ln)  # its own chosen method, alone in its column
    assert line.startswith("- **On real data (Fashion-MNIST trained at 16 px, served at its native 28 px)**: `rope2d`")
    assert "with `extrapolate`, 81.0 ±" in line and "(the only scheme measured)" in line
    page, _ = summary.render(study_json(), tmp_path, fmnist=fm)
    assert "Fashion-MNIST: trained at 16 px (downsampled), tested at its native 28 px" in page
    assert "(docs/fashion_mnist_study.json); seeds per scheme: `rope2d` 3." in page
    assert "Fashion-MNIST" not in page.split("Columns not swept yet")[-1].split(".")[0]
    page, _ = summary.render(study_json(), tmp_path)
    assert "Fashion-MNIST." in page.split("Columns not swept yet")[-1]  # no study on it yet: named as missing


def test_what_the_tables_leave_out_is_listed_with_the_trainings_it_needs_and_their_time():
    fm = {"budget": {"img_size": 16}, "sizes": ["28"], "choices": {"rope2d:patch": {"method": "extrapolate"}},
          "command": "python -m benchmarks.study --config c.yaml --seeds 0 1 --no-train --runs rope2d:patch --json f",
          "runs": [{"spec": "rope2d:patch", "seed": k, "train_seconds": 600.0, "hardware": "1 x CPU"} for k in (0, 1)],
          "records": [{"scheme": "rope2d", "stem": "patch", "method": "extrapolate", "regime": "zoom", "resolution": 28,
                       "split": "test", "seed": k, "top1": 0.8} for k in (0, 1)]}  # fmt: skip
    data = study_json() | {"seeds": [0, 1, 2]}
    text = summary.not_measured(summary.Study(data, fmnist=fm), fm)
    assert ("- **Fashion-MNIST for `learned`**: 2 trainings (2 seeds each, as the column's other rows), about 20 min "
            "of training on 1 x CPU (its runs took 10 min each): `python -m benchmarks.study --runs learned:patch "
            "--seeds 0 1 --config c.yaml --json f`.") in text  # fmt: skip
    assert "- **Fashion-MNIST at the 3 seeds `shapes` has**: `rope2d` have 2; 1 more training, about 10 min" in text
    assert "Fine-tuned" not in text  # no row is fine-tuned: a column not swept, named above the table instead
    full = fm | {"runs": fm["runs"] + [r | {"spec": "learned:patch"} for r in fm["runs"]],
                 "records": fm["records"] + [r | {"scheme": "learned"} for r in fm["records"]],
                 "choices": fm["choices"] | {"learned:patch": {"method": "extrapolate"}}}  # fmt: skip
    whole = study_json() | {"seeds": [0, 1]}
    assert summary.not_measured(summary.Study(whole, fmnist=full), full).startswith("Every row has every")


def test_readme_block_is_replaced_between_the_markers_only():
    text = f"intro\n{pages.START}\nold table\n{pages.END}\noutro\n"
    assert pages.readme_with("new", text) == f"intro\n{pages.START}\nnew\n{pages.END}\noutro\n"
    with pytest.raises(SystemExit, match="markers"):
        pages.readme_with("new", "no markers here")


def test_the_readme_table_is_the_one_rendered_from_docs_study_json(tmp_path):
    data = json.loads((ROOT / "docs" / "study.json").read_text())
    _, block = pages.summary_page(ROOT / "docs", data, tmp_path)  # as `python -m benchmarks.pages` renders it
    readme = (ROOT / "README.md").read_text()
    between = readme.split(pages.START)[1].split(pages.END)[0].strip()
    assert between == block.strip()
    assert not re.search(r"\d+\.\d ?%", readme.split(pages.START)[0]), "hand-copied numbers above the table"


def regime_record(test_methods: tuple[str, ...]) -> dict:
    """rope2d at 3 seeds: over both regimes validation picks `interpolate`; within zoom alone it picks `yarn`."""
    val = {("zoom", "interpolate"): 0.60, ("zoom", "yarn"): 0.70, ("canvas", "interpolate"): 0.60,
           ("canvas", "yarn"): 0.30}  # fmt: skip
    records = []
    for (regime, method), v in val.items():
        for k in SEEDS:
            base = {"scheme": "rope2d", "stem": "patch", "method": method, "regime": regime, "resolution": 64,
                    "seed": k}  # fmt: skip
            records.append(base | {"split": "val", "top1": v + 0.01 * k})
            if method in test_methods:  # on test, yarn is 5 points above interpolate under zoom, seed for seed
                records.append(base | {"split": "test", "top1": v - 0.05 * (method == "interpolate") + 0.02 * k})
                records.append(base | {"split": "test", "top1": 0.0, "control": "logn"})  # never read
    choices = {"rope2d:patch": {"method": "interpolate", "val_mean": {"interpolate": 0.6, "yarn": 0.5}, "cells": 6}}
    return {"budget": {"img_size": 32}, "choices": choices, "records": records}


def test_regime_split_names_a_pick_the_pooled_choice_hides_and_checks_it_on_test():
    text = protocol.regime_split({"study": regime_record(("interpolate", "yarn"))})
    row = next(r for r in tables(text)[0] if r[0] == "`rope2d:patch`")
    assert row == ["`rope2d:patch`", "zoom", "`interpolate`", "`yarn`", "+10.0", "3", "+15.0 [+15.0, +15.0] *"]
    assert len(tables(text)[0]) == 2  # canvas agrees with the pooled pick: no row
    only = protocol.regime_split({"study": regime_record(("interpolate",))})
    assert tables(only)[0][1][-2:] == ["—", "— (test swept with the pooled pick only)"]
    agreeing = regime_record(("interpolate", "yarn"))
    agreeing["records"] = [r for r in agreeing["records"] if r["regime"] == "canvas"]
    assert protocol.regime_split({"study": agreeing}).startswith("Within each regime, validation picks the method")
    agreeing["records"] = [r for r in agreeing["records"] if r["split"] == "test"]
    assert protocol.regime_split({"study": agreeing}) == "No validation sweep per regime to compare yet."


def test_protocol_page_states_the_rule_and_the_methods_chosen_on_validation():
    proto = json.loads((ROOT / "docs" / "protocol.json").read_text())
    page = protocol.render(proto, {"study": study_json()})
    assert "## The position rule: lr x30, decay 0.3 towards start, ramped in over 5 epochs" in page
    row = "| `rope2d:patch` | `interpolate` | `interpolate` | extrapolate 30.0, interpolate 60.0 | +30.0 | 6 | 1 | "
    assert f"{row}docs/study.json |" in page
    family = [t for t in proto["rule"]["comparisons"] if t["rule"] == proto["rule"]["chosen"]]
    assert sum(line.startswith("| lr x") for line in page.splitlines()) == len(family)  # one row per comparison
    assert all("holm" in t for t in family) and " (chosen) |" in page  # intervals; every voting run, per rule
    runs = [{"spec": "rope2d+peg:patch", "seed": k, "best_val_top1": 0.9 + k / 10} for k in (0, 1)]
    runs += [{"spec": "rope2d:patch", "seed": 0, "best_val_top1": 0.5}]
    assert protocol.studied_seeds(["rope2d+peg:patch", "relbias+peg:patch"], {"runs": runs}, None, {"runs": runs}) == (
        "`rope2d+peg:patch` 2 (mean validation top-1 95.0 %), `relbias+peg:patch` none"
    )  # a seed in two records counts once


def test_a_default_that_differs_from_validations_choice_is_numbered_with_its_reason(monkeypatch):
    monkeypatch.setattr(protocol, "DEFAULT_EXCEPTIONS", {"fire:patch": ("extrapolate", "a reason")})
    front = {"choices": {
        "string:patch": {"method": "interpolate", "val_mean": {"yarn": 0.6, "interpolate": 0.7}, "cells": 3},
        "fire:patch": {"method": "extrapolate", "val_mean": {"extrapolate": 0.6}, "cells": 3}}}  # fmt: skip
    text = protocol.method_table({"study": study_json(), "frontier": front})
    assert "| `fire:patch` | `extrapolate` | `progressive` (1) |" in text
    assert "| `string:patch` | `interpolate` | `yarn` (2) |" in text
    assert "(1) `fire:patch`: a reason." in text
    assert "(2) `string:patch`: no reason recorded." in text
    assert "| `rope2d:patch` | `interpolate` | `interpolate` |" in text


def test_a_choice_won_by_less_than_a_point_is_named_as_not_settled_with_its_seeds():
    val = [{"scheme": "string", "stem": "patch", "split": "val", "seed": k} for k in (0, 1)]
    string = {"method": "yarn", "val_mean": {"yarn": 0.604, "interpolate": 0.6, "ntk": 0.5}, "cells": 10}
    fire = {"method": "progressive", "val_mean": {"progressive": 0.7, "extrapolate": 0.6}, "cells": 5}
    front = {"records": val, "choices": {"string:patch": string, "fire:patch": fire}}
    text = protocol.method_table({"frontier": front})
    assert "| `string:patch` | `yarn` | `yarn` | interpolate 60.0, ntk 50.0, yarn 60.4 | +0.4 | 10 | 2 |" in text
    fire_row = "| `fire:patch` | `progressive` | `progressive` | extrapolate 60.0, progressive 70.0 | +10.0 | 5 | 0 |"
    assert fire_row in text
    note = text.split("Chosen by less than 1 point over the next method: ")[1].split(". ")[0]
    assert note == "`string:patch` +0.4 (2 seeds)"  # fire's margin is ten points


def test_a_scheme_no_study_has_swept_is_listed_as_not_chosen_on_validation():
    """Every registry scheme with more than one method is either in a study's choices or in the "not chosen" list,
    with its default; a scheme with one method has nothing to choose."""
    from vitpos.pos import POS_SCHEMES

    text = protocol.method_table({"study": study_json()})  # rope2d and learned chosen
    unchosen = text.split("not a measured choice")[1]
    listed = {line.split(" | ")[0].strip("| `") for line in unchosen.splitlines() if line.startswith("| `")}
    several = {pos for pos in POS_SCHEMES if len(protocol.methods_of(f"{pos}:patch")[1]) > 1}
    assert listed == several - {"rope2d"}
    assert "| `sincos2d` | `interpolate` | `interpolate`, `extrapolate` |" in unchosen
    assert "`learned`" not in unchosen and "`none`" not in unchosen  # one method each


def test_the_larger_validation_sweep_chooses_a_scheme_two_records_sweep():
    small = {"choices": {"string:patch": {"method": "yarn", "val_mean": {}, "cells": 15}}}
    large = {"choices": {"string:patch": {"method": "interpolate", "val_mean": {}, "cells": 25}}}
    assert protocol.chosen_methods({"frontier": small, "others": large})["string:patch"][1] == "others"
    assert protocol.chosen_methods({"frontier": small, "others": small})["string:patch"][1] == "frontier"  # a tie


def test_every_schemes_default_transfer_method_is_the_one_validation_chose():
    """The studies' choices (docs/study.json and the other records the protocol page reads; made on validation) are
    what vitpos serves a new grid with by default, but for a named exception, which holds only while validation still
    chooses what it names and its reason is true: a method that cannot be exported as one dynamic file."""
    from vitpos.export import NotDynamic, export_program

    docs = {n: ROOT / "docs" / f"{n}.json" for n in protocol.METHOD_RECORDS}
    records = {n: json.loads(p.read_text()) for n, p in docs.items() if p.is_file()}
    choices = {spec: c for spec, (c, _) in protocol.chosen_methods(records).items()}
    assert {"study", "claims", "frontier"} <= set(records) and len(choices) >= 13
    for spec, c in choices.items():
        if spec in protocol.DEFAULT_EXCEPTIONS:
            assert protocol.DEFAULT_EXCEPTIONS[spec][0] == c["method"] != protocol.default_method(spec)
            pos, _, stem = spec.partition(":")
            model = vitpos.create_model(pos, stem=stem, img_size=16, patch_size=4, embed_dim=16, depth=1, num_heads=2)
            model.pos.method = c["method"]
            with pytest.raises(NotDynamic):
                export_program(model.folded().eval())
        else:
            assert protocol.default_method(spec) == c["method"], spec


def test_controls_table_gives_each_controls_paired_difference_from_the_canvas_cell():
    data = study_json()
    base = TOP1[("rope2d", "interpolate", "canvas", 64)]
    data["records"] += [{"scheme": "rope2d", "stem": "patch", "method": "interpolate", "regime": "canvas",
                         "resolution": 64, "split": "test", "seed": k, "top1": v + 0.1, "control": "scene",
                         "pool": "scene", "logit_scaling": "none"}
                        for k, v in zip(SEEDS, base, strict=True)]  # fmt: skip
    data["records"] += [r | {"method": "extrapolate", "top1": 0.0} for r in data["records"] if r.get("control")]
    s = summary.Study(data)  # the controls of another method than the chosen one (an earlier choice) are not read
    assert list(s.values("rope2d:patch", ("canvas", 2.0)).values()) == base  # controls never reach the cells
    text = summary.controls(s)
    row = next(ln for ln in text.splitlines() if ln.startswith("| `rope2d`"))
    assert "+10.0 [+10.0, +10.0] *" in row and row.endswith("| — | — | — |")
    # log-n logits: a difference from the canvas cell (+50), and what they leave of the fall from 1x: canvas + 0.5
    # = (0.90, 0.95, 1.00) against 1x's (0.99, 0.98, 0.99), paired: -3.7, not separated
    data["records"] += [
        r | {"control": "logn", "pool": "all", "logit_scaling": "logn", "top1": r["top1"] + 0.4}
        for r in data["records"]
        if r.get("control") == "scene" and r["method"] == "interpolate"
    ]
    text = summary.controls(summary.Study(data))
    row = next(ln for ln in text.splitlines() if ln.startswith("| `rope2d`"))
    assert row.endswith("| +50.0 [+50.0, +50.0] * | — | -3.7 [-25.9, +18.6] |"), row
    assert "pool the scene only for 1 of 1 (+10.0 points); log-n logits for 1 of 1 (+50.0 points)." in text
    assert "What log-n logits leave of the fall from 1x runs from -3.7 points (`rope2d`)" in text
    assert summary.controls(summary.Study(study_json())) == "No control is measured yet."


def test_shuffle_table_gives_each_schemes_drop_with_its_interval_over_seeds():
    data = study_json()
    data["shuffle"] = [{"spec": spec, "seed": k, "top1": 0.9, "top1_shuffled": 0.9 - d, "drop": d}
                       for spec, d in (("rope2d:patch", 0.6), ("learned:patch", 0.0)) for k in SEEDS]  # fmt: skip
    text = summary.shuffle_table(summary.Study(data))
    rope = next(ln for ln in text.splitlines() if ln.startswith("| `rope2d`"))
    blind = next(ln for ln in text.splitlines() if ln.startswith("| `learned`"))
    assert "| 30.0 ±0.0 | +60.0 [+60.0, +60.0] |" in rope and "+0.0 [+0.0, +0.0]" in blind
    assert summary.shuffle_table(summary.Study(study_json())) == "Not measured yet."


def test_entropy_table_is_the_fraction_of_uniform_per_column():
    data = study_json()
    data["entropy"] = [{"spec": "rope2d:patch", "seed": k, "regime": "zoom", "resolution": 64, "log_n": 2.0,
                        "entropy": [[1.0, 1.2], [1.4, 1.6]]} for k in SEEDS]  # fmt: skip
    text = summary.entropy_table(summary.Study(data))
    row = next(ln for ln in text.splitlines() if ln.startswith("| `rope2d`"))
    assert row == "| `rope2d` | — | 0.65 | — | — | — |"  # mean 1.3 / log N 2
    assert summary.entropy_table(summary.Study(study_json())) == "Not measured yet."


def test_reruns_table_sets_each_run_of_two_records_side_by_side_and_names_both_machines_and_commits():
    data = study_json()
    data["budget"] |= {"rule_pos_lr_scale": 30.0, "rule_pos_weight_decay": 0.3, "rule_pos_decay_to": "start",
                       "rule_pos_lr_warmup_epochs": 5.0}  # fmt: skip
    data["runs"][0] |= {"test_top1": 0.976, "pos_params": True, "commit": "aaa"}  # learned seed 0 on "1 x CPU"
    rule = {"pos_lr_scale": 30.0, "pos_weight_decay": 0.3, "pos_decay_to": "start", "pos_lr_warmup_epochs": 5.0}
    other = {
        "runs": [
            {"spec": "learned:patch", "seed": 0, **rule, "test_top1": 0.978, "hardware": "1 x AMD", "commit": "bbb"},
            {"spec": "learned:patch", "seed": 0, **rule, "pos_lr_scale": 1.0, "test_top1": 0.3},  # another rule
            {"spec": "learned:patch", "seed": 0, **rule, "test_top1": 0.1, "pos_kwargs": {"x": 1}},  # options
        ]
    }
    again = {"budget": data["budget"], "runs": [data["runs"][0] | {"test_top1": 0.97, "commit": "ccc"}]}  # a study
    text = summary.reruns([("study", data, "rules", other), ("study", data, "others", again)])
    rows = [ln for ln in text.splitlines() if ln.startswith("| `learned`")]
    assert rows == [
        "| `learned` | 0 | 97.6 (study) | 97.8 (rules) | +0.2 | 1 x CPU, aaa | 1 x AMD, bbb |",
        "| `learned` | 0 | 97.6 (study) | 97.0 (others) | -0.6 | 1 x CPU, aaa | 1 x CPU, ccc |",
    ]
    assert summary.reruns([("study", data, "others", None)]) == "No run is in two records."
    # a record that reuses the study's own checkpoint holds the same run, not a rerun of it
    data["runs"][0]["ckpt_sha256"] = "f00d"
    reused = {"budget": data["budget"], "runs": [data["runs"][0] | {"commit": "aaa"}]}
    text = summary.reruns([("study", data, "rules", reused), ("study", data, "others", again)])
    assert text.endswith(
        "\n\n1 run of the study record is the rules record's own (the same checkpoint): no rerun to compare."
    )
    assert [ln for ln in text.splitlines() if "`learned`" in ln] == [rows[1]]  # only the real rerun is set out


def test_the_second_tables_fashion_mnist_words_follow_which_rows_have_a_cell():
    held = ["string:patch", "rope2d+peg:patch"]
    assert summary.real_words(held, []) == "they are not trained on Fashion-MNIST (—)"
    assert summary.real_words(held, held).startswith("their Fashion-MNIST cells come from docs/fashion_mnist_study")
    assert summary.real_words(held, held[:1]).endswith(": `string` only (—: the others)")


def test_same_checkpoint_needs_a_recorded_hash_on_both_sides():
    assert common.same_checkpoint({"ckpt_sha256": "f00d"}, {"ckpt_sha256": "f00d"})
    assert not common.same_checkpoint({"ckpt_sha256": "f00d"}, {"ckpt_sha256": "beef"})
    assert not common.same_checkpoint({}, {})  # two runs that record no hash are not known to be one
    assert not common.same_checkpoint({"ckpt_sha256": None}, {"ckpt_sha256": None})


def test_same_kind_reruns_count_exact_agreement_and_leave_other_machines_to_the_other_table():
    def row(spec, old, new, w, hardware="1 x CPU"):
        return {"spec": spec, "seed": 0, "study": "docs/study.json", "max_weight_difference": w,
                "config_differences": [],
                "recorded": {"test_top1": old, "commit": "aaa", "hardware": "1 x CPU"},
                "rerun": {"test_top1": new, "commit": "bbb", "hardware": hardware}}  # fmt: skip

    reran = {"command": "python -m benchmarks.rerun", "reruns": [row("rope2d:patch", 0.9915, 0.9915, 0.0)]}
    text = summary.same_kind_reruns(reran)
    assert text.startswith("1 of 1 reruns on the same kind of machine give the recorded test top-1 exactly, and 1 of "
                           "the 1 whose recorded checkpoint is still at hand end")  # fmt: skip
    assert (
        "| docs/study.json | `rope2d` | 0 | 99.2 (aaa) | 99.2 (bbb) | +0.0 | — | none | 0 (bit for bit) | 1 x CPU |"
        in text
    )
    assert "Made by `python -m benchmarks.rerun`." in text  # a row without its own command: the record's
    reran["reruns"] += [row("learned:patch", 0.976, 0.971, 3e-4), row("relbias:patch", 0.9, 0.5, 1.0, "1 x GPU")]
    # a later command's row, its old checkpoint gone: no weights compared, its validation difference shown
    later = row("sincos2d:patch", 0.95, 0.95, None) | {
        "command": "python -m benchmarks.rerun --study abc:x.json",
        "study": "abc:docs/x.json",
    }  # a record as committed at abc
    later["recorded"]["best_val_top1"], later["rerun"]["best_val_top1"] = 0.950, 0.951
    reran["reruns"].append(later)
    text = summary.same_kind_reruns(reran)
    assert text.startswith("2 of 3 reruns") and "and 1 of the 2 whose recorded checkpoint" in text
    assert "the largest difference is 0.5 points." in text
    assert "| docs/study.json | `learned` | 0 | 97.6 (aaa) | 97.1 (bbb) | -0.5 | — | none | 0.0003 | 1 x CPU |" in text
    assert text.endswith(
        "| docs/x.json | `sincos2d` | 0 | 95.0 (aaa) | 95.0 (bbb) | +0.0 | +0.1 | none | — | 1 x CPU |"
    )
    assert "Made by `python -m benchmarks.rerun`; `python -m benchmarks.rerun --study abc:x.json`." in text
    assert "`relbias`" not in text  # another kind of machine: not a same-kind rerun
    assert "the runs docs/study.json holds now" not in text
    later["rerun"]["ckpt_sha256"] = "beef"  # the study now holds this rerun's checkpoint: its record is the earlier one
    reran["reruns"][0]["rerun"]["ckpt_sha256"] = "cafe"  # and another record holds the first one's
    now = {"docs/study.json": {"runs": [{"ckpt_sha256": "beef"}, {"spec": "none:patch"}]},
           "docs/claims.json": {"runs": [{"ckpt_sha256": "cafe"}]}, "docs/other.json": None}  # fmt: skip
    text = summary.same_kind_reruns(reran, now)
    assert (
        "1 of these reruns (commit bbb) is a run docs/study.json holds now: the record it is set against is its "
        "earlier one (commit aaa). 1 of these reruns (commit bbb) is a run docs/claims.json holds now"
    ) in text
    assert summary.same_kind_reruns(None).startswith("No run has been trained again")


def cost_record(**img_s: list[float]) -> dict:
    """A throughput record (benchmarks/throughput.py) at the training size with the contenders' per-round img/s."""
    contenders = {k.replace("_", ":"): {"img_s": v} for k, v in img_s.items()}
    return {"command": "python -m benchmarks.throughput", "machine": {"cpu": "CPU"}, "threads": 2, "patch_size": 4,
            "dims": {"embed_dim": 128, "depth": 4, "num_heads": 4},
            "grids": [{"img_size": 32, "contenders": contenders}]}  # fmt: skip


def test_the_cost_column_is_each_schemes_step_time_against_rope2d_per_round():
    cost = cost_record(rope2d=[10.0, 10.0], learned=[20.0, 5.0], timm_rope2d=[1.0, 1.0])
    s = summary.Study(study_json(), cost)
    assert s.row("learned:patch", summary.COLUMNS)[-1] == "1.25 (0.50-2.00)"  # rope2d's step / learned's: 0.5, 2
    assert s.row("rope2d:patch", summary.COLUMNS)[-1] == "1"
    assert "training cost (x `rope2d`)" in s.table(summary.COLUMNS)
    assert "training cost" not in summary.Study(study_json()).table(summary.COLUMNS)  # no record, no column
    assert summary.costs(cost_record(learned=[1.0]), 32) == {}  # nothing to compare against


FRONT_SEEDS = [0, 1, 2]
ROPE = {("zoom", 32): [0.99, 0.98, 0.99], ("zoom", 64): [0.50, 0.60, 0.55], ("canvas", 64): [0.30, 0.40, 0.35]}


def frontier_json() -> dict:
    """rope2d, fire 30 points above it at 2x (with a little spread) and string on a par with rope2d."""
    shift = {"rope2d": [0.0, 0.0, 0.0], "fire": [0.30, 0.31, 0.29], "string": [0.0, 0.01, -0.02]}
    records = [{"scheme": s, "stem": "patch", "method": "m", "regime": g, "resolution": r, "split": "test", "seed": k,
                "top1": v + (shift[s][k] if r != 32 else 0.0), "hardware": "1 x CPU", "device": "cpu",
                "commit": "abc", "torch": "2.x"}
               for s in shift for (g, r), vals in ROPE.items()
               for k, v in zip(FRONT_SEEDS, vals, strict=True)]  # fmt: skip
    runs = [{"spec": f"{s}:patch", "seed": k, "run": f"runs/{s}-{k}", "test_top1": 0.99, "commit": "abc",
             "ckpt_sha256": f"{s}{k}"} for s in shift for k in FRONT_SEEDS]  # fmt: skip
    choices = {f"{s}:patch": {"method": "m"} for s in shift}
    return {"command": "python -m benchmarks.study --json docs/frontier.json", "budget": {"img_size": 32},
            "sizes": ["32", "64"], "runs": runs, "choices": choices, "records": records}  # fmt: skip


def test_frontier_differences_are_paired_by_seed_and_holm_corrected_over_the_page():
    s = summary.Study(frontier_json())
    diffs = frontier.differences(s, frontier.COLUMNS)
    assert {c for (_, _, c) in diffs} == {("zoom", 1.0), ("zoom", 2.0), ("canvas", 2.0)}  # the columns with data
    raw = {k: stats.paired(list(s.values(k[0], k[2]).values()), list(s.values(k[1], k[2]).values())) for k in diffs}
    assert list(diffs.values()) == stats.holm(list(raw.values()))
    text = frontier.differences_table(s, diffs, frontier.COLUMNS)
    row = next(ln for ln in text.splitlines() if ln.startswith("| `fire` − `rope2d`"))
    d = diffs[("fire:patch", "rope2d:patch", ("zoom", 2.0))]
    assert f"{100 * d.diff:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}] *" in row
    row = next(ln for ln in text.splitlines() if ln.startswith("| `string` − `rope2d`"))
    assert "*" not in row  # a third of a point, not separated


def test_frontier_page_holds_the_fire_claim_at_the_largest_factor_and_finds_shared_runs(tmp_path):
    data = frontier_json()
    rope = {"spec": "rope2d:patch", "commit": "old"}
    main = {"runs": [rope | {"seed": 0, "test_top1": 0.99, "ckpt_sha256": "rope2d0"},
                     rope | {"seed": 1, "test_top1": 0.985, "ckpt_sha256": "x", "best_val_top1": 0.98}]}  # fmt: skip
    for r in data["runs"]:
        r["best_val_top1"] = 0.9905
    page = frontier.render(data, tmp_path, main, cost_record(rope2d=[10.0], fire=[8.0], string=[5.0]))
    assert "- zoom 2x (the largest measured here; published at 4.57x): `fire` above `rope2d`: agrees, +30.0" in page
    assert "- canvas 2x (the largest measured here; published at 4.57x): `fire` above `string`: agrees" in page
    assert "The study's own runs, the same checkpoints (no rerun to compare): 1 of `rope2d`." in page
    assert "| `rope2d` | 0 |" not in page
    assert "| `rope2d` | 1 | 98.5 (old) | 99.0 (abc) | +0.50 | +1.05 |" in page  # a rerun's test and validation
    assert "| `string` | 98.7 ±1.4 | `m` |" in page and page.count("| 2.00 |") == 1  # string's cost: 10 / 5
    data["records"] = [r for r in data["records"] if r["seed"] == 0]  # one seed: no verdict
    page = frontier.render(data, tmp_path)
    assert "No pair has two shared seeds yet." in page and "no factor above 1x has two seeds" in page


def test_frontier_page_sets_its_schemes_fashion_mnist_runs_beside_each_other_where_they_have_them(tmp_path):
    top1 = {"rope2d": 0.50, "fire": 0.60}  # string has no Fashion-MNIST run
    fm = {"budget": {"img_size": 16}, "sizes": ["16", "28"],
          "runs": [{"spec": f"{s}:patch", "seed": k} for s in top1 for k in FRONT_SEEDS],
          "choices": {f"{s}:patch": {"method": "m"} for s in top1},
          "records": [{"scheme": s, "stem": "patch", "method": "m", "regime": "zoom", "resolution": 28,
                       "split": "test", "seed": k, "top1": v + 0.01 * k} for s, v in top1.items()
                      for k in FRONT_SEEDS]}  # fmt: skip
    page = frontier.render(frontier_json(), tmp_path, fmnist=fm)
    assert "tested at its native 28 px" in page and "seeds per scheme: `rope2d` 3, `fire` 3." in page
    row = next(ln for ln in page.splitlines() if ln.startswith("| `fire` − `rope2d`"))
    assert row.endswith("| +10.0 [+10.0, +10.0] * |")  # paired by seed on the same data
    row = next(ln for ln in page.splitlines() if ln.startswith("| `string` − `rope2d`"))
    assert row.endswith("| — |")
    assert "Fashion-MNIST" not in frontier.render(frontier_json(), tmp_path)  # no record: no column


def widened(mean: float, sd: float, n: int, table: str) -> str:
    """The cell of a paired difference (mean and sd of n differences) whose interval is widened to Bonferroni's level
    over the table's comparisons (its cells with an interval)."""
    m = table.count("[")
    h = scipy.stats.t.ppf(1 - 0.025 / m, n - 1) * sd / math.sqrt(n)
    return f"{mean:+.1f} [{mean - h:+.1f}, {mean + h:+.1f}]"


def test_augmentation_page_pairs_each_scheme_with_its_runs_without_augmentation_seed_for_seed(tmp_path):
    plain = study_json()
    aug = study_json() | {"pos_aug": "shift=0.1", "command": "python -m benchmarks.study --pos-aug shift=0.1"}
    aug["records"] = [r | {"top1": r["top1"] + 0.05 * (r["seed"] + 1)} if r["scheme"] == "rope2d" else r
                      for r in aug["records"]]  # fmt: skip
    front = {"budget": {"img_size": 32}, "choices": {"fire:patch": {"method": "progressive"}},
             "runs": [{"spec": "fire:patch", "seed": k, "run": f"f{k}"} for k in SEEDS],
             "records": [{"scheme": "fire", "stem": "patch", "method": "progressive", "regime": "zoom",
                          "resolution": 32, "split": "test", "seed": k, "top1": 0.5} for k in SEEDS]}  # fmt: skip
    aug["runs"] += [{"spec": "fire:patch", "seed": k, "run": f"fa{k}"} for k in SEEDS]
    aug["choices"]["fire:patch"] = {"method": "progressive"}
    aug["records"] += [r | {"top1": 0.6} for r in front["records"]]
    page = augmentation.render(aug, tmp_path, plain, front)
    table = page.split("## With minus without")[1].split("##")[0]
    rows = {ln.split(" |")[0]: ln for ln in table.splitlines() if ln.startswith("| `")}
    # 1x: +5, +10, +15 points over seeds; the interval holds with the table's others at 95 % (Bonferroni)
    assert rows["| `rope2d`"].split(" | ")[1] == widened(10.0, 5.0, 3, table)
    assert rows["| `learned`"].split(" | ")[1] == "+0.0 [+0.0, +0.0]"
    assert rows["| `fire`"].split(" | ")[1] == "+10.0 [+10.0, +10.0] *"  # the baseline from the frontier's record
    assert "trained with `--pos-aug shift=0.1`" in page
    # the other side of each difference names where it was made, per record
    assert "- without it (`fire`), training runs: ? (?), torch ?, commit ?, threads not recorded" in page
    assert "- without it (`learned`, `rope2d`), training runs: 1 x CPU (cpu), torch 2.x, commit abc" in page
    aug["choices"] = aug["choices"] | {"rope2d:patch": {"method": "extrapolate"}}  # validation chose another method
    page = augmentation.render(aug, tmp_path, plain, front)
    own, one = page.split("## With minus without, paired by seed")[1].split("## With minus without, under one method")
    row = next(ln for ln in own.splitlines() if ln.startswith("| `rope2d`")).split(" | ")
    assert row[2].startswith("-32.7 [")  # zoom 2x: extrapolate with (0.25, 0.35, 0.37), interpolate without
    row = next(ln for ln in one.splitlines() if ln.startswith("| `rope2d`")).split(" | ")
    assert row[2] == widened(10.0, 5.0, 3, one)  # both interpolate: what augmentation alone does
    # a far size (tested with each side's chosen method only) has a column of its own, never one under one method
    for record, top1 in ((aug, 0.30), (plain, 0.20)):
        record["far"] = ["128"]
        chosen = record["choices"]["rope2d:patch"]["method"]
        record["records"] += [{"scheme": "rope2d", "stem": "patch", "method": chosen, "regime": "zoom",
                               "resolution": 128, "split": "test", "seed": k, "top1": top1, "pool": "all",
                               "logit_scaling": "none"} for k in SEEDS]  # fmt: skip
    page = augmentation.render(aug, tmp_path, plain, front)
    own, one = page.split("## With minus without, paired by seed")[1].split("## With minus without, under one method")
    header = next(ln for ln in own.splitlines() if ln.startswith("| with")).split(" | ")
    row = next(ln for ln in own.splitlines() if ln.startswith("| `rope2d`")).split(" | ")
    assert row[header.index("zoom 4x")].startswith("+10.0") and "zoom 4x" not in one
    assert "no cell here" not in one  # every method was tested: the one-method table has all it can hold
    for r in aug["records"]:  # tested under its own chosen method only (`--test-methods chosen`)
        r["sweep"] = {"split": "test", "sizes": aug["sizes"], "limit": None, "method": r["method"]}
    one = augmentation.render(aug, tmp_path, plain, front).split("## With minus without, under one method")[1]
    assert "chose different methods has no cell here: `rope2d`." in one.split("##")[0]
    page = augmentation.render(aug, tmp_path)
    assert "No scheme has two seeds both with and without augmentation yet." in page


def fmnist_record(top1: dict[str, float], method: str = "m") -> dict:
    """A Fashion-MNIST study record (trained at 16 px) with each scheme's test top-1 at 28 px, +1 point per seed."""
    return {"budget": {"img_size": 16}, "sizes": ["16", "28"],
            "runs": [{"spec": f"{s}:patch", "seed": k} for s in top1 for k in SEEDS],
            "choices": {f"{s}:patch": {"method": method} for s in top1},
            "records": [{"scheme": s, "stem": "patch", "method": method, "regime": "zoom", "resolution": 28,
                         "split": "test", "seed": k, "top1": v + 0.01 * k} for s, v in top1.items()
                        for k in SEEDS]}  # fmt: skip


def test_augmentation_page_sets_fashion_mnist_with_augmentation_against_it_without_seed_for_seed(tmp_path):
    plain, aug = study_json(), study_json() | {"pos_aug": "rescale=2"}
    with_it, without = fmnist_record({"rope2d": 0.60}), fmnist_record({"rope2d": 0.50, "learned": 0.40})
    page = augmentation.render(aug, tmp_path, plain, fmnist=(with_it, without))
    assert "(docs/fashion_mnist_augmentation.json); seeds per scheme: `rope2d` 3." in page
    own, one = page.split("## With minus without, paired by seed")[1].split("## With minus without, under one method")
    assert next(ln for ln in own.splitlines() if ln.startswith("| `rope2d`")).endswith("| +10.0 [+10.0, +10.0] * |")
    assert next(ln for ln in own.splitlines() if ln.startswith("| `learned`")).endswith("| — |")  # no run with it
    assert "Fashion-MNIST" not in one.split("## On Fashion-MNIST")[0]  # this table's one method: `shapes` only
    real = page.split("## On Fashion-MNIST, at every size")[1].split("## Where")[0]
    own, one = real.split("Both under the method chosen without augmentation")
    assert "| `rope2d` | `m` | `m` |" in own  # each side's method, chosen on Fashion-MNIST's validation split
    # with augmentation: 60, 61, 62 over the seeds at 28 px (the record has no 1x cell)
    assert "| `rope2d` | — | `m` | 61.0 ±2.5 |" in own
    rows = [ln for ln in real.splitlines() if ln.startswith("| `rope2d` | — | +")]
    assert rows == ["| `rope2d` | — | +10.0 [+10.0, +10.0] * |"] * 2  # own method, then one method: +10 points each
    assert "Fashion-MNIST" not in augmentation.render(aug, tmp_path, plain, fmnist=(None, without)).split("## On")[0]
    assert "Not measured yet" in augmentation.render(aug, tmp_path, plain, fmnist=(None, without)).split("## On")[1]


def test_multires_page_pairs_with_the_single_size_runs_and_states_the_share_of_the_gap_closed(tmp_path):
    plain = study_json()
    multi = study_json() | {"train_resolutions": [16, 24, 32, 48], "command": "python -m benchmarks.study --train-res"}
    # rope2d at 2x (zoom): 0.60, 0.70, 0.65 alone against 0.99, 0.98, 0.99 at 1x; with several sizes +0.2 each
    multi["records"] = [r | {"top1": r["top1"] + 0.2} if (r["scheme"], r["resolution"]) == ("rope2d", 64) else r
                        for r in multi["records"]]  # fmt: skip
    page = multires.render(multi, tmp_path, plain)
    rows = {ln.split(" |")[0]: ln for ln in page.split("## Several sizes minus")[1].split("## Share")[0].splitlines()
            if ln.startswith("| `")}  # fmt: skip
    measured = [("zoom", 1.0), ("zoom", 2.0), ("canvas", 2.0)]  # the columns with cells; the others are left out
    assert f"| {' | '.join(summary.head(*c) for c in measured)} |" in page
    zoom2 = 1 + measured.index(("zoom", 2.0))
    assert rows["| `rope2d`"].split(" | ")[zoom2].startswith("+20.0 [+20.0, +20.0]")
    shares = {ln.split(" |")[0]: ln.split(" | ") for ln in page.split("## Share of the gap closed")[1].splitlines()
              if ln.startswith("| `")}  # fmt: skip
    gap = (0.99 + 0.98 + 0.99 - 0.60 - 0.70 - 0.65) / 3
    assert shares["| `rope2d`"][zoom2 - 1] == f"{100 * 0.2 / gap:.0f} %"  # the share column list drops 1x
    assert shares["| `learned`"][zoom2 - 1] == "0 %"  # unchanged by several sizes
    assert "every batch at one of 16, 24, 32, 48 px" in page
    assert "No scheme has two seeds both ways yet." in multires.render(multi, tmp_path, None)
    assert "## Without the smallest size" in page and "Not measured yet." in page.split("## Without the smallest")[1]
    ablation = study_json() | {"train_resolutions": [24, 32, 48], "command": "python -m benchmarks.study --no16"}
    ablation["runs"] = [r | {"hardware": "1 x no16-cpu", "commit": "n16"} for r in ablation["runs"]
                        if r["spec"] == "rope2d:patch" and r["seed"] == 0]  # fmt: skip
    ablation["records"] = [r | {"top1": 0.5} for r in ablation["records"] if r["scheme"] == "rope2d" and r["seed"] == 0]
    part = multires.render(multi, tmp_path, plain, ablation).split("## Without the smallest size")[1]
    assert "the smallest, 16 px (4 x 4 patches)" in part
    assert "(without 16 px), by `python -m benchmarks.study --no16`" in part and "seeds: `rope2d` 0." in part
    rows = [ln.split(" | ") for ln in part.splitlines() if ln.startswith("| `rope2d`")]
    assert [r[1] for r in rows] == ["24, 32, 48 px", "16, 24, 32, 48 px", "32 px alone"]  # its seed (0) on every side
    assert [r[2] for r in rows] == ["50.0¹", "99.0¹", "99.0¹"]  # 1x, seed 0 only
    assert "- training runs: 1 x no16-cpu (cpu), torch 2.x, commit n16" in part.split("## Where it was measured")[0]


MODEL = {"embed_dim": 32, "depth": 2, "num_heads": 2, "patch_size": 4}


def test_the_real_data_page_holds_the_published_small_vit_ordering_pair_by_pair(tmp_path):
    """relbias > rope2d > learned > sincos2d > none (docs/anchors.yaml): each neighbour pair paired by seed at the
    training size, one verdict each; the model's parameters counted from the budget."""
    top1 = {
        "relbias": [0.95, 0.96, 0.97],
        "rope2d": [0.90, 0.91, 0.92],  # +5 every seed: agrees
        "learned": [0.93, 0.94, 0.95],  # rope2d 3 below on every seed: disagrees
        "sincos2d": [0.93, 0.90, 0.96],
        "none": [0.50, 0.52],
    }  # noisy: not separated; none has two seeds
    records = [{"scheme": s, "stem": "patch", "method": "none", "regime": "zoom", "resolution": 16, "split": "test",
                "seed": k, "top1": v} for s, vals in top1.items() for k, v in enumerate(vals)]  # fmt: skip
    data = {
        "command": "c",
        "sizes": ["16"],
        "budget": {"img_size": 16, **MODEL},
        "records": records,
        "choices": {f"{s}:patch": {"method": "none"} for s in top1},
        "runs": [{"spec": f"{s}:patch", "seed": k, "run": "r"} for s, v in top1.items() for k in range(len(v))],
    }
    section = real_data.render(data, tmp_path).split("## A published ordering")[1].split("##")[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("- ")]
    assert [ln.split(":")[0] for ln in lines] == [
        "- `relbias` above `rope2d`",
        "- `rope2d` above `learned`",
        "- `learned` above `sincos2d`",
        "- `sincos2d` above `none`",
    ]
    assert lines[0].startswith("- `relbias` above `rope2d`: agrees, +5.0 [+5.0, +5.0]")
    assert lines[1].startswith("- `rope2d` above `learned`: disagrees, -3.0")
    assert "not separated" in lines[2] and "(paired over 2 seeds" in lines[3]
    assert "s-chh/2D-Positional-Encoding-Vision-Transformer" in section and "0.82M" in section
    assert "(32 wide, 2 blocks, 2 heads, 0.03M parameters" in section
    assert "Measured order of the means here: `relbias` 96.0 > `learned` 94.0 > `sincos2d` 93.0" in section


def test_the_real_data_page_derives_its_columns_from_its_sizes_and_pairs_the_rule_with_its_ablation(tmp_path):
    def fm(top1: dict, specs: tuple[str, ...]) -> dict:
        records = [{"scheme": s, "stem": "patch", "method": "m", "regime": g, "resolution": r, "split": "test",
                    "seed": k, "top1": v + 0.01 * k} for (s, g, r), v in top1.items() for k in SEEDS]  # fmt: skip
        return {"command": "python -m benchmarks.study --config c.yaml", "sizes": ["12", "16", "28"],
                "budget": {"img_size": 16, "train_limit": 5000, **MODEL}, "records": records,
                "choices": {f"{s}:patch": {"method": "m"} for s in specs},
                "runs": [{"spec": f"{s}:patch", "seed": k, "run": f"{s}{k}"}
                         for s in specs for k in SEEDS]}  # fmt: skip

    on = fm({("learned", "zoom", 16): 0.9, ("learned", "zoom", 28): 0.7, ("learned", "canvas", 28): 0.5,
             ("rope2d", "zoom", 16): 0.9}, ("learned", "rope2d"))  # fmt: skip
    assert real_data.columns_of(on) == [("zoom", 1.0), ("zoom", 0.75), ("zoom", 1.75), ("canvas", 1.75)]
    page = real_data.render(on, tmp_path)
    assert "| scheme | 1x | method (val) | zoom 1.75x | canvas 1.75x |" in page  # 0.75x has no cell: left out
    assert "downsampled to 16 px" in page and "native 28 px" in page
    assert "Not measured yet: no record with the rule off" in page
    assert "No validation sweep per regime to compare yet." in page  # the page reads the regimes' choices
    off = fm({("learned", "zoom", 16): 0.8, ("learned", "zoom", 28): 0.7, ("learned", "canvas", 28): 0.6},
             ("learned",))  # fmt: skip
    page = real_data.render(on, tmp_path, off)
    rule = page.split("## Does the position rule carry")[1].split("## A published ordering")[0]
    row = next(ln for ln in rule.splitlines() if ln.startswith("| `learned`")).split(" | ")
    assert row[1:] == ["+10.0 [+10.0, +10.0] *", "+0.0 [+0.0, +0.0]", "-10.0 [-10.0, -10.0] * |"]
    assert "`rope2d`" not in rule  # no run without the rule to pair with
    assert "\n- rule off, training runs: " in page.split("## Where it was measured")[1]  # the ablation's provenance
    assert "Above the native" not in page  # no size above the native one
    on["far"] = ["56"]
    on["records"] += [r | {"resolution": 56, "top1": 0.3} for r in on["records"] if r["resolution"] == 28]
    assert real_data.columns_of(on)[-2:] == [("canvas", 1.75), ("canvas", 3.5)]
    page = real_data.render(on, tmp_path)
    assert "| zoom 1.75x | zoom 3.5x | canvas 1.75x | canvas 3.5x |" in page
    assert "Above the native 28 px (56 px (3.5x); `--far`, the chosen method only)" in page


def test_the_fall_beyond_nones_is_each_schemes_loss_from_the_training_size_minus_nones_seed_for_seed():
    cells = {("none", "zoom", 16): 0.80, ("none", "zoom", 28): 0.40, ("none", "canvas", 28): 0.60,
             ("rope2d", "zoom", 16): 0.90, ("rope2d", "zoom", 28): 0.60, ("rope2d", "canvas", 28): 0.40}  # fmt: skip
    noise = {0: 0.0, 1: 0.01, 2: -0.01}  # rope2d's own seed-to-seed spread, so the intervals have a width
    data = {"budget": {"img_size": 16}, "sizes": ["16", "28"],
            "choices": {"none:patch": {"method": "none"}, "rope2d:patch": {"method": "m"}},
            "runs": [{"spec": f"{s}:patch", "seed": k} for s in ("none", "rope2d") for k in SEEDS],
            "records": [{"scheme": s, "stem": "patch", "method": "none" if s == "none" else "m", "regime": g,
                         "resolution": r, "split": "test", "seed": k,
                         "top1": v + 0.05 * k + (noise[k] if (s, r) == ("rope2d", 28) else 0.0)}
                        for (s, g, r), v in cells.items() for k in SEEDS]}  # fmt: skip
    study = summary.Study(data)
    columns = real_data.columns_of(data)
    text = real_data.fall_section(study, columns)
    row = next(ln for ln in text.splitlines() if ln.startswith("| `rope2d`")).split(" | ")
    # zoom: rope2d falls 30 points, none 40: -10; canvas: rope2d falls 50, none 20: +30 (each seed's own offset cancels)
    assert row[1] == "-10.0 [-13.6, -6.4] *" and row[2] == "+30.0 [+26.4, +33.6] * |"
    assert "| `none` |" not in text  # the baseline has no row
    assert "zoom 1.75x | canvas 1.75x |" in text.splitlines()[0]
    without = summary.Study(data | {"runs": [r for r in data["runs"] if r["spec"] != "none:patch"],
                                    "records": [r for r in data["records"] if r["scheme"] != "none"]})  # fmt: skip
    assert real_data.fall_section(without, columns) == "Not measured yet: no runs of `none`."


def claims_jsons() -> tuple[dict, dict]:
    """(docs/claims.json, docs/study.json): lookhere 30 points above rope2d at 4x and 5 at 2x; cpb 20 points above
    relbias's resize at 2x while relbias chose clamp, 20 points above resize; rope2d-norm on a par with rope2d;
    rope2d-mixed 10 points below rope2d at 2x, liere 20 above rope2d-mixed there (the claim against a scheme of this
    record, not of the summary's)."""
    base = {("zoom", 32): [0.99, 0.98, 0.99], ("zoom", 64): [0.50, 0.60, 0.55], ("zoom", 128): [0.20, 0.25, 0.22],
            ("canvas", 64): [0.30, 0.40, 0.35]}  # fmt: skip

    def recs(scheme: str, method: str, shift: dict) -> list[dict]:
        return [{"scheme": scheme, "stem": "patch", "method": method, "regime": g, "resolution": r, "split": "test",
                 "seed": k, "top1": v + (shift.get(r, 0.0) + 0.01 * k if r != 32 else 0.0), "commit": "abc"}
                for (g, r), vals in base.items() for k, v in zip(SEEDS, vals, strict=True)]  # fmt: skip

    def runs(*schemes: str) -> list[dict]:
        return [{"spec": f"{s}:patch", "seed": k, "run": f"runs/{s}-{k}", "commit": "abc"} for s in schemes
                for k in SEEDS]  # fmt: skip

    budget = {"img_size": 32, "epochs": 10}
    main = {"budget": budget, "runs": runs("rope2d", "relbias"),
            "choices": {"rope2d:patch": {"method": "interpolate"}, "relbias:patch": {"method": "clamp"}},
            "records": recs("rope2d", "interpolate", {}) + recs("relbias", "resize", {})
            + recs("relbias", "clamp", {64: 0.2})}  # fmt: skip
    claims = {"command": "python -m benchmarks.study --json docs/claims.json", "budget": budget,
              "runs": runs("lookhere", "rope2d-norm", "cpb", "rope2d-mixed", "liere"),
              "choices": {"lookhere:patch": {"method": "scaled"}, "rope2d-norm:patch": {"method": "normalized"},
                          "cpb:patch": {"method": "continuous"}, "rope2d-mixed:patch": {"method": "extrapolate"},
                          "liere:patch": {"method": "extrapolate"}},
              "records": recs("lookhere", "scaled", {64: 0.05, 128: 0.3}) + recs("rope2d-norm", "normalized", {})
              + recs("cpb", "continuous", {64: 0.2}) + recs("rope2d-mixed", "extrapolate", {64: -0.1})
              + recs("liere", "extrapolate", {64: 0.1})}  # fmt: skip
    return claims, main


def test_claims_are_paired_against_the_studys_runs_at_the_published_factor_and_method(tmp_path, monkeypatch):
    from benchmarks.pages import claims

    data, main = claims_jsons()
    s = summary.Study(common.merged(data, main, {"rope2d:patch", "relbias:patch"}))
    held = [claims.Claim.of(k) for k in claims.HELD]
    diffs = claims.differences(s, held)
    raw = {}
    for c in held:
        for col in claims.COLUMNS[1:]:
            x, y = claims.values(s, c.a, None, col), claims.values(s, c.b, c.b_method, col)
            if len(set(x) & set(y)) >= 2:
                raw[(c.key, col)] = stats.paired(list(x.values()), list(y.values()))
    assert list(diffs.values()) == stats.holm(list(raw.values()))  # one family: the page
    assert diffs[("swin_v2_cpb", ("zoom", 2.0))].diff == pytest.approx(0.2)  # against resize, not relbias's clamp
    page = claims.render(data, tmp_path, main)
    assert "more than one commit" not in page  # the test's two records trained at one commit
    later = main | {"runs": [r | {"commit": "later"} for r in main["runs"]]}
    assert "more than one commit: `relbias`, `rope2d` come from docs/study.json (commit later)" in claims.render(
        data, tmp_path, later
    )
    lh = page.split("### Fuller")[1].split("###")[0]
    assert "- zoom 4x (published at 4.57x): `lookhere` above `rope2d`: agrees, +30.0" in lh
    assert "zoom 2x" not in lh  # judged at the factor nearest the published one only
    dino = page.split("### Simeoni")[1].split("###")[0]
    assert "- zoom 2x: `rope2d-norm` above `rope2d`: not separated (the runs cannot tell), +0.0" in dino
    assert "- zoom 4x: `rope2d-norm` above `rope2d`: not separated" in dino  # every factor: no published one
    assert "`cpb` above `relbias` (`resize`): agrees, +20.0" in page
    heo = page.split("### Heo")[1].split("###")[0]  # published at 384 / 224 px: judged at 2x, the nearest measured
    assert "It reports +1.8 points for `rope2d-mixed` over `rope2d`." in heo
    assert "- zoom 2x (published at 1.71x): `rope2d-mixed` above `rope2d`: disagrees, -10.0" in heo
    liere = page.split("### Ostmeier")[1].split("##")[0]
    assert "It reports top-1 (%) at 108, 168, 276 px: `learned` 45.1, 41, 40.1; `rope2d-mixed` 100, 98.6, 88.6" in liere
    assert "- zoom 2x: `liere` above `rope2d-mixed`: agrees, +20.0" in liere  # every factor: no published ratio
    assert "None: every claim" in page.split("## Claims not held yet")[1]
    monkeypatch.setattr(claims, "NOT_HELD", {"liere_synthetic": (("liere:patch", "rope2d-mixed:patch"), "3 hours")})
    lacking = claims.render(data | {"runs": [r for r in data["runs"] if r["spec"] != "rope2d-mixed:patch"]}, tmp_path,
                            main)  # fmt: skip
    assert "LieRE" in lacking.split("## Claims not held yet")[1]
    assert "needs `rope2d-mixed` in this study (3 hours)" in lacking  # liere is in it
    far = [r for r in data["records"] if r["scheme"] != "cpb" or r["resolution"] != 128]  # cpb's 4x not swept
    far_line = "(`--far 128`, the chosen method only): `rope2d` 3, `relbias` 3, `cpb` 0, `liere` 3, `lookhere` 3"
    assert far_line in claims.render(data | {"records": far}, tmp_path, main)
    with pytest.raises(SystemExit, match="differ in budget"):
        claims.render(data, tmp_path, main | {"budget": {"img_size": 16}})
    data["records"] = [r for r in data["records"] if r["seed"] == 0]  # one seed: no verdict
    assert "no factor above 1x has two seeds" in claims.render(data, tmp_path, main)


def test_summary_adds_the_other_chosen_schemes_from_their_own_record_and_claims_keep_to_theirs(tmp_path):
    """The other schemes validation chose to be given every seed are rows of the summary's second table (their cells,
    choices and guide lines from their own record, docs/others.json, which names where it was made); a scheme of that
    record not chosen is not, and the claims page's table holds its claims' schemes only."""
    from benchmarks.pages import claims

    data, main = claims_jsons()
    main |= {"command": "python -m benchmarks.study", "sizes": ["32", "64"]}
    data["runs"] += [r | {"spec": "rope2d+peg:patch", "run": r["run"] + "-peg", "hardware": "1 x CPU", "threads": 1}
                     for r in data["runs"][:3]]  # fmt: skip
    data["choices"]["rope2d+peg:patch"] = {"method": "interpolate"}
    data["records"] += [r | {"scheme": "rope2d+peg", "method": "interpolate",
                             "top1": r["top1"] + 0.3 * (r["resolution"] == 64)}
                        for r in data["records"] if r["scheme"] == "lookhere"]  # fmt: skip
    chosen = ["rope2d+peg:patch", "relbias+peg:patch"]
    page, block = summary.render(main, tmp_path, others=data, chosen=chosen)
    tables = [t for t in page.split("\n\n") if t.startswith("| scheme | 1x | method (val)")]
    first, second = ({ln.split(" |")[0][2:]: ln for ln in t.splitlines() if ln.startswith("| `")} for t in tables)
    assert set(first) == {"`rope2d`", "`relbias`"} and set(second) == {"`rope2d+peg`"}  # one record per table
    assert "`lookhere`" not in second and "`relbias+peg`" not in second  # not chosen; chosen but no runs
    assert second["`rope2d+peg`"].split(" | ")[2] == "`interpolate`"
    assert (
        "The second table: `rope2d+peg`," in page and "(docs/others.json; 1 x CPU (?), torch ?, commit abc, 1 " in page
    )
    assert "another commit" not in page and "another commit" not in block  # the test's two records name one
    assert "their test sweep is the chosen method's only." in block  # one method per scheme on test
    swept = data | {"records": data["records"] + [r | {"method": "yarn"} for r in data["records"]
                                                  if r["scheme"] == "rope2d+peg" and r["split"] == "test"]}  # fmt: skip
    assert "chosen method's only" not in summary.render(main, tmp_path, others=swept, chosen=chosen)[1]
    later = data | {"runs": [r | {"commit": "later"} for r in data["runs"]]}
    page_later, block_later = summary.render(main, tmp_path, others=later, chosen=chosen)
    assert "at another commit than the first table" in page_later and "at another commit" in block_later
    # a run of the record that is no row of the second table (lookhere) names no machine of it
    apart = data | {"runs": [r | {"hardware": "8 x GPU"} if r["spec"].startswith("lookhere") else r
                             for r in data["runs"]]}  # fmt: skip
    assert "8 x GPU" not in summary.render(main, tmp_path, others=apart, chosen=chosen)[0]
    assert any(r["spec"].startswith("lookhere") for r in data["runs"])
    assert "Also chosen, with no row here yet: `relbias+peg`" in page
    assert "without the canvas controls; not fine-tuned; they are not trained on Fashion-MNIST (—)." in page
    # a swept column with rows that have no cell (—) points to where they are listed, from the page and the README
    pointed = "Every column is swept; the rows without a cell (—) are listed under [not measured yet](#not-measured"
    assert summary.page_missing([], gaps=True).startswith(pointed)
    assert "[not measured yet](docs/summary.md#" in summary.page_missing([], True, "docs/summary.md")
    assert summary.page_missing([]) == "Every column is swept." and "zoom 4x" in summary.page_missing(["zoom 4x"], True)
    run = data["runs"][-1]  # a rope2d+peg run, fine-tuned at 64 px
    tuned = data | {"finetuned": [{"spec": run["spec"], "seed": run["seed"], "run": run["run"], "size": 64,
                                   "top1": 0.9, "hardware": "2 x CPU", "commit": "abc"}]}  # fmt: skip
    page_tuned = summary.render(main, tmp_path, others=tuned, chosen=chosen)[0]
    assert "fine-tuned as the six are (`--finetune`); they are not trained on Fashion-MNIST (—)." in page_tuned
    assert "- second table, fine-tuning runs: 2 x CPU" in page_tuned
    row = next(ln for ln in page_tuned.splitlines() if ln.startswith("| `rope2d+peg`"))
    assert "| 90.0¹ |" in row  # its fine-tuned cell, from its own record
    assert "- second table, training runs: 1 x CPU (?), torch ?, commit abc, 1 thread" in page
    fm = {"budget": {"img_size": 16}, "sizes": ["28"], "choices": {"rope2d+peg:patch": {"method": "interpolate"}},
          "runs": [{"spec": "rope2d+peg:patch", "seed": k} for k in SEEDS],
          "records": [{"scheme": "rope2d+peg", "stem": "patch", "method": "interpolate", "regime": "zoom",
                       "resolution": 28, "split": "test", "seed": k, "top1": 0.5} for k in SEEDS]}  # fmt: skip
    page_real = summary.render(main, tmp_path, others=data, chosen=chosen, fmnist=fm)[0]
    assert "; their Fashion-MNIST cells come from docs/fashion_mnist_study.json" in page_real
    zoom2 = next(line for line in page.splitlines() if "To serve 2x (zoom)" in line)
    assert zoom2.startswith("- **To serve 2x (zoom) unchanged**: `rope2d+peg` with `interpolate`")
    assert "`rope2d+peg`" in block.split("\n\n")[1] and "`rope2d+peg`" not in block.split("\n\n")[0]
    assert "`rope2d+peg`" not in summary.render(main, tmp_path, others=data, chosen=[])[0]
    with pytest.raises(SystemExit, match="differ in budget"):
        summary.render(main, tmp_path, others=data | {"budget": {"img_size": 16}}, chosen=["rope2d+peg:patch"])
    claimed = claims.render(data, tmp_path, main)
    assert "`rope2d+peg`" not in claimed.split("## Differences")[0]


def test_every_published_claim_is_held_or_named_as_not_held():
    """Each entry of docs/anchors.yaml is a claim the claims page holds, links to, or names with what it needs, or a
    reference number a page reads (a rate, a size, a peak)."""
    from benchmarks.pages import claims
    from benchmarks.pages.common import anchors

    named = set(claims.HELD) | set(claims.ELSEWHERE) | set(claims.NOT_HELD)
    references = set(anchors()) - named
    assert references == {"vit_s16_train_throughput", "imagenet_train", "gpu_peak_tflops"}
    sources = "".join(p.read_text() for p in (ROOT / "benchmarks" / "pages").glob("*.py"))
    assert all(f'"{k}"' in sources for k in references)
    for key in claims.HELD:
        claim = claims.Claim.of(key)
        assert claim.a != claim.b and anchors()[key]["source"]


PROVENANCE = {"hardware", "device", "commit", "torch", "ckpt_sha256"}


def provenance_rows(data: dict) -> list[dict]:
    """What a study record (benchmarks/study.py) or a rerun record (benchmarks/rerun.py) measured, row by row."""
    if "reruns" in data:
        return [r[side] for r in data["reruns"] for side in ("recorded", "rerun")]
    return [r for part in ("runs", "records", "entropy", "shuffle", "finetuned") for r in data.get(part, [])]


# Every record of runs or of checkpoints the pages read (the studies, the rule study, the reruns, the diagnostics and
# the position-parameter curves) names all of its provenance.
STUDY_RECORDS = sorted(
    p
    for p in (ROOT / "docs").glob("*.json")
    if "reruns" in (d := json.loads(p.read_text())) or {"spec", "run"} & set((d.get("runs") or [{}])[0])
)


def test_the_provenance_check_covers_every_record_of_runs():
    names = {p.name for p in STUDY_RECORDS}
    assert {"rules.json", "study.json", "diagnostics.json", "pos_dynamics.json", "rerun.json"} <= names


@pytest.mark.parametrize("path", STUDY_RECORDS, ids=lambda p: p.name)
def test_every_run_and_cell_of_a_study_record_names_its_provenance_and_one_kind_of_machine(path):
    rows = provenance_rows(json.loads(path.read_text()))
    missing = [sorted(PROVENANCE - set(r)) for r in rows if not set(r) >= PROVENANCE]
    assert rows and not missing, f"{len(missing)} of {len(rows)} rows lack {missing[:1]}"
    assert len({r["hardware"] for r in rows}) == 1, "a table comes from one kind of machine"


def test_where_a_record_was_made_names_its_threads_where_recorded():
    """Runs that differ only in their thread count are two phrases: their sums run in another order."""
    made = {"hardware": "1 x CPU", "device": "cpu", "commit": "abc", "torch": "2"}
    got = common.machines([made | {"threads": 1}, made | {"threads": 2}, made | {"threads": 2}, made])
    where = "1 x CPU (cpu), torch 2, commit abc"
    assert got == [f"{where}, threads not recorded", f"{where}, 1 thread", f"{where}, 2 threads"]
