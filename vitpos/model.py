"""One Vision Transformer for every position scheme: position enters only through ``self.pos``."""

from __future__ import annotations

import copy
import numbers
from dataclasses import replace

import torch
import torch.nn.functional as F
from einops import rearrange
from timm.layers import DropPath, LayerScale, Mlp, trunc_normal_
from torch import Tensor, nn

from .attention import attention
from .pos import POS_REGISTRY, AttnPos, PosAug, build_pos
from .pos.base import mix_qkv, rotate_qk
from .resolution import to_hw
from .stems import STEMS, build_stem

QKV_BIAS = ("qkv", "qv", "none")  # bias on q, k and v (ViT); on q and v only (BEiT, EVA); none


class Attention(nn.Module):
    """Multi-head self-attention (fused kernels, see vitpos.attention); rotation and bias come from the AttnPos.

    ``qkv_bias="qv"`` keeps q and v biases (``q_bias``, ``v_bias``) and none on k, as BEiT: without a
    rotation a k bias adds the same logit to every key of a query, which softmax ignores.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: str = "qkv"):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"embed_dim {dim} is not divisible by num_heads {num_heads}")
        if qkv_bias not in QKV_BIAS:
            raise ValueError(f"qkv_bias must be one of {', '.join(QKV_BIAS)}, got '{qkv_bias}'")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias == "qkv")
        self.qv_bias = qkv_bias == "qv"
        if self.qv_bias:
            self.q_bias = nn.Parameter(torch.zeros(dim))
            self.v_bias = nn.Parameter(torch.zeros(dim))
        self.proj = nn.Linear(dim, dim)

    def project_qkv(self, x: Tensor) -> Tensor:
        """(B, N, D) -> (B, N, 3D): q, k, v for all heads."""
        if not self.qv_bias:
            return self.qkv(x)
        bias = torch.cat([self.q_bias, torch.zeros_like(self.q_bias), self.v_bias])
        return F.linear(x, self.qkv.weight, bias)

    @torch.no_grad()
    def fold_qk(self, mix: Tensor) -> None:
        """Fold a linear map per head, (heads, d, d), into the q and k projections: they then give mix q, mix k."""
        w = rearrange(self.qkv.weight, "(three h d) c -> three h d c", three=3, h=self.num_heads)  # a view
        w[:2] = torch.einsum("hij,thjc->thic", mix.to(w.dtype), w[:2].clone())
        biases = []  # views of the q (and k) biases, (parts, heads, d)
        if self.qkv.bias is not None:
            biases.append(rearrange(self.qkv.bias, "(three h d) -> three h d", three=3, h=self.num_heads)[:2])
        if self.qv_bias:  # k has no bias here
            biases.append(rearrange(self.q_bias, "(one h d) -> one h d", one=1, h=self.num_heads))
        for b in biases:
            b.copy_(torch.einsum("hij,thj->thi", mix.to(b.dtype), b.clone()))

    def heads_qkv(self, x: Tensor, pos: AttnPos) -> tuple[Tensor, Tensor, Tensor]:
        """(B, N, D) -> q, k, v, each (B, h, N, d), with q and k rotated by the block's position."""
        qkv = mix_qkv(self.project_qkv(x), pos, self.num_heads)
        q, k, v = rearrange(qkv, "b n (three h d) -> three b h n d", three=3, h=self.num_heads)
        q, k = rotate_qk(q, k, pos)
        return q, k, v

    def logit_scale(self, pos: AttnPos) -> float | Tensor:
        return pos.logit_scale * self.head_dim**-0.5

    def scaled_q(self, q: Tensor, pos: AttnPos) -> tuple[Tensor, float]:
        """q and the attention kernel's scale. A position's logit scale is a number, or under ``torch.export`` a
        0-d tensor (YaRN's temperature of a symbolic grid, vitpos.pos.rope2d), which the kernel cannot take as its
        scale: q carries it instead."""
        if isinstance(pos.logit_scale, Tensor):
            return q * pos.logit_scale.to(q.dtype), self.head_dim**-0.5
        return q, self.logit_scale(pos)

    def weights(self, x: Tensor, pos: AttnPos) -> Tensor:
        """(B, h, N, N) the softmax weights ``forward`` applies to v, written out (forward never forms them:
        its kernels are fused), for probes such as vitpos.diagnose."""
        q, k, _ = self.heads_qkv(x, pos)
        logits = (q @ k.transpose(-1, -2)) * self.logit_scale(pos)
        if pos.bias is not None:
            logits = logits + pos.bias.to(logits.dtype)
        return logits.softmax(dim=-1)

    def forward(self, x: Tensor, pos: AttnPos) -> Tensor:
        q, k, v = self.heads_qkv(x, pos)
        q, scale = self.scaled_q(q, pos)
        x = attention(q, k, v, pos.bias, scale=scale, block_mask=pos.block_mask)  # (B, h, N, d)
        return self.proj(rearrange(x, "b h n d -> b n (h d)"))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm(x)), x + mlp(norm(x)), with optional LayerScale and DropPath."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float,
        drop_path: float = 0.0,
        layer_scale_init: float | None = None,
        qkv_bias: str = "qkv",
        norm_eps: float = 1e-5,
    ):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads, qkv_bias)
        self.ls1 = LayerScale(dim, layer_scale_init) if layer_scale_init else nn.Identity()
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=nn.GELU)
        self.ls2 = LayerScale(dim, layer_scale_init) if layer_scale_init else nn.Identity()
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: Tensor, pos: AttnPos) -> Tensor:
        x = x + self.drop_path(self.ls1(self.attn(self.norm1(x), pos)))
        return x + self.drop_path(self.ls2(self.mlp(self.norm2(x))))


