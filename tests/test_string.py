"""`string`: Cayley-STRING, rope2d after a learned orthogonal P = (I - S)(I + S)^-1 per block and head.

* at initialisation (S = 0) it is rope2d, bit for bit; S learns (its gradient is not zero there);
* P is orthogonal for any S, and the logits still depend only on the offset between the tokens;
* folded for inference (``ViT.folded``), P moves into the q and k projections: the folded model computes what the
  unfolded one does and is a rope2d model, whose exported graph is rope2d's node for node (the ONNX path is
  checked for every scheme in test_export.py, string's with a random S).
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from helpers import TRAIN

import vitpos
from vitpos.export import RTOL, relative_difference
from vitpos.pos import POS_REGISTRY
from vitpos.pos.base import mix_qkv, rotate
from vitpos.pos.string import cayley

pytestmark = pytest.mark.usefixtures("one_thread")

FP32 = dict(rtol=1e-5, atol=1e-5)  # fp32 products of unit-scale orthogonal matrices and vectors
LOGIT = dict(rtol=1e-4, atol=1e-4)  # logits of random q, k after an fp32 map and rotation each
TINY = dict(img_size=32, patch_size=4, embed_dim=32, depth=2, num_heads=4, num_classes=5)


def model(pos: str, skew: float = 0.0, **kw) -> vitpos.ViT:
    torch.manual_seed(0)
    m = vitpos.create_model(pos, **{**TINY, **kw}).eval()
    if skew:
        with torch.no_grad():
            m.pos.skew.normal_(0, skew)
    return m


@pytest.mark.parametrize("class_token", [False, True])
def test_string_is_rope2d_at_initialisation(class_token):
    string, rope = model("string", class_token=class_token), model("rope2d", class_token=class_token)
    assert set(string.state_dict()) - set(rope.state_dict()) == {"pos.skew"} and not string.pos.skew.any()
    assert torch.equal(string.pos.orthogonal(), torch.eye(8).expand(2, 4, 8, 8))
    assert set(string.pos.methods) == set(rope.pos.methods)
    with torch.no_grad():
        for method in rope.pos.methods:  # each default aside (string's was chosen apart): the same under every method
            string.pos.method = rope.pos.method = method
            for mode in ("eval", "train"):
                string.train(mode == "train"), rope.train(mode == "train")
                for size in [(32, 32), (24, 40)]:
                    x = torch.randn(2, 3, *size)
                    assert torch.equal(string(x), rope(x)), (method, mode, size)
    string.train()
    string(torch.randn(2, 3, 32, 32)).square().mean().backward()
    assert string.pos.skew.grad.abs().max() > 0  # S learns from its start


def test_cayley_map_is_orthogonal_and_cayleys():
    skew = torch.randn(3, 6, 6, dtype=torch.float64)
    skew = skew - skew.transpose(-1, -2)
    p = cayley(skew)
    eye = torch.eye(6, dtype=torch.float64)
    torch.testing.assert_close(p.transpose(-1, -2) @ p, eye.expand_as(p))
    torch.testing.assert_close(p, (eye - skew) @ torch.linalg.inv(eye + skew))  # the formula's order
    assert torch.allclose(torch.linalg.det(p), torch.ones(3, dtype=torch.float64))  # a rotation, never a reflection
    m = model("string", skew=0.5)
    p = m.pos.orthogonal()
    torch.testing.assert_close(p.transpose(-1, -2) @ p, torch.eye(8).expand_as(p), **FP32)


def test_string_logits_depend_only_on_the_offset():
    m = model("string", skew=0.5, embed_dim=64)  # head dim 16
    m.pos.method = "extrapolate"  # integer positions on both grids, so that shifted pairs keep their offsets
    small, big, shift, n = TRAIN, (13, 11), (4, 2), 256
    a_small, a_big = m.pos.attn_pos(small)[1], m.pos.attn_pos(big)[1]
    p = a_small.mix[2]  # block 1, head 2
    assert torch.equal(p, a_big.mix[2])
    q, k = torch.randn(n, 16), torch.randn(n, 16)
    y1, y2 = torch.randint(0, small[0], (2, n))
    x1, x2 = torch.randint(0, small[1], (2, n))
    i, j = y1 * small[1] + x1, y2 * small[1] + x2
    bi, bj = (y1 + shift[0]) * big[1] + x1 + shift[1], (y2 + shift[0]) * big[1] + x2 + shift[1]

    def logits(rope, a, b):
        return (rotate(q @ p.T, rope[a]) * rotate(k @ p.T, rope[b])).sum(-1)

    here, there = logits(a_small.rope, i, j), logits(a_big.rope, bi, bj)
    torch.testing.assert_close(there, here, **LOGIT)
    plain = (rotate(q, a_small.rope[i]) * rotate(k, a_small.rope[j])).sum(-1)  # rope2d's: P changes what is seen
    assert (here - plain).abs().max() > 1e-2
    # the packed projection is turned by P per head: what mix_qkv gives is P q, P k and v untouched
    qkv = torch.randn(2, 5, 3 * 64)
    mixed = mix_qkv(qkv, a_small, 4).unflatten(-1, (3, 4, 16))
    torch.testing.assert_close(
        mixed[:, :, 0], torch.einsum("hij,bnhj->bnhi", a_small.mix, qkv.unflatten(-1, (3, 4, 16))[:, :, 0])
    )
    assert torch.equal(mixed[:, :, 2], qkv.unflatten(-1, (3, 4, 16))[:, :, 2])


@pytest.mark.parametrize("qkv_bias", ["qkv", "qv", "none"])
def test_folded_string_is_rope2d_and_computes_the_same(qkv_bias):
    m = model("string", skew=0.5, qkv_bias=qkv_bias, class_token=True)
    with torch.no_grad():  # biases away from zero, so that folding them is checked
        for name, p in m.named_parameters():
            if "bias" in name and "pos." not in name:
                p.normal_(0, 0.5)
    folded = m.folded()
    assert type(folded.pos) is POS_REGISTRY["rope2d"] and not any(n.startswith("pos.") for n in folded.state_dict())
    assert m.pos.skew.abs().max() > 0  # the original is untouched
    for size in [(32, 32), (24, 48), (64, 40)]:
        a, b = m.pos.attn_pos((size[0] // 4, size[1] // 4))[0], folded.pos.attn_pos((size[0] // 4, size[1] // 4))[0]
        assert b.mix is None and torch.equal(a.rope, b.rope)
        x = torch.randn(2, 3, *size)
        with torch.no_grad():
            assert relative_difference(folded(x), m(x)) <= RTOL
    tokens = torch.randn(2, 1 + 64, 32)  # q, k, v of each block, turned: the same from the folded projection
    for block, b_folded, a, a_folded in zip(m.blocks, folded.blocks, m.pos.attn_pos(TRAIN), folded.pos.attn_pos(TRAIN)):
        for t, t_folded in zip(block.attn.heads_qkv(tokens, a), b_folded.attn.heads_qkv(tokens, a_folded)):
            torch.testing.assert_close(t_folded, t, **FP32)
    m.pos.method = "interpolate"
    assert m.folded().pos.method == "interpolate"


def test_exported_folded_string_is_rope2ds_graph():
    """vitpos.export exports the folded model, checked against the unfolded one: it runs rope2d's operations, no
    more, so P costs nothing at inference."""

    def ops(program: torch.export.ExportedProgram) -> Counter:
        return Counter(str(n.target) for n in program.graph.nodes if n.op == "call_function")

    folded = model("string", skew=0.5)
    string = vitpos.export_program(folded, dynamic=False)  # raises if it differs from eager
    plain = model("rope2d")
    plain.pos.method = folded.pos.method  # the same transfer method (string's default is yarn, rope2d's interpolate)
    rope = ops(vitpos.export_program(plain, dynamic=False))
    assert ops(string) == rope and sum(rope.values()) > 50
    unfolded = torch.export.export(model("string", skew=0.5), (torch.randn(1, 3, 32, 32),))
    assert sum(ops(unfolded).values()) > sum(rope.values())  # unfolded, P costs operations
