"""Performance properties, not timings: what keeps a step fast stays true (benchmarks/throughput.py times it).

* the scheme's per-grid work is cached in evaluation and invalidated when its parameters change;
* attention stays on fused kernels: no attn_mask without a bias, a 4-D mask for a fixed one, and the
  fused-forward path of vitpos.attention for a learned one on the CPU;
* torch.compile traces every scheme whole (no graph breaks), for training and across resolutions;
* on CUDA, every scheme trains in bf16-mixed precision, its rotations are built in fp32, and non-bias schemes
  run on the flash kernel.
"""

from __future__ import annotations

import json
import statistics

import pytest
import torch
import torch.nn.functional as F
from helpers import tables  # noqa: E402

import vitpos
import vitpos.attention
from vitpos.attention import LearnedBiasAttention
from vitpos.pos import POS_SCHEMES, PosScheme
from vitpos.pos.base import rotate

pytestmark = pytest.mark.usefixtures("one_thread")

TRAIN = (8, 8)  # the conftest tiny models' training grid (32 px, patch 4)
COMPILED = dict(rtol=1e-4, atol=1e-5)  # a compiled forward against eager (the compiler fuses and reorders fp32 ops)
COMPILED_GRAD = dict(rtol=1e-3, atol=1e-5)  # a compiled backward against eager


def images(grid, batch=2):
    return torch.randn(batch, 3, grid[0] * 4, grid[1] * 4)


def has_position_params(m) -> bool:
    return any(True for _ in m.pos.parameters())


# ---------------------------------------------------------------------------------------------
# the position cache
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [TRAIN, (12, 12)])
@pytest.mark.parametrize("name", POS_SCHEMES)
def test_cache_is_hit_at_the_same_grid_and_missed_at_another(tiny, name, grid, builds):
    m = tiny(name).eval()
    with torch.no_grad():
        m(images(grid))
        after_first = builds()
        m(images(grid))
        assert builds() == after_first, "a second eval forward at the same grid recomputed"
        m(images((grid[0] - 2, grid[1] + 2)))
    if name in ("learned", "sincos2d", "rope2d", "relbias"):  # each computes something per grid
        assert builds() > after_first, "a new grid was served from another grid's entry"
    elif builds() == after_first:  # then the scheme caches nothing at all (none, peg)
        assert after_first == 0 and not cached_entries(m), "a new grid was served from another grid's entry"


def cached_entries(m) -> int:
    return sum(len(mod._cache) for mod in m.pos.modules() if isinstance(mod, PosScheme))


@pytest.mark.parametrize("grid", [TRAIN, (12, 12)])
@pytest.mark.parametrize("name", POS_SCHEMES)
def test_optimizer_step_invalidates_the_cache(tiny, name, grid, builds):
    """Step while staying in eval mode: only the parameters' versions can tell the cache it is stale."""
    m = tiny(name).eval()
    if not has_position_params(m):
        pytest.skip(f"{name} has no position parameters")
    x = images(grid)
    with torch.no_grad():
        before = m(x)
    opt = torch.optim.AdamW(m.pos.parameters(), lr=0.5)  # plain (not fused): bumps the version counter
    m(x).square().mean().backward()
    opt.step()
    misses = builds()
    with torch.no_grad():
        served = m(x)
        for mod in m.pos.modules():
            if isinstance(mod, PosScheme):
                mod._cache.clear()
        fresh = m(x)
    if name == "relbias" or (name == "learned" and grid != TRAIN):  # learned at TRAIN serves the parameter
        assert builds() > misses, "the forward after a step did not recompute"
    torch.testing.assert_close(served, fresh, rtol=0, atol=0, msg="a stale cache entry survived the step")
    assert not torch.allclose(before, served), "the stepped position parameters did not reach the output"