class ViT(nn.Module):
    """A ViT whose patch-position strategy is the ``pos`` scheme; any grid the patch size divides is served.

    ``pos_grid``: the token grid the scheme trained on where it is not ``img_size``'s; the scheme then serves the
    model's own grid by its transfer method, as it serves any other (a run fine-tuned at a new size keeps its start's
    grid this way: ``vitpos.pretrained.apply_architecture``)."""

    def __init__(
        self,
        *,
        pos: str = "rope2d",
        stem: str = "patch",
        img_size: int | tuple[int, int] = 32,
        patch_size: int = 4,
        in_chans: int = 3,
        num_classes: int = 10,
        embed_dim: int = 192,
        depth: int = 6,
        num_heads: int = 3,
        mlp_ratio: float = 4.0,
        class_token: bool = False,
        global_pool: str = "avg",
        drop_path_rate: float = 0.0,
        layer_scale_init: float | None = None,
        pos_kwargs: dict | None = None,
        pos_aug: PosAug | str | None = None,
        fc_norm: bool = False,
        qkv_bias: str = "qkv",
        norm_eps: float = 1e-5,
        pos_grid: tuple[int, int] | None = None,
    ):
        super().__init__()
        if pos not in POS_REGISTRY:
            raise ValueError(f"unknown position scheme '{pos}'; valid: {', '.join(POS_REGISTRY)}")
        if stem not in STEMS:
            raise ValueError(f"unknown stem '{stem}'; valid: {', '.join(STEMS)}")
        if global_pool not in ("avg", "token"):
            raise ValueError(f"global_pool must be 'avg' or 'token', got '{global_pool}'")
        if global_pool == "token" and not class_token:
            raise ValueError("global_pool='token' needs class_token=True")
        sizes = {"embed_dim": embed_dim, "depth": depth, "num_heads": num_heads, "patch_size": patch_size,
                 "in_chans": in_chans, "num_classes": num_classes}  # fmt: skip
        for name, value in sizes.items():
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        img_hw = to_hw(img_size)
        self.patch_size = patch_size
        self.grid = self.grid_for(img_hw)
        self.global_pool = global_pool
        self.num_prefix_tokens = int(class_token)

        self.stem = build_stem(stem, in_chans, embed_dim, patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if class_token else None
        self.pos = build_pos(
            pos,
            dim=embed_dim,
            num_heads=num_heads,
            depth=depth,
            grid=self.grid if pos_grid is None else to_hw(pos_grid),  # where they differ, the method serves self.grid
            num_prefix_tokens=self.num_prefix_tokens,
            pos_aug=pos_aug,
            **(pos_kwargs or {}),
        )
        dpr = torch.linspace(0, drop_path_rate, depth).tolist()
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, mlp_ratio, dpr[i], layer_scale_init, qkv_bias, norm_eps) for i in range(depth)
        )
        # the final norm acts on every token, or (fc_norm, as timm's avg-pooled ViT and BEiT) on the pooled one
        self.norm = nn.Identity() if fc_norm else nn.LayerNorm(embed_dim, eps=norm_eps)
        self.fc_norm = nn.LayerNorm(embed_dim, eps=norm_eps) if fc_norm else nn.Identity()
        self.head = nn.Linear(embed_dim, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        # timm/DeiT init; the scheme initialised its own parameters already.
        for name, m in self.named_modules():
            if name.startswith("pos"):
                continue
            if isinstance(m, nn.Linear):
                trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        if self.cls_token is not None:
            nn.init.normal_(self.cls_token, std=1e-6)

    def grid_for(self, hw: tuple[int, int]) -> tuple[int, int]:
        """Token grid for an image of (H, W); the patch size must divide both."""
        h, w = hw
        p = self.patch_size
        if h % p or w % p or h <= 0 or w <= 0:
            raise ValueError(f"image size {h}x{w} is not a positive multiple of the patch size {p}")
        return h // p, w // p

    def forward_features(self, images: Tensor, logit_scale: float = 1.0) -> Tensor:
        """(B, C, H, W) -> (B, P + N, D) tokens (P prefix tokens), normalised unless fc_norm (then after pooling).

        ``logit_scale`` multiplies every block's attention logits on top of the scheme's own scale (an evaluation
        control: log-n scaling keeps attention as sharp on a larger grid)."""
        self.grid_for(images.shape[-2:])
        x = self.stem(images)  # (B, D, h, w)
        grid = (x.shape[-2], x.shape[-1])
        x = self.pos.tokens(rearrange(x, "b d h w -> b (h w) d"), grid)  # patch tokens only
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        attn_pos = self.pos.attn_pos(grid, x.device)  # once per forward, shared by the blocks
        if logit_scale != 1.0:
            attn_pos = [replace(p, logit_scale=p.logit_scale * logit_scale) for p in attn_pos]
        for i, block in enumerate(self.blocks):
            x = block(x, attn_pos[i])
            x = self.pos.after_block(x, grid, i)
        return self.norm(x)

    def forward(self, images: Tensor, *, pool_mask: Tensor | None = None, logit_scale: float = 1.0) -> Tensor:
        """(B, C, H, W) -> (B, num_classes) logits.

        ``pool_mask`` ((h, w) bool over the token grid) averages only the patch tokens it marks (an evaluation
        control: pool over the scene, not the background a larger canvas adds); average pooling only."""
        x = self.forward_features(images, logit_scale)
        if self.global_pool == "token":
            if pool_mask is not None:
                raise ValueError("pool_mask needs global_pool='avg'")
            x = x[:, 0]
        elif pool_mask is None:
            x = x[:, self.num_prefix_tokens :].mean(dim=1)
        else:
            keep = rearrange(pool_mask, "h w -> (h w)").to(x.device)
            x = x[:, self.num_prefix_tokens :][:, keep].mean(dim=1)  # (B, D) over the marked tokens
        return self.head(self.fc_norm(x))

    def folded(self) -> ViT:
        """A copy for inference with what the scheme can fold into the weights folded (``PosScheme.fold``: STRING's
        orthogonal maps into the q and k projections); it computes what this model computes."""
        model = copy.deepcopy(self)
        scheme, mixes = model.pos.fold()
        if mixes is not None:
            for block, mix in zip(model.blocks, mixes, strict=True):
                block.attn.fold_qk(mix)
        model.pos = scheme
        return model

    def no_weight_decay(self) -> set[str]:
        """Full names of parameters that must not be decayed: the scheme's own, and the class token."""
        names = {f"pos.{n}" for n in self.pos.no_weight_decay()}
        return names | ({"cls_token"} if self.cls_token is not None else set())


def create_model(pos: str = "rope2d", *, stem: str = "patch", img_size: int = 32, patch_size: int = 4,
                 num_classes: int = 10, embed_dim: int = 192, depth: int = 6, num_heads: int = 3,
                 mlp_ratio: float = 4.0, **more) -> ViT:  # fmt: skip
    """Build a ViT with position scheme ``pos`` (see ``vitpos.POS_SCHEMES``); timm's size keywords."""
    return ViT(pos=pos, stem=stem, img_size=img_size, patch_size=patch_size, num_classes=num_classes,
               embed_dim=embed_dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio, **more)  # fmt: skip
