"""The strategy interface and the one training step (systems.parallel), and the model's own loss."""

from __future__ import annotations

import ast
import math

import pytest
import torch
import torch.nn.functional as F

from systems import pipeline
from systems.model import TransformerLM, preset, token_loss
from systems.parallel import NAMES, TrainStep, wrap

MODEL = preset("tiny", vocab_size=97, context_length=12, num_layers=2)


def _batch(rows: int = 4, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, MODEL.vocab_size, (rows, MODEL.context_length + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def test_the_loss_is_computed_in_fp32_whatever_the_logits_dtype():
    logits, targets = torch.randn(2, 5, 97, dtype=torch.bfloat16), torch.randint(0, 97, (2, 5))
    loss = token_loss(logits, targets)
    want = F.cross_entropy(logits.double().flatten(0, 1), targets.flatten())
    assert loss.dtype == torch.float32 and abs(loss.item() - want.item()) < 1e-6


def test_the_model_computes_its_own_loss():
    torch.manual_seed(0)
    model = TransformerLM(MODEL)
    x, y = _batch()
    assert torch.equal(model(x, y), token_loss(model(x), y))
    with pytest.raises(ValueError, match="targets must be shaped like the tokens"):
        model(x, y[:, :-1])
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 97\)"):
        model(x, y + 97)


def _trained(grad_accum: int, timer=None):
    torch.manual_seed(0)
    strategy = wrap("none", TransformerLM(MODEL))
    optimizer = strategy.optimizer(torch.optim.AdamW, lr=1e-2)
    step = TrainStep(strategy, optimizer, grad_accum=grad_accum, clip=1.0, **({"timer": timer} if timer else {}))
    losses = [step(*_batch(seed=s))[0].item() for s in range(3)]
    return losses, strategy.full_state_dict()


def test_micro_batches_add_up_to_the_whole_batch():
    whole, w1 = _trained(1)
    split, w2 = _trained(2)
    assert whole == pytest.approx(split, abs=1e-5)
    for name in w1:
        torch.testing.assert_close(w1[name], w2[name], rtol=0, atol=1e-5)


def test_a_timer_sees_every_phase_in_order():
    seen = []
    _trained(2, timer=lambda phase, fn: (seen.append(phase), fn())[1])
    one_step = ["forward", "backward", "forward", "backward", "synchronize", "clip", "optimizer"]
    assert seen == one_step * 3


def test_a_step_without_clipping_measures_no_norm_and_without_an_optimizer_drops_the_gradients():
    torch.manual_seed(0)
    strategy = wrap("none", TransformerLM(MODEL))
    loss, norm = TrainStep(strategy)(*_batch())
    assert math.isfinite(loss.item()) and math.isnan(norm)
    assert all(p.grad is None for p in strategy.model.parameters())
    with pytest.raises(ValueError, match="does not split into 3 micro-batches"):
        TrainStep(strategy, grad_accum=3)(*_batch(rows=4))


def test_the_trainer_asks_nothing_about_which_strategy_it_has():
    # every decision that depends on the strategy lives behind its interface (systems.parallel)
    tree = ast.parse((pipeline.ROOT / "systems" / "train.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {"SHARDED", "REPLICATED", "sharded", "ddp", "net", "ShardedOptimizer", "FSDP", "wrap_model"}
    compared = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Compare) and "wrapper" in ast.unparse(n)]
    assert not compared, compared
    assert set(NAMES) >= {"none", "torch", "naive", "flat", "overlap", "bucketed", "fsdp", "fsdp2"}
