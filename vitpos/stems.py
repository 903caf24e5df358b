"""Stems: pixels (B, C, H, W) -> a grid of tokens (B, D, H/p, W/p). Independent of the position scheme."""

from __future__ import annotations

import math

from torch import nn

STEMS: tuple[str, ...] = ("patch", "conv")


class PatchStem(nn.Sequential):
    """ViT's patchify: one Conv2d with kernel = stride = patch size. Blind to where a patch sits."""

    def __init__(self, in_chans: int, dim: int, patch_size: int):
        super().__init__(nn.Conv2d(in_chans, dim, kernel_size=patch_size, stride=patch_size))


class ConvStem(nn.Sequential):
    """Stacked 3x3 stride-2 convs with BN + ReLU, then a 1x1 projection (Xiao et al. 2021).

    log2(p) stride-2 convs, channels doubling up to ``dim``. Their zero padding lets tokens at
    the border tell where they are, so even the `none` scheme then sees absolute position.
    """

    def __init__(self, in_chans: int, dim: int, patch_size: int):
        n = int(math.log2(patch_size))
        if 2**n != patch_size or n < 1:
            raise ValueError(f"the conv stem needs a patch size that is a power of 2 (>= 2), got {patch_size}")
        layers: list[nn.Module] = []
        c_in = in_chans
        for i in range(n):
            c_out = max(16, dim >> (n - 1 - i))  # ..., dim/4, dim/2, dim
            layers += [
                nn.Conv2d(c_in, c_out, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(inplace=True),
            ]
            c_in = c_out
        layers.append(nn.Conv2d(c_in, dim, kernel_size=1))
        super().__init__(*layers)


def build_stem(name: str, in_chans: int, dim: int, patch_size: int) -> nn.Module:
    if name == "patch":
        return PatchStem(in_chans, dim, patch_size)
    if name == "conv":
        return ConvStem(in_chans, dim, patch_size)
    raise ValueError(f"unknown stem '{name}'; valid: {', '.join(STEMS)}")
