"""Pretrained ViTs in and out of timm: ``from_timm(model) -> ViT`` and ``to_timm(vit)``, with the same logits.

Families read by :func:`from_timm` (any weights; sizes from the instance):

* ``VisionTransformer`` (ViT, DeiT, DeiT-III, AugReg) with a learned table or none, with or without a
  class token, ``no_embed_class``, LayerScale, token or average pooling (``fc_norm``) -> ``learned`` / ``none``.
  A class-token entry of the table is folded into the class token: it is added to a constant, once.
* ``Eva`` as timm's ports of RoPE-ViT (``vit_*_patch16_rope[_mixed][_ape]_224``) -> ``rope2d``,
  ``rope2d-mixed``, ``rope2d+learned``, ``rope2d-mixed+learned``. timm's rotary pairs (interleaved or
  rotate-half; x or y frequencies first) are mapped onto vitpos's pairs by permuting the q and k rows of
  each head's projection: a logit is a dot product, so one permutation of both changes nothing. Mixed
  frequencies (2, depth, heads, d/2) become vitpos's (depth, heads, d/2, (fx, fy)).
* ``Beit`` with relative position bias per block (and/or shared) -> ``relbias``: each (T + 3, heads)
  table splits into the (2H-1)(2W-1) offsets and the three class-token entries (``prefix_bias``); q/v-only
  qkv bias (``qkv_bias="qv"``); average pooling with ``fc_norm``.

Served at another size, the vitpos model reproduces timm's ``dynamic_img_size=True`` (or, for BEiT,
``set_input_size``) with these transfer methods: ``bicubic`` (learned), ``extrapolate`` (rope2d,
rope2d-mixed), ``geometric`` (relbias). The scheme's other methods stay available.

:func:`to_timm` is the inverse for ``learned`` / ``none`` (``VisionTransformer``), the rope schemes and
their ``+learned`` compositions (``Eva``) and ``relbias`` with a class token (``Beit``).
Anything else is a one-line :class:`~vitpos.config.ConfigError`.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from .errors import ConfigError
from .model import ViT

# Timm families this module reads, by class name (timm need not be imported to ask).
FAMILIES = ("VisionTransformer", "Eva", "Beit")


# -- rotary layouts ---------------------------------------------------------------------------------
def rope_dim_order(head_dim: int, grid_indexing: str = "xy", rotate_half: bool = False) -> Tensor:
    """(head_dim,) index: vitpos q/k dim i of a head is timm's dim ``order[i]``.

    vitpos: pair j = dims (2j, 2j+1); the first d/4 pairs turn by x * f_j, the next d/4 by y * f_j.
    timm: pair p = dims (2p, 2p+1) (interleaved) or (p, p + d/2) (rotate-half); its first d/4 pairs turn
    by x ('xy' grid indexing) or y ('ij'), the next d/4 by the other axis, with the same ladder f.
    """
    if grid_indexing not in ("xy", "ij"):
        raise ConfigError(f"unknown rope grid indexing '{grid_indexing}'")
    quarter, half = head_dim // 4, head_dim // 2
    order = []
    for j in range(half):
        p = j if grid_indexing == "xy" else (j + quarter) % half  # the timm pair with the same axis and frequency
        order += [p, p + half] if rotate_half else [2 * p, 2 * p + 1]
    return torch.tensor(order)


def _qk_rows(num_heads: int, head_dim: int, order: Tensor) -> Tensor:
    """(3 * heads * head_dim,) rows of a fused qkv projection, q and k reordered per head by ``order``."""
    rows = torch.arange(3 * num_heads * head_dim).view(3, num_heads, head_dim)
    rows[:2] = rows[:2, :, order]
    return rows.flatten()


# -- reading timm -----------------------------------------------------------------------------------
def _refuse(model: nn.Module, what: str) -> ConfigError:
    return ConfigError(f"from_timm: {type(model).__name__} with {what} has no vitpos equivalent")


def _eps(norm: nn.Module) -> float:
    return float(norm.eps)


def _layer_norms(model: nn.Module) -> list[nn.LayerNorm]:
    return [m for m in model.modules() if isinstance(m, nn.LayerNorm)]


def _linear_head(model: nn.Module) -> nn.Linear:
    head = model.head
    if not isinstance(head, nn.Linear):
        raise _refuse(model, "no linear classifier head (num_classes=0)")
    return head


def _check_common(model: nn.Module) -> None:
    pe = model.patch_embed
    proj = pe.proj
    if not isinstance(proj, nn.Conv2d) or proj.kernel_size != proj.stride or proj.kernel_size[0] != proj.kernel_size[1]:
        raise _refuse(model, "a patch embedding other than one square Conv2d (kernel = stride)")
    if proj.bias is None or not isinstance(getattr(pe, "norm", nn.Identity()), nn.Identity):
        raise _refuse(model, "a patch embedding without bias or with a norm")
    if getattr(pe, "dynamic_img_pad", False):
        raise _refuse(model, "dynamic_img_pad")
    if getattr(model, "reg_token", None) is not None:
        raise _refuse(model, "register tokens")
    if getattr(model, "attn_pool", None) is not None:
        raise _refuse(model, "attention pooling")
    if model.global_pool not in ("avg", "token"):
        raise _refuse(model, f"global_pool='{model.global_pool}'")
    if not isinstance(getattr(model, "norm_pre", nn.Identity()), nn.Identity):
        raise _refuse(model, "a norm before the blocks (pre_norm)")
    if not isinstance(getattr(model, "patch_drop", None), nn.Identity | type(None)):
        raise _refuse(model, "patch dropout")
    eps = {_eps(n) for n in _layer_norms(model)}
    if len(eps) != 1 or any(type(n).__name__ not in ("LayerNorm",) for n in _layer_norms(model)):
        raise _refuse(model, "norms other than LayerNorm with one epsilon")
    for block in model.blocks:
        mlp = block.mlp
        if type(mlp).__name__ != "Mlp" or not isinstance(mlp.act, nn.GELU) or mlp.act.approximate != "none":
            raise _refuse(model, f"an MLP other than Linear-GELU-Linear ({type(mlp).__name__})")
        if not isinstance(mlp.norm, nn.Identity):
            raise _refuse(model, "a norm inside the MLP")
        attn = block.attn
        for name in ("q_norm", "k_norm", "norm"):
            if not isinstance(getattr(attn, name, nn.Identity()), nn.Identity):
                raise _refuse(model, f"attention {name}")
        if getattr(attn, "gate", None) is not None or getattr(attn, "qkv", None) is None:
            raise _refuse(model, "gated or unfused qkv attention")
        if any(lin.bias is None for lin in (attn.proj, mlp.fc1, mlp.fc2)):
            raise _refuse(model, "projections without bias")


def _base_kwargs(model: nn.Module) -> dict[str, Any]:
    proj = model.patch_embed.proj
    head = _linear_head(model)
    blk = model.blocks[0]
    img = tuple(int(v) for v in model.patch_embed.img_size)
    fc_norm = isinstance(model.fc_norm, nn.LayerNorm)
    if fc_norm == isinstance(model.norm, nn.LayerNorm):
        raise _refuse(model, "a final norm both before and after pooling, or neither")
    return {
        "stem": "patch",
        "img_size": img[0] if img[0] == img[1] else img,
        "patch_size": int(proj.kernel_size[0]),
        "in_chans": int(proj.in_channels),
        "num_classes": int(head.out_features),
        "embed_dim": int(proj.out_channels),
        "depth": len(model.blocks),
        "num_heads": int(blk.attn.num_heads),
        "mlp_ratio": blk.mlp.fc1.out_features / proj.out_channels,
        "class_token": model.cls_token is not None,
        "global_pool": model.global_pool,
        "fc_norm": fc_norm,
        "norm_eps": _eps(blk.norm1),
    }


def _qkv_bias_kind(attn: nn.Module) -> str:
    if getattr(attn, "q_bias", None) is not None:
        return "qv"
    return "qkv" if attn.qkv.bias is not None else "none"


def _block_state(i: int, block: nn.Module, rows: Tensor | None, head_dim: int) -> dict[str, Tensor]:
    """vitpos ``blocks.i.*`` from one timm block (ViT's ls1/ls2 or Eva's and BEiT's gamma_1/gamma_2)."""
    attn = block.attn
    p = f"blocks.{i}."
    out = {f"{p}norm1.weight": block.norm1.weight, f"{p}norm1.bias": block.norm1.bias,
           f"{p}norm2.weight": block.norm2.weight, f"{p}norm2.bias": block.norm2.bias,
           f"{p}attn.proj.weight": attn.proj.weight, f"{p}attn.proj.bias": attn.proj.bias,
           f"{p}mlp.fc1.weight": block.mlp.fc1.weight, f"{p}mlp.fc1.bias": block.mlp.fc1.bias,
           f"{p}mlp.fc2.weight": block.mlp.fc2.weight, f"{p}mlp.fc2.bias": block.mlp.fc2.bias}  # fmt: skip
    out[f"{p}attn.qkv.weight"] = attn.qkv.weight if rows is None else attn.qkv.weight[rows]
    if attn.qkv.bias is not None:
        out[f"{p}attn.qkv.bias"] = attn.qkv.bias if rows is None else attn.qkv.bias[rows]
    if getattr(attn, "q_bias", None) is not None:
        q_bias = attn.q_bias
        if rows is not None:  # the q rows of the permutation, taken back to q_bias's own indices
            q_bias = q_bias[rows[: q_bias.numel()]]
        out[f"{p}attn.q_bias"], out[f"{p}attn.v_bias"] = q_bias, attn.v_bias
    gammas = [getattr(getattr(block, ls, None), "gamma", None) for ls in ("ls1", "ls2")]
    if all(g is None for g in gammas):
        gammas = [getattr(block, "gamma_1", None), getattr(block, "gamma_2", None)]
    if (gammas[0] is None) != (gammas[1] is None):
        raise ConfigError("from_timm: LayerScale on one branch only has no vitpos equivalent")
    if gammas[0] is not None:
        out[f"{p}ls1.gamma"], out[f"{p}ls2.gamma"] = gammas
    return out


def _layer_scale(model: nn.Module) -> float | None:
    blk = model.blocks[0]
    ls = getattr(blk, "ls1", None)
    if isinstance(ls, nn.Module) and hasattr(ls, "gamma"):
        return float(getattr(ls, "init_values", 1e-5))
    if getattr(blk, "gamma_1", None) is not None:
        return float(getattr(blk, "init_values", None) or 1e-5)
    return None


def _absolute_table(model: nn.Module, state: dict) -> None:
    """A learned table: the patch part -> ``table``, a class-token entry folded into the class token."""
    pos = model.pos_embed
    if pos is None:
        return
    n = model.patch_embed.num_patches
    prefix = pos.shape[1] - n
    if prefix not in (0, model.num_prefix_tokens) or (prefix and model.cls_token is None):
        raise _refuse(model, f"a position table of {pos.shape[1]} entries for {n} patches")
    state["table"] = pos[:, prefix:]
    if prefix:
        state["cls_token"] = model.cls_token + pos[:, :prefix]


def timm_to_vitpos(model: nn.Module) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """(ViT keyword arguments, ViT state dict) equivalent to the timm ``model``."""
    family = type(model).__name__
    if family not in FAMILIES:
        raise ConfigError(f"from_timm: timm class {family} is not supported; supported: {', '.join(FAMILIES)}")
    _check_common(model)
    kwargs = _base_kwargs(model)
    kwargs["layer_scale_init"] = _layer_scale(model)
    heads, dim = kwargs["num_heads"], kwargs["embed_dim"]
    head_dim = dim // heads
    qkv_kinds = {_qkv_bias_kind(b.attn) for b in model.blocks}
    if len(qkv_kinds) != 1:
        raise _refuse(model, "different qkv biases per block")
    kwargs["qkv_bias"] = qkv_kinds.pop()
    state: dict[str, Tensor] = {
        "stem.0.weight": model.patch_embed.proj.weight,
        "stem.0.bias": model.patch_embed.proj.bias,
        "head.weight": model.head.weight,
        "head.bias": model.head.bias,
    }
    norm = model.fc_norm if kwargs["fc_norm"] else model.norm
    prefix = "fc_norm" if kwargs["fc_norm"] else "norm"
    state[f"{prefix}.weight"], state[f"{prefix}.bias"] = norm.weight, norm.bias
    if model.cls_token is not None:
        state["cls_token"] = model.cls_token
    pos_state: dict[str, Tensor] = {}
    _absolute_table(model, pos_state)
    if "cls_token" in pos_state:
        state["cls_token"] = pos_state.pop("cls_token")
    rows = None

    if family == "VisionTransformer":
        kwargs["pos"] = "learned" if "table" in pos_state else "none"
        scheme_state = pos_state
    elif family == "Eva":
        rope = model.rope
        rope_name = type(rope).__name__ if rope is not None else None
        if rope_name is None:
            rope_part, rope_state, rope_kwargs = None, {}, {}
        elif rope_name == "RotaryEmbeddingCat":
            if rope.in_pixels or rope.grid_type != "index" or rope.grid_offset or rope.ref_feat_shape is not None:
                raise _refuse(model, "pixel, offset or rescaled rope coordinates")
            if rope.aug_active:
                raise _refuse(model, "rope coordinate augmentation")
            half = bool(getattr(model.blocks[0].attn, "rotate_half", False))
            rows = _qk_rows(heads, head_dim, rope_dim_order(head_dim, rope.grid_indexing, half))
            rope_part, rope_state, rope_kwargs = "rope2d", {}, {"theta": float(rope.temperature)}
        elif rope_name == "RotaryEmbeddingMixed":
            if rope.aug_active:
                raise _refuse(model, "rope coordinate augmentation")
            f = rope.freqs  # (2, depth, heads, d/2): the components along t_x and t_y
            fx, fy = (f[0], f[1]) if rope.grid_indexing == "xy" else (f[1], f[0])  # 'ij': t_x holds the row
            rope_part, rope_state = "rope2d-mixed", {"freqs": torch.stack([fx, fy], dim=-1)}
            rope_kwargs = {"theta": float(rope.temperature)}
        else:
            raise _refuse(model, f"{rope_name} rotary embedding")
        if rope_part is not None and model.num_prefix_tokens != int(kwargs["class_token"]):
            raise _refuse(model, "prefix tokens other than one class token")
        if rope_part and "table" in pos_state:
            kwargs["pos"] = f"{rope_part}+learned"
            kwargs["pos_kwargs"] = {rope_part: rope_kwargs}
            scheme_state = {f"parts.{rope_part}.{k}": v for k, v in rope_state.items()}
            scheme_state["parts.learned.table"] = pos_state["table"]
        elif rope_part:
            kwargs["pos"], kwargs["pos_kwargs"], scheme_state = rope_part, rope_kwargs, rope_state
        else:
            kwargs["pos"] = "learned" if "table" in pos_state else "none"
            scheme_state = pos_state
    else:  # Beit
        if model.pos_embed is not None:
            raise _refuse(model, "an absolute table together with relative bias")
        shared = model.rel_pos_bias.relative_position_bias_table if model.rel_pos_bias is not None else None
        own = [b.attn.relative_position_bias_table for b in model.blocks]
        if shared is None and any(t is None for t in own):
            raise _refuse(model, "blocks without relative position bias")
        grid = tuple(int(v) for v in model.patch_embed.grid_size)
        t = (2 * grid[0] - 1) * (2 * grid[1] - 1)
        # a shared table and a block's own are added to the same logits through the same index: sum them
        tables = torch.stack([(shared if shared is not None else 0) + (o if o is not None else 0) for o in own])
        if tables.shape[1] != t + 3:
            raise _refuse(model, f"a relative table of {tables.shape[1]} entries for a {grid[0]}x{grid[1]} grid")
        kwargs["pos"] = "relbias"
        scheme_state = {"table": tables[:, :t], "prefix_bias": tables[:, t:].transpose(1, 2)}

    for i, block in enumerate(model.blocks):
        state.update(_block_state(i, block, rows, head_dim))
    state.update({f"pos.{k}": v for k, v in scheme_state.items()})
    return kwargs, {k: v.detach().clone() for k, v in state.items()}


def from_timm(model: nn.Module) -> ViT:
    """The vitpos ViT (eval mode) that computes the same logits as the timm ``model``; see the module docstring."""
    kwargs, state = timm_to_vitpos(model)
    vit = ViT(**kwargs)
    vit.load_state_dict(state)
    return vit.eval()


# -- writing timm -----------------------------------------------------------------------------------
def _qkv_bias_full(attn: nn.Module) -> Tensor | None:
    """vitpos attention's q, k, v bias as one (3D,) vector (zeros for k with ``qkv_bias='qv'``), or None."""
    if attn.qv_bias:
        return torch.cat([attn.q_bias, torch.zeros_like(attn.q_bias), attn.v_bias])
    return attn.qkv.bias


def to_timm(vit: ViT) -> nn.Module:
    """A timm model (eval mode) computing the same logits as ``vit``: ``VisionTransformer`` for learned/none,
    ``Eva`` for rope2d / rope2d-mixed (and their ``+learned``), ``Beit`` for relbias with a class token."""
    from timm.layers import LayerNorm
    from timm.models.beit import Beit
    from timm.models.eva import Eva
    from timm.models.vision_transformer import VisionTransformer

    pos_name = next((k for k, v in _pos_names().items() if isinstance(vit.pos, v) and _matches(vit, k)), None)
    if pos_name is None:
        raise ConfigError(f"to_timm: timm has no model for this position scheme; supported: {', '.join(_pos_names())}")
    if vit.pos.train_grid != vit.grid:
        g, t = vit.grid, vit.pos.train_grid
        raise ConfigError(f"to_timm: the position trained on a {t[0]}x{t[1]} grid and serves this model's "
                          f"{g[0]}x{g[1]} by '{vit.pos.method}'; timm's models have no such setting")  # fmt: skip
    if not isinstance(vit.stem[0], nn.Conv2d) or len(vit.stem) != 1:
        raise ConfigError("to_timm: only the patch stem has a timm equivalent")
    conv = vit.stem[0]
    blk = vit.blocks[0]
    dim, heads = conv.out_channels, blk.attn.num_heads
    qkv_bias = "none" if blk.attn.qkv.bias is None and not blk.attn.qv_bias else "some"
    layer_scale = isinstance(blk.ls1, nn.Module) and hasattr(blk.ls1, "gamma")
    common = dict(
        img_size=tuple(g * vit.patch_size for g in vit.grid), patch_size=vit.patch_size, in_chans=conv.in_channels,
        num_classes=vit.head.out_features, global_pool=vit.global_pool, embed_dim=dim, depth=len(vit.blocks),
        num_heads=heads, mlp_ratio=blk.mlp.fc1.out_features / dim, class_token=vit.cls_token is not None,
        norm_layer=partial(LayerNorm, eps=blk.norm1.eps),
    )  # fmt: skip
    fc_norm = isinstance(vit.fc_norm, nn.LayerNorm)
    init_values = 1e-5 if layer_scale else None
    rope_part = next((p for p in ("rope2d-mixed", "rope2d") if pos_name.startswith(p)), None)
    table = None
    if pos_name in ("learned", "none"):
        model = VisionTransformer(**common, qkv_bias=qkv_bias != "none", init_values=init_values,
                                  no_embed_class=True, pos_embed="learn" if pos_name == "learned" else "none",
                                  fc_norm=fc_norm)  # fmt: skip
        table = vit.pos.table if pos_name == "learned" else None
    elif rope_part is not None:
        scheme = vit.pos.parts[rope_part] if "+" in pos_name else vit.pos
        model = Eva(**common, qkv_bias=qkv_bias != "none", init_values=init_values, attn_type="rope",
                    no_embed_class=True, use_abs_pos_emb=pos_name.endswith("+learned"), use_rot_pos_emb=True,
                    rope_type="mixed" if rope_part == "rope2d-mixed" else "cat", rope_grid_indexing="xy",
                    rope_temperature=scheme.theta, use_fc_norm=fc_norm,
                    use_post_transformer_norm=not fc_norm)  # fmt: skip
        table = vit.pos.parts["learned"].table if "+" in pos_name else None
    elif pos_name == "relbias":
        if vit.cls_token is None:
            raise ConfigError("to_timm: timm's BEiT always has a class token; this relbias model has none")
        common.pop("class_token")
        model = Beit(**common, qkv_bias=qkv_bias != "none", init_values=init_values, use_abs_pos_emb=False,
                     use_rel_pos_bias=True, use_fc_norm=fc_norm)  # fmt: skip
    else:  # pragma: no cover - every name of _pos_names is handled above
        raise ConfigError(f"to_timm: timm has no model for scheme '{pos_name}'")

    state: dict[str, Tensor] = {"patch_embed.proj.weight": conv.weight, "patch_embed.proj.bias": conv.bias,
                                "head.weight": vit.head.weight, "head.bias": vit.head.bias}  # fmt: skip
    norm, name = (vit.fc_norm, "fc_norm") if fc_norm else (vit.norm, "norm")
    state[f"{name}.weight"], state[f"{name}.bias"] = norm.weight, norm.bias
    if vit.cls_token is not None:
        state["cls_token"] = vit.cls_token
    if table is not None:
        state["pos_embed"] = table
    if rope_part == "rope2d-mixed":
        freqs = (vit.pos.parts[rope_part] if "+" in pos_name else vit.pos).freqs
        state["rope.freqs"] = freqs.permute(3, 0, 1, 2)  # (depth, heads, d/2, (fx, fy)) -> (2, depth, heads, d/2)
    ls_names = ("ls1.gamma", "ls2.gamma") if isinstance(model, VisionTransformer) else ("gamma_1", "gamma_2")
    for i, b in enumerate(vit.blocks):
        p = f"blocks.{i}."
        for sub in ("norm1", "norm2", "attn.proj", "mlp.fc1", "mlp.fc2"):
            m = b.get_submodule(sub)
            state[f"{p}{sub}.weight"], state[f"{p}{sub}.bias"] = m.weight, m.bias
        state[f"{p}attn.qkv.weight"] = b.attn.qkv.weight
        bias = _qkv_bias_full(b.attn)
        if isinstance(model, Beit):
            if bias is not None:  # no rotation: a k bias shifts every logit of a query alike, softmax drops it
                state[f"{p}attn.q_bias"], state[f"{p}attn.v_bias"] = bias[:dim], bias[2 * dim :]
            t = torch.cat([vit.pos.table[i], vit.pos.prefix_bias[i].transpose(0, 1)], dim=0)
            state[f"{p}attn.relative_position_bias_table"] = t
        elif bias is not None:
            state[f"{p}attn.qkv.bias"] = bias
        if layer_scale:
            state[p + ls_names[0]], state[p + ls_names[1]] = b.ls1.gamma, b.ls2.gamma
    model.load_state_dict({k: v.detach().clone() for k, v in state.items()})
    return model.eval()


def _pos_names() -> dict[str, type]:
    from .pos.compose import ComposedPos
    from .pos.learned import LearnedPos
    from .pos.none import NoPos
    from .pos.relbias import RelBiasPos
    from .pos.rope2d import Rope2dPos
    from .pos.rope2d_mixed import Rope2dMixedPos

    return {"learned": LearnedPos, "none": NoPos, "rope2d": Rope2dPos, "rope2d-mixed": Rope2dMixedPos,
            "relbias": RelBiasPos, "rope2d+learned": ComposedPos, "rope2d-mixed+learned": ComposedPos}  # fmt: skip


def _matches(vit: ViT, name: str) -> bool:
    if "+" not in name:
        return True
    return list(vit.pos.parts) == name.split("+")


__all__ = ["from_timm", "rope_dim_order", "timm_to_vitpos", "to_timm"]
