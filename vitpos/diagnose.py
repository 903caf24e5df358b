"""Diagnostics of one checkpoint: what its position scheme learned, and whether the model uses it.

    python -m vitpos.diagnose --ckpt runs/a/checkpoints/last.ckpt [--out DIR] [--num-images 256]

(default ``--out``: ``runs/a/diagnostics/``, beside the run's other outputs)

Each picture is drawn only for schemes that use its hook, detected generically through the seam
(nothing here knows scheme names):

* ``position_similarity.png`` (``tokens`` adds something: learned, sincos2d, compositions with
  them): each position's cosine similarity to every other, an h x w grid of h x w maps (the ViT
  paper's figure);
* ``bias_centre_query.png`` (``pos.attn_pos`` returns a ``bias``: relbias, cpb, ...): the logit bias
  the centre query gives every key, per head, first and last block;
* ``rope_kernel.png`` (``pos.attn_pos`` returns a ``rope``): the rotated q.k for q = k = all ones, per
  head, as a function of the key's offset (dy, dx) from the centre query (first block);
* ``attention_distance.png`` (every scheme): mean attention distance (patch units) per layer and
  head on the checkpoint's validation images.

``diagnostics.json`` also holds the mean attention entropy per layer and head (nats; log N is attention spread
evenly over the N keys). :func:`attention_entropy` gives it for a batch of images at any size, for a resolution
sweep to follow it beyond the training size.

``diagnostics.json`` holds the numbers, including the **patch-shuffle test**: top-1 on the first
``--num-images`` validation images as they are and with their patches permuted (one fixed
permutation for all). A model blind to position (``none`` + patch stem) scores the same on both.

Attention weights are recomputed from the inputs of each block's ``Attention`` (hooked) by that layer's
own ``weights`` (its q/k projection, rotation, scale and bias, unfused): the model's forward is untouched.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import torch
from einops import rearrange
from torch import Tensor
from torch.utils.data import DataLoader, Subset

from .cli import OneLineParser
from .errors import ConfigError
from .model import Attention, ViT
from .outputs import check_creatable, make_dir, read_json, shell
from .pos.base import AttnPos, Grid, grid_coords, rotate_qk

PICTURES = ("position_similarity.png", "bias_centre_query.png", "rope_kernel.png", "attention_distance.png")
SUMMARY = "diagnostics.json"
SHUFFLE_SEED = 0


# -- what the scheme does at each hook ------------------------------------------------------------
@torch.no_grad()
def additive_embedding(model: ViT, grid: Grid | None = None) -> Tensor | None:
    """(N, D) what ``pos.tokens`` adds to zero tokens on ``grid`` (default: the training grid); None if nothing."""
    grid = grid or model.grid
    zeros = torch.zeros(1, grid[0] * grid[1], model.pos.dim)
    added = model.pos.tokens(zeros, grid)[0]
    return added if added.abs().max() > 0 else None


@torch.no_grad()
def attention_pos(model: ViT, grid: Grid | None = None) -> list[AttnPos]:
    return model.pos.attn_pos(grid or model.grid, torch.device("cpu"))


def position_similarity(emb: Tensor) -> Tensor:
    """(N, D) -> (N, N) cosine similarity of every position to every other."""
    e = torch.nn.functional.normalize(emb.float(), dim=-1)
    return e @ e.T


def centre_index(grid: Grid) -> int:
    return (grid[0] // 2) * grid[1] + grid[1] // 2


def centre_bias(model: ViT, grid: Grid | None = None) -> Tensor | None:
    """(depth, heads, h, w) logit bias of the centre query to every key (NaN where a mask hides the key, -inf in
    the bias: drawn blank); None if the scheme has no bias."""
    grid = grid or model.grid
    per_block = attention_pos(model, grid)
    if all(a.bias is None for a in per_block):
        return None
    p, n, q = model.num_prefix_tokens, grid[0] * grid[1], centre_index(grid)
    maps = []
    for a in per_block:
        b = torch.zeros(model.pos.num_heads, n) if a.bias is None else a.bias[:, p + q, p:].float()
        b = b.masked_fill(b == float("-inf"), float("nan"))
        maps.append(rearrange(b, "heads (h w) -> heads h w", h=grid[0]))
    return torch.stack(maps)


def rope_kernel(model: ViT, grid: Grid | None = None, block: int = 0) -> Tensor | None:
    """(heads, h, w): rotated q.k * scale for q = k = all ones, the centre query against every key
    (the key at (y, x) sits at offset (y - h//2, x - w//2)); None if the scheme rotates nothing."""
    grid = grid or model.grid
    a = attention_pos(model, grid)[block]
    if a.rope is None and a.rotation is None:
        return None
    heads, d, p = model.pos.num_heads, model.pos.head_dim, model.num_prefix_tokens
    ones = torch.ones(1, heads, p + grid[0] * grid[1], d)
    if a.mix is not None:  # STRING's P turns q and k before the rotation
        ones = ones @ a.mix.transpose(-1, -2)
    r = rotate_qk(ones, ones, a)[0][0, :, p:]  # (heads, N, d): patch tokens
    q = centre_index(grid)
    logits = (r[:, q : q + 1] @ r.transpose(-1, -2))[:, 0] * d**-0.5 * a.logit_scale  # (heads, N)
    return rearrange(logits, "heads (h w) -> heads h w", h=grid[0])


# -- attention maps, recomputed -------------------------------------------------------------------
def recompute_attention(attn: Attention, x: Tensor, pos: AttnPos) -> Tensor:
    """(B, heads, N, N) softmax weights of ``attn`` on its input ``x`` (B, N, D), from the layer's own path."""
    return attn.weights(x, pos)


@torch.no_grad()
def attention_maps(model: ViT, images: Tensor) -> list[Tensor]:
    """One (B, heads, N, N) attention tensor per block (N including prefix tokens) for ``images``."""
    inputs: list[tuple[Attention, Tensor, AttnPos]] = []
    hooks = [
        block.attn.register_forward_pre_hook(lambda m, args: inputs.append((m, args[0], args[1])))
        for block in model.blocks
    ]
    try:
        model(images)
    finally:
        for h in hooks:
            h.remove()
    return [recompute_attention(m, x, pos) for m, x, pos in inputs]


def grid_distances(grid: Grid) -> Tensor:
    """(N, N) Euclidean distance between token positions, in patches."""
    ys, xs = grid_coords(grid)
    return torch.sqrt((ys[:, None] - ys[None]) ** 2 + (xs[:, None] - xs[None]) ** 2)


def entropy_of(weights: Tensor, num_prefix_tokens: int = 0) -> Tensor:
    """(heads,) entropy in nats of each patch query's attention over all keys (B, heads, N, N), summed over the
    images and averaged over the queries: log N for attention spread evenly over N keys, 0 for one key."""
    a = weights[:, :, num_prefix_tokens:].float()  # patch queries, every key (a class token is one of them)
    return torch.special.entr(a).sum(-1).mean(-1).sum(0)


@torch.no_grad()
def attention_entropy(model: ViT, images: Tensor) -> Tensor:
    """(depth, heads) mean entropy (nats) of the attention of the patch queries of ``images``, at the images' own
    size (the model as it is: call ``model.eval()`` first for evaluation).

    Whether attention stays focused at sizes beyond the training one, or spreads towards uniform (entropy near
    log N), is how the extrapolation study of FIRE and RoPE in ViTs explains their difference; a resolution sweep
    calls this at each test size."""
    maps = attention_maps(model, images)
    return torch.stack([entropy_of(a, model.num_prefix_tokens) for a in maps]) / images.shape[0]


@torch.no_grad()
def attention_statistics(model: ViT, loader) -> tuple[Tensor, Tensor]:
    """(depth, heads) mean attention distance (see :func:`mean_attention_distance`) and mean attention entropy
    (:func:`attention_entropy`) over the loader's images, from one pass."""
    total, count = None, 0
    for images, _ in loader:
        grid = model.grid_for(images.shape[-2:])
        dist, p = grid_distances(grid), model.num_prefix_tokens
        per_block = []
        for weights in attention_maps(model, images):
            a = weights[:, :, p:, p:]
            a = a / a.sum(-1, keepdim=True)
            per_block.append(torch.stack([(a * dist).sum(-1).mean(-1).sum(0), entropy_of(weights, p)]))
        batch = torch.stack(per_block)  # (depth, 2, heads), summed over images
        total = batch if total is None else total + batch
        count += images.shape[0]
    if total is None:
        raise ConfigError("no images to measure attention distance on")
    distance, entropy = (total / count).unbind(1)
    return distance, entropy


def mean_attention_distance(model: ViT, loader) -> Tensor:
    """(depth, heads) mean over images and patch queries of sum_k a_qk |pos_q - pos_k| (patches).

    Only patch-to-patch attention counts: a query's weights on patch keys are renormalised to sum
    to 1 (a class token has no place on the grid). Bounded by the grid's diagonal."""
    return attention_statistics(model, loader)[0]


def max_grid_distance(grid: Grid) -> float:
    return math.hypot(grid[0] - 1, grid[1] - 1)


# -- the patch-shuffle test -----------------------------------------------------------------------
def shuffle_patches(images: Tensor, patch_size: int, perm: Tensor) -> Tensor:
    """Permute the p x p patches of (B, C, H, W) images by ``perm`` (one permutation of the h*w patches)."""
    h, w = images.shape[-2] // patch_size, images.shape[-1] // patch_size
    x = rearrange(images, "b c (h p1) (w p2) -> b (h w) c p1 p2", p1=patch_size, p2=patch_size)
    return rearrange(x[:, perm], "b (h w) c p1 p2 -> b c (h p1) (w p2)", h=h, w=w)


@torch.no_grad()
def patch_shuffle_test(model: ViT, loader, seed: int = SHUFFLE_SEED) -> dict[str, Any]:
    """Top-1 on the loader's images as they are and with their patches permuted (one fixed permutation)."""
    hits = hits_shuffled = seen = 0
    perm = None
    for images, labels in loader:
        h, w = model.grid_for(images.shape[-2:])
        if perm is None:
            perm = torch.randperm(h * w, generator=torch.Generator().manual_seed(seed))
        hits += int((model(images).argmax(-1) == labels).sum())
        shuffled = shuffle_patches(images, model.patch_size, perm)
        hits_shuffled += int((model(shuffled).argmax(-1) == labels).sum())
        seen += labels.shape[0]
    if not seen:
        raise ConfigError("no images for the patch-shuffle test")
    top1, top1_shuffled = hits / seen, hits_shuffled / seen
    return {"top1": top1, "top1_shuffled": top1_shuffled, "drop": top1 - top1_shuffled,
            "num_images": seen, "seed": seed}  # fmt: skip


# -- pictures -------------------------------------------------------------------------------------
def _plt():
    import matplotlib.pyplot as plt  # the command line selects Agg; a notebook keeps its own backend

    return plt


def mosaic(maps: Tensor, grid: Grid) -> Tensor:
    """(N, h, w) maps, one per position -> one (h*(h+1)-1, w*(w+1)-1) image laid out on the grid, NaN gaps."""
    h, w = grid
    out = torch.full((h * (h + 1) - 1, w * (w + 1) - 1), float("nan"))
    for i in range(h):
        for j in range(w):
            out[i * (h + 1) : i * (h + 1) + h, j * (w + 1) : j * (w + 1) + w] = maps[i * w + j]
    return out


def plot_position_similarity(model: ViT, path: str | Path) -> Path | None:
    """Draw the similarity mosaic to ``path``; None (nothing drawn) when the scheme adds nothing to tokens."""
    emb = additive_embedding(model)
    if emb is None:
        return None
    plt = _plt()
    grid = model.grid
    sim = rearrange(position_similarity(emb), "n (h w) -> n h w", h=grid[0])
    fig, ax = plt.subplots(figsize=(6, 6))
    im = ax.imshow(mosaic(sim, grid).numpy(), cmap="viridis", vmin=float(sim.min()), vmax=1)
    ax.set_xticks([(j * (grid[1] + 1) + grid[1] / 2 - 0.5) for j in range(grid[1])], range(1, grid[1] + 1))
    ax.set_yticks([(i * (grid[0] + 1) + grid[0] / 2 - 0.5) for i in range(grid[0])], range(1, grid[0] + 1))
    ax.set_xlabel("input patch column")
    ax.set_ylabel("input patch row")
    ax.set_title("position embedding: cosine similarity")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return _save(fig, path)


def _heads_figure(maps: Tensor, rows: list[str], title: str, cbar: str, extent=None):
    """maps (rows, heads, h, w) -> one panel per (row, head) on a shared colour scale.

    Signed values get a diverging map symmetric about 0; values that are all >= 0 a sequential one
    from 0, so that colour never suggests a sign the data do not have. With ``extent`` the panels
    are offset maps and their axes are labelled dx / dy (patches)."""
    plt = _plt()
    n_rows, heads = maps.shape[:2]
    finite = maps.nan_to_num(nan=0.0)  # NaN: masked, drawn blank
    if float(finite.min()) >= 0:
        cmap, vmin, vmax = "viridis", 0.0, float(finite.max()) or 1.0
    else:
        lim = float(finite.abs().max()) or 1.0
        cmap, vmin, vmax = "RdBu_r", -lim, lim
    fig, axes = plt.subplots(n_rows, heads, figsize=(2.2 * heads + 1, 2.2 * n_rows + 0.8), squeeze=False)
    for r in range(n_rows):
        for hd in range(heads):
            ax = axes[r][hd]
            im = ax.imshow(maps[r, hd].numpy(), cmap=cmap, vmin=vmin, vmax=vmax, extent=extent)
            ax.set_title(f"{rows[r]} head {hd}", fontsize=8)
            ax.tick_params(labelsize=6)
            if extent is not None:
                if r == n_rows - 1:
                    ax.set_xlabel("dx (patches)", fontsize=7)
                if hd == 0:
                    ax.set_ylabel("dy (patches)", fontsize=7)
    fig.colorbar(im, ax=axes, fraction=0.02, label=cbar)
    fig.suptitle(title)
    return fig


def _offset_extent(grid: Grid):
    h, w = grid
    return (-(w // 2) - 0.5, w - 1 - w // 2 + 0.5, h - 1 - h // 2 + 0.5, -(h // 2) - 0.5)


def plot_bias(model: ViT, path: str | Path) -> Path | None:
    """Centre-query bias per head, first and last block, to ``path``; None when the scheme has no bias."""
    bias = centre_bias(model)
    if bias is None:
        return None
    blocks = sorted({0, bias.shape[0] - 1})
    fig = _heads_figure(bias[blocks], [f"block {b}" for b in blocks], "logit bias of the centre query",
                        "bias", _offset_extent(model.grid))  # fmt: skip
    return _save(fig, path)


def plot_rope_kernel(model: ViT, path: str | Path) -> Path | None:
    """RoPE offset kernel per head (first block) to ``path``; None when the scheme rotates nothing."""
    kernel = rope_kernel(model)
    if kernel is None:
        return None
    fig = _heads_figure(kernel[None], ["block 0"], "rotated q.k (q = k = 1) vs offset (dy, dx)",
                        "logit", _offset_extent(model.grid))  # fmt: skip
    return _save(fig, path)


def plot_attention_distance(dist: Tensor, path: str | Path, max_dist: float | None = None) -> Path:
    """Mean attention distance per head against block, as in the ViT paper.

    Each head has its own colour and marker and a small sideways offset, so heads at the same
    distance stay apart; the dashed line is the largest distance on the grid (its diagonal)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    depth, heads = dist.shape
    colours = plt.get_cmap("tab10" if heads <= 10 else "tab20")
    markers = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "*"]
    spread = 0.5 / max(heads, 1)
    for hd in range(heads):
        x = [b + (hd - (heads - 1) / 2) * spread for b in range(depth)]
        ax.scatter(x, dist[:, hd].numpy(), s=22, color=colours(hd % colours.N), marker=markers[hd % len(markers)],
                   edgecolor="black", linewidth=0.3, label=f"head {hd}")  # fmt: skip
    if max_dist is not None:
        ax.axhline(max_dist, color="0.5", linestyle="--", linewidth=1,
                   label=f"max distance on the grid ({max_dist:.2f})")  # fmt: skip
    ax.set_xticks(range(depth))
    ax.set_xlabel("block")
    ax.set_ylabel("mean attention distance (patches)")
    ax.set_ylim(bottom=0, top=(max_dist or float(dist.max())) * 1.08)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), ncol=1 if heads <= 12 else 2)
    return _save(fig, path)


def _save(fig, path: str | Path) -> Path:
    path = Path(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return path


# -- one checkpoint -------------------------------------------------------------------------------
def check_out(out: Path, overwrite: bool) -> None:
    """``out`` can hold the pictures: an empty or new folder, or (``overwrite``) one whose diagnostics.json, where
    there is one, vitpos wrote (only the pictures and diagnostics.json are replaced; nothing else is touched)."""
    check_creatable(out)
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ConfigError(f"{out} is not empty; pass --overwrite or choose another --out")
    summary = out / SUMMARY
    if summary.exists() and not _is_summary(summary):
        raise ConfigError(
            f"{out} holds {SUMMARY}, which vitpos.diagnose did not write; --overwrite replaces only its own files: "
            "choose another --out"
        )


def _is_summary(path: Path) -> bool:
    summary = read_json(path)
    return isinstance(summary, dict) and {"checkpoint", "patch_shuffle"} <= set(summary)


def diagnose(
    ckpt: str | Path,
    out: str | Path,
    *,
    num_images: int = 256,
    data_dir: str | None = None,
    overwrite: bool = False,
    batch_size: int = 64,
    max_image_pixels: int | None = None,
) -> dict[str, Any]:
    """Write the pictures and ``diagnostics.json`` for ``ckpt`` into ``out``; return the summary."""
    from .checkpoint import model_from_checkpoint
    from .data import build_datamodule

    if num_images <= 0:
        raise ConfigError(f"--num-images must be a positive integer, got {num_images}")
    if max_image_pixels is not None and max_image_pixels <= 0:
        raise ConfigError(f"--max-image-pixels must be a positive integer, got {max_image_pixels}")
    out = Path(out)
    check_out(out, overwrite)
    cfg, model = model_from_checkpoint(ckpt)
    if data_dir is not None:
        cfg.data.data_dir = data_dir
    if max_image_pixels is not None:
        cfg.data.max_image_pixels = max_image_pixels
    dm = build_datamodule(cfg.data, img_size=cfg.model.img_size, seed=cfg.trainer.seed)
    if (dm.num_classes, dm.in_chans) != (cfg.model.num_classes, cfg.model.in_chans):
        raise ConfigError(f"data set '{cfg.data.name}' does not match the checkpoint's classes or channels")
    val = dm.eval_dataset(cfg.model.img_size)
    loader = DataLoader(Subset(val, range(min(num_images, len(val)))), batch_size=batch_size)  # type: ignore[arg-type]

    make_dir(out)
    for name in (*PICTURES, SUMMARY):  # an earlier result's pictures must not pass for this one's
        (out / name).unlink(missing_ok=True)
    drawn = [
        plot_position_similarity(model, out / "position_similarity.png"),
        plot_bias(model, out / "bias_centre_query.png"),
        plot_rope_kernel(model, out / "rope_kernel.png"),
    ]
    dist, entropy = attention_statistics(model, loader)
    grid = model.grid
    drawn.append(plot_attention_distance(dist, out / "attention_distance.png", max_grid_distance(grid)))
    shuffle = patch_shuffle_test(model, loader)
    summary = {
        "checkpoint": str(ckpt),
        "scheme": cfg.model.pos,
        "stem": cfg.model.stem,
        "data": cfg.data.name,
        "img_size": cfg.model.img_size,
        "grid": list(grid),
        "hooks": {
            "tokens": additive_embedding(model) is not None,
            "bias": centre_bias(model) is not None,
            "rope": rope_kernel(model) is not None,
        },
        "pictures": [p.name for p in drawn if p is not None],
        "mean_attention_distance": [[round(float(v), 4) for v in row] for row in dist],
        "mean_attention_distance_per_block": [round(float(v), 4) for v in dist.mean(-1)],
        "max_grid_distance": round(max_grid_distance(grid), 4),
        "attention_entropy": [[round(float(v), 4) for v in row] for row in entropy],
        "max_attention_entropy": round(math.log(grid[0] * grid[1] + model.num_prefix_tokens), 4),
        "patch_shuffle": shuffle,
    }
    (out / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def report(summary: dict[str, Any]) -> str:
    s = summary["patch_shuffle"]
    hooks = ", ".join(k for k, v in summary["hooks"].items() if v) or "none"
    per_block = " ".join(f"{v:.2f}" for v in summary["mean_attention_distance_per_block"])
    return (
        f"{summary['scheme']}/{summary['stem']} ({hooks}): patch-shuffle top-1 {s['top1']:.4f} -> "
        f"{s['top1_shuffled']:.4f} on {s['num_images']} images; mean attention distance per block "
        f"{per_block} (max {summary['max_grid_distance']:.2f} patches); pictures: {', '.join(summary['pictures'])}"
    )


# -- command line ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m vitpos.diagnose", description="Pictures and numbers on one checkpoint's positions."
    )
    p.add_argument("--ckpt", required=True, metavar="FILE", help="checkpoint to diagnose")
    p.add_argument("--out", metavar="DIR", help="folder for the PNGs and diagnostics.json (default: RUN/diagnostics/ "
                   "for RUN/checkpoints/last.ckpt, RUN/diagnostics-<stem>/ for another checkpoint of RUN)")  # fmt: skip
    p.add_argument("--num-images", type=int, default=256, help="validation images to use (default: 256)")
    p.add_argument("--data-dir", help="where the data set's files are (default: the checkpoint's)")
    p.add_argument("--overwrite", action="store_true", help="write into a non-empty --out (default: refuse)")
    p.add_argument("--max-image-pixels", type=int, metavar="N",
                   help="open images of up to N pixels (default: as trained, else PIL's limit)")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    from .evaluate import default_out

    args = build_parser().parse_args(argv)
    out = args.out or default_out(args.ckpt, "diagnostics")
    try:
        summary = diagnose(args.ckpt, out, num_images=args.num_images, data_dir=args.data_dir,
                           overwrite=args.overwrite, max_image_pixels=args.max_image_pixels)  # fmt: skip
    except ConfigError as e:
        print(f"vitpos.diagnose: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("vitpos.diagnose: interrupted", file=sys.stderr)
        return 130
    print(report(summary))
    print(f"vitpos.diagnose: wrote {', '.join(summary['pictures'])} and {SUMMARY} to {shell(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
