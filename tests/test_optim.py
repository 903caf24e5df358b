"""The position rule of the optimizer: lr x pos_lr_scale and a decay towards where training started."""

from __future__ import annotations

import pytest
import torch

import vitpos
from vitpos.optim import AdamW, lr_lambdas, param_groups, pos_ramp, warmup_cosine

pytestmark = pytest.mark.usefixtures("one_thread")


def zero_grads(params: list[torch.nn.Parameter]) -> None:
    for p in params:
        p.grad = torch.zeros_like(p)


def test_decay_to_start_pulls_towards_the_first_value_not_zero():
    """With a zero gradient Adam's update is zero, so one step is the decay alone: p - p0 shrinks by lr * w."""
    start = torch.tensor([1.0, -2.0, 0.5])
    drift = torch.tensor([0.3, 0.3, -0.1])
    for target in ("start", "zero"):
        p = torch.nn.Parameter(start.clone())
        decay = {"weight_decay": 0.0, "decay_to_start": 2.0} if target == "start" else {"weight_decay": 2.0}
        opt = AdamW([{"params": [p], "lr": 0.1, **decay}])
        zero_grads([p])
        opt.step()  # the first step records p0 (and, towards zero, already shrinks p)
        with torch.no_grad():
            p.copy_(start + drift)
        zero_grads([p])
        opt.step()
        if target == "start":
            torch.testing.assert_close(p.detach(), start + drift * (1 - 0.1 * 2.0))
            torch.testing.assert_close(opt.state[p]["start"], start)
        else:  # AdamW's own decay: towards zero, the start forgotten
            torch.testing.assert_close(p.detach(), (start + drift) * (1 - 0.1 * 2.0))


def test_decay_to_start_from_zero_is_adamws_decay():
    """A parameter that starts at zero is pulled exactly as torch's AdamW pulls it, gradients and all."""
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.zeros(4, 3))
    b = torch.nn.Parameter(torch.zeros(4, 3))
    ours = AdamW([{"params": [a], "lr": 0.05, "weight_decay": 0.0, "decay_to_start": 0.7}])
    torchs = torch.optim.AdamW([{"params": [b], "lr": 0.05, "weight_decay": 0.7}])
    for _ in range(20):
        g = torch.randn(4, 3)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        torchs.step()
    torch.testing.assert_close(a.detach(), b.detach(), rtol=1e-6, atol=1e-7)
    assert a.detach().abs().sum() > 0.1  # it moved: the comparison is not between two unchanged tensors


def test_decay_to_start_runs_the_closure_first_and_returns_its_loss():
    """Lightning passes the forward and backward as the closure: the decay must see the gradients it makes."""
    p = torch.nn.Parameter(torch.ones(3))
    opt = AdamW([{"params": [p], "lr": 0.1, "weight_decay": 0.0, "decay_to_start": 1.0}])

    def closure():
        opt.zero_grad()
        loss = (p**2).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == pytest.approx(3.0)
    torch.testing.assert_close(opt.state[p]["start"], torch.ones(3))  # the value before the step
    assert (p.detach() < 1).all()


def test_decay_to_start_survives_a_state_dict_round_trip():
    """A resumed run keeps pulling towards the first run's start, not towards where it resumed."""
    torch.manual_seed(0)
    grads = [torch.randn(5) for _ in range(12)]

    def run(resume_at: int | None) -> torch.Tensor:
        p = torch.nn.Parameter(torch.linspace(-1, 1, 5))
        opt = AdamW([{"params": [p], "lr": 0.1, "weight_decay": 0.0, "decay_to_start": 1.5}])
        for i, g in enumerate(grads):
            if i == resume_at:
                state = opt.state_dict()
                p = torch.nn.Parameter(p.detach().clone())
                opt = AdamW([{"params": [p], "lr": 0.1, "weight_decay": 0.0, "decay_to_start": 1.5}])
                opt.load_state_dict(state)
            p.grad = g.clone()
            opt.step()
        return p.detach()

    torch.testing.assert_close(run(6), run(None), rtol=0, atol=0)


@pytest.mark.parametrize("name", vitpos.POS_SCHEMES)
def test_decay_to_start_holds_every_position_parameter_and_nothing_else(tiny, name):
    """One rule for every scheme: a training step records the start of exactly the parameters under ``pos.``,
    and pulls each of them back towards it; every other parameter keeps AdamW's plain decay."""
    m = tiny(name, class_token=True, global_pool="token")
    name_of = {id(p): n for n, p in m.named_parameters()}
    opt = AdamW(param_groups(m, 0.05, 1e-3, pos_lr_scale=30.0, pos_weight_decay=2.0, pos_decay_to="start"))
    for g in opt.param_groups:
        is_pos = {name_of[id(p)].startswith("pos.") for p in g["params"]}
        assert len(is_pos) <= 1
        assert g.get("decay_to_start", 0.0) == (2.0 if is_pos == {True} else 0.0)
        assert g["weight_decay"] == 0.0 or is_pos == {False}
    m(torch.randn(2, 3, 32, 32)).logsumexp(-1).sum().backward()
    opt.step()
    started = {name_of[id(p)] for p, s in opt.state.items() if "start" in s}
    assert started == {n for n in name_of.values() if n.startswith("pos.")}


def test_param_groups_rejects_an_unknown_decay_target(tiny):
    with pytest.raises(ValueError, match="pos_decay_to"):
        param_groups(tiny("learned"), 0.05, 1e-3, 30.0, 1.0, "init")


@pytest.mark.parametrize("name", ["learned", "relbias", "rope2d+learned"])
def test_position_lr_ramps_from_the_plain_lr_to_the_scaled_one(tiny, name):
    """The schedule gives every group the same warm-up and cosine; the position group's factor on top rises from
    1 (the plain lr) to pos_lr_scale over the ramp's steps, and stays there."""
    m = tiny(name)
    groups = param_groups(m, 0.05, 1e-3, pos_lr_scale=30.0, pos_weight_decay=1.0, pos_decay_to="start")
    opt = AdamW(groups)
    warmup, total, ramp = 10, 100, 30
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambdas(groups, warmup, total, 0.01, ramp))
    pos = [i for i, g in enumerate(opt.param_groups) if g.get("pos_lr_scale")]
    assert len(pos) == 1
    ratios = []
    for step in range(total):
        lrs = [g["lr"] for g in opt.param_groups]
        plain = lrs[0]
        assert plain == pytest.approx(1e-3 * warmup_cosine(step, warmup, total, 0.01))
        ratios.append(lrs[pos[0]] / plain)
        opt.step()
        sched.step()
    assert ratios[0] == pytest.approx(1.0)
    assert ratios[ramp // 2] == pytest.approx(1 + 29 * 0.5)  # linear: halfway at half the ramp
    assert all(r == pytest.approx(30.0) for r in ratios[ramp:])
    assert all(b > a for a, b in zip(ratios[:ramp], ratios[1 : ramp + 1], strict=True))


def test_no_ramp_means_the_scale_from_the_first_step():
    assert pos_ramp(0, 0, 30.0) == 1.0 and pos_ramp(5, 0, 30.0) == 1.0
    assert pos_ramp(0, 10, 30.0) == pytest.approx(1 / 30) and pos_ramp(10, 10, 30.0) == 1.0