@pytest.mark.parametrize("name", ["rope2d", "rope2d-mixed", "rope2d+peg"])
def test_rope_is_applied_without_per_batch_copies(tiny, name):
    """The rotation handed to the blocks has no batch dimension, and rotating q keeps nothing of q's size
    for backward beyond what autograd needs to turn the gradient back (the table, or q for learned angles)."""
    m = tiny(name).train()
    batch, grid = 8, (6, 10)
    n, heads, d = grid[0] * grid[1], m.pos.num_heads, m.pos.head_dim
    for a in m.pos.attn_pos(grid):
        assert a.rope.shape[-3:] == (n, d // 2, 2) and a.rope.dim() <= 4 and a.rope.shape[0] != batch
    rot = m.pos.attn_pos(grid)[0].rope
    q = torch.randn(batch, heads, n, d, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        rotate(q, rot)
    learned_angles = rot.requires_grad
    assert max(saved) <= (q.numel() if learned_angles else rot.numel())


# ---------------------------------------------------------------------------------------------
# SDPA sees a mask only from a bias scheme
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", POS_SCHEMES)
def test_attention_stays_on_fused_kernels(tiny, name, train, monkeypatch):
    """No bias: SDPA gets no mask. A fixed bias: a 4-D mask (the CPU flash kernel's condition). A learned
    bias in training on the CPU: the fused-forward path of vitpos.attention, never SDPA's math path."""
    grid = (6, 10)
    m = tiny(name).train(train)
    attn = m.pos.attn_pos(grid)
    has_bias = [a.bias is not None for a in attn]
    if name in ("learned", "sincos2d", "rope2d", "none"):
        assert not any(has_bias)
    if name == "relbias":
        assert all(has_bias)
    calls = []
    sdpa, learned = F.scaled_dot_product_attention, LearnedBiasAttention.apply

    def spy_sdpa(q, k, v, attn_mask=None, **kw):
        fused = torch._fused_sdp_choice(q, k, v, attn_mask) != 0  # 0: the math path
        calls.append(("sdpa", attn_mask, fused))
        return sdpa(q, k, v, attn_mask=attn_mask, **kw)

    def spy_learned(q, k, v, bias, scale):
        calls.append(("learned-bias", bias, True))
        return learned(q, k, v, bias, scale)

    monkeypatch.setattr(vitpos.attention.F, "scaled_dot_product_attention", spy_sdpa)
    monkeypatch.setattr(LearnedBiasAttention, "apply", spy_learned)
    with torch.set_grad_enabled(train):
        m(images(grid))
    assert len(calls) == len(m.blocks), "the spies did not see every block's attention"
    n = grid[0] * grid[1]
    # a fixed bias composed with a learned part (alibi2d+peg) is still a fixed bias: ask the bias itself
    learned_bias = train and any(a.bias is not None and a.bias.requires_grad for a in attn)
    for (path, mask, fused), bias in zip(calls, has_bias):
        assert fused, f"{name}: attention fell back to SDPA's math path"
        if not bias:
            assert path == "sdpa" and mask is None, f"{name} passed an attn_mask without a bias"
        elif learned_bias:
            assert path == "learned-bias" and mask.shape == (m.pos.num_heads, n, n)
        else:
            assert path == "sdpa" and mask.shape == (1, m.pos.num_heads, n, n)


# ---------------------------------------------------------------------------------------------
# torch.compile
# ---------------------------------------------------------------------------------------------


def check_compile(name: str) -> None:
    """Compiled training steps, then compiled eval at two resolutions, each matching eager.

    fullgraph=True makes any graph break an error, and error_on_recompile any recompile in steady
    state: a cache keyed on a parameter's data_ptr()/_version breaks the graph, and a Python value
    bumped inside the graph is guarded on, recompiling every step (slower than eager).
    """
    torch._dynamo.reset()
    m = vitpos.create_model(name, img_size=16, patch_size=4, embed_dim=16, depth=1, num_heads=2, num_classes=3)
    with torch.no_grad():  # eager first: einops registers each new tensor type (Parameter) in a global
        for side in (16, 24):  # dict the graph guards on, a one-off recompile unrelated to vitpos
            m(torch.randn(1, 3, side, side))
    compiled = torch.compile(m, fullgraph=True, dynamic=False)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x = torch.randn(2, 3, 16, 16)

    def step():
        opt.zero_grad()
        compiled(x).square().mean().backward()
        opt.step()

    step()
    step()  # the first calls may fill the scheme's cache (one recompile at most)
    with torch._dynamo.config.patch(error_on_recompile=True):
        step()
        opt.zero_grad()
        out = compiled(x)
        out.square().mean().backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    opt.zero_grad()
    ref = m(x)
    ref.square().mean().backward()
    torch.testing.assert_close(out, ref, **COMPILED)
    for n, p in m.named_parameters():
        torch.testing.assert_close(grads[n], p.grad, **COMPILED_GRAD, msg=lambda s, n=n: f"grad of {n}: {s}")
    m.eval()
    with torch.no_grad():
        for side in (16, 24):  # the training grid and a larger one (transfer methods run compiled)
            xe = torch.randn(2, 3, side, side)
            compiled(xe)
            with torch._dynamo.config.patch(error_on_recompile=True):
                torch.testing.assert_close(compiled(xe), m(xe), **COMPILED)


def test_compile_relbias():
    """The default run's one compile test: relbias exercises both a parameter-keyed cache and a bias."""
    check_compile("relbias")


@pytest.mark.slow
@pytest.mark.parametrize("name", POS_SCHEMES)
def test_compile_every_scheme(name):
    check_compile(name)


# ---------------------------------------------------------------------------------------------
# CUDA (skipped without a GPU)
# ---------------------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
# head_dim 64, as ViT-S/B: what the flash kernel is built for. 8x8 grid.
GPU_DIMS = dict(img_size=64, patch_size=8, embed_dim=128, depth=2, num_heads=2, num_classes=10)


@cuda
@pytest.mark.parametrize("name", POS_SCHEMES)
def test_cuda_bf16_autocast_forward_backward(name):
    m = vitpos.create_model(name, **GPU_DIMS).cuda().train()
    x = torch.randn(4, 3, 64, 64, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = m(x)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    out.float().square().mean().backward()
    for n, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
    m.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        assert torch.isfinite(m(torch.randn(4, 3, 96, 96, device="cuda"))).all()  # another grid


@cuda
@pytest.mark.parametrize("name", POS_SCHEMES)
def test_cuda_sdpa_runs_on_a_fused_kernel(name):
    """No bias: the flash kernel serves every block. A bias rules flash out, but the memory-efficient
    kernel takes it, so no scheme falls back to the (B, heads, N, N) math path."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    m = vitpos.create_model(name, **GPU_DIMS).cuda().train()
    biased = any(a.bias is not None for a in m.pos.attn_pos((8, 8), torch.device("cuda")))
    if name in ("learned", "sincos2d", "rope2d", "none"):
        assert not biased
    backend = SDPBackend.EFFICIENT_ATTENTION if biased else SDPBackend.FLASH_ATTENTION
    x = torch.randn(4, 3, 64, 64, device="cuda")
    with sdpa_kernel([backend]), torch.autocast("cuda", dtype=torch.bfloat16):
        out = m(x)  # raises if a block's attention cannot run on that kernel
        out.float().square().mean().backward()
    assert torch.isfinite(out).all()
    for n, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n


@cuda
@pytest.mark.parametrize("name", POS_SCHEMES)
def test_cuda_sdpa_chooses_flash_without_a_bias_and_efficient_or_cudnn_with_one(name):
    """Left to choose (no kernel forced), SDPA runs each block on flash where the scheme adds no bias and on the
    memory-efficient or cuDNN kernel where it does: never on the math path (the profiler names the ops it ran)."""
    from torch.profiler import ProfilerActivity, profile

    m = vitpos.create_model(name, **GPU_DIMS).cuda().train()
    biased = any(a.bias is not None for a in m.pos.attn_pos((8, 8), torch.device("cuda")))
    x = torch.randn(4, 3, 64, 64, device="cuda")
    with profile(activities=[ProfilerActivity.CPU]) as prof, torch.autocast("cuda", dtype=torch.bfloat16):
        m(x).float().square().mean().backward()
    ops = {e.key for e in prof.key_averages()}
    fused = {"aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention"} if biased \
        else {"aten::_scaled_dot_product_flash_attention"}  # fmt: skip
    assert ops & fused, sorted(o for o in ops if "scaled_dot" in o)
    assert "aten::_scaled_dot_product_attention_math" not in ops


@cuda
@pytest.mark.parametrize("name", POS_SCHEMES)
def test_cuda_bf16_mixed_training_of_every_scheme(name):
    """Lightning's bf16-mixed precision on one GPU: a few optimizer steps of every scheme train (every parameter
    moves, the position scheme's too, and stays finite), then validation runs."""
    import lightning as L

    from vitpos.config import Config
    from vitpos.data import build_datamodule
    from vitpos.lit import LitViT

    cfg = Config()
    cfg.model.pos, cfg.model.img_size, cfg.model.patch_size = name, 64, 8
    cfg.model.embed_dim, cfg.model.depth, cfg.model.num_heads = 128, 2, 2
    cfg.data.train_size, cfg.data.val_size, cfg.data.test_size, cfg.data.batch_size = 64, 32, 32, 16
    L.seed_everything(0)
    dm = build_datamodule(cfg.data, img_size=cfg.model.img_size)
    cfg.model.num_classes, cfg.model.in_chans = dm.num_classes, dm.in_chans
    lit = LitViT(cfg.to_dict())
    start = {n: p.detach().clone() for n, p in lit.model.named_parameters()}
    trainer = L.Trainer(accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=3, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, limit_val_batches=1)  # fmt: skip
    trainer.fit(lit, datamodule=dm)
    assert trainer.global_step == 3
    for n, p in lit.model.named_parameters():
        assert p.dtype == torch.float32 and torch.isfinite(p).all(), n  # mixed: fp32 weights
        assert not torch.equal(p.detach().cpu(), start[n]), f"{n} did not move"


ROTATING = [n for n in POS_SCHEMES if any(
    p.rope is not None or p.rotation is not None
    for p in vitpos.create_model(n, **GPU_DIMS).pos.attn_pos((8, 8)))]  # fmt: skip


@cuda
@pytest.mark.parametrize("name", ROTATING)
def test_cuda_rotation_angles_are_fp32_under_bf16_autocast(name):
    """Under bf16 autocast on CUDA the q/k rotations are built in fp32 (bf16 angles lose a patch's position at large
    offsets): the same fp32 tensors as without autocast, on the training grid and an unseen non-square one."""
    m = vitpos.create_model(name, **GPU_DIMS).cuda().eval()
    for grid in ((8, 8), (12, 20)):
        with torch.no_grad():
            plain = m.pos.attn_pos(grid, torch.device("cuda"))
            m.pos._cache.clear()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                mixed = m.pos.attn_pos(grid, torch.device("cuda"))
        for a, b in zip(plain, mixed, strict=True):
            for field in ("rope", "rotation"):
                x, y = getattr(a, field), getattr(b, field)
                if x is not None:
                    assert y.dtype == x.dtype == torch.float32, (field, y.dtype)
                    torch.testing.assert_close(y, x, rtol=0, atol=0)


def test_throughput_benchmark_quick_record_renders(tmp_path, monkeypatch):
    """benchmarks/throughput.py --quick writes its JSON (every contender, per-round rates, memory, FLOPs, the
    `shapes` rate); benchmarks.pages.performance makes the page from it. A POS:STEM contender is built with that
    stem (the conv stem's extra FLOPs show it)."""
    from benchmarks import throughput
    from benchmarks.pages import performance

    out = tmp_path / "performance.json"
    assert throughput.main(["--quick", "--schemes", "rope2d", "none", "none:conv", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [g["img_size"] for g in data["grids"]] == [8, 16]
    for g in data["grids"]:
        assert set(g["contenders"]) == {"rope2d", "none", "none:conv", "timm:rope2d"}
        assert all(len(c["img_s"]) == 2 and c["gflops_fwd"] > 0 for c in g["contenders"].values())
        assert g["contenders"]["none:conv"]["gflops_fwd"] > g["contenders"]["none"]["gflops_fwd"]
    assert data["matmul_peak_tflops"] > 0 and all(g["shapes_img_s"] > 0 for g in data["grids"])
    grids = tables(performance.render(data, tmp_path))[:2]
    for g, table in zip(data["grids"], grids, strict=True):  # every contender's median rate, one row each
        assert {r[0]: r[1] for r in table[1:]} == {
            {"none:conv": "`none` (conv stem)", "timm:rope2d": "timm rope2d"}.get(
                n, f"`{n}`"
            ): f"{statistics.median(c['img_s']):.1f}"
            for n, c in g["contenders"].items()
        }


def test_throughput_benchmark_refuses_an_unknown_contender_in_one_line(capsys):
    from benchmarks import throughput

    with pytest.raises(SystemExit) as e:
        throughput.main(["--quick", "--schemes", "rope2d:bogus"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error: bad run 'rope2d:bogus'" in err and "Traceback" not in err
