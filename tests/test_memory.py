"""What autograd saves (systems.memory.saved), activation checkpointing in the model, and its analysis."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

import systems.attention
from systems.attention import unavailable

from systems.memory.checkpointing import best_group, nested_levels, nested_peak, one_level_peak
from systems.memory.saved import SavedTensors
from systems.model import ModelConfig, TransformerLM
from systems.recompute import ATTENTION_OPS

B, T, D = 2, 16, 32


class HandoutRMSNorm(nn.Module):
    """The 2026 handout's §3.1 example: rsqrt of the mean square, times the input, times the weight."""

    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def test_the_handouts_rmsnorm_saves_six_tensors_in_three_storages():
    norm = HandoutRMSNorm(D)
    x = torch.randn(B, T, D, requires_grad=True)
    with SavedTensors(norm) as saved:
        norm(x).sum()
    shapes = sorted(r.shape for r in saved.records)
    # pow saves x; rsqrt its result; x * rsqrt saves both; (x * rsqrt) * weight saves the product and the weight
    assert shapes == sorted([(B, T, D), (B, T, D), (B, T, D), (B, T, 1), (B, T, 1), (D,)])
    assert [r.parameter for r in saved.records].count(True) == 1  # the weight: listed, not counted
    full, row = B * T * D * 4, B * T * 4
    assert saved.total_bytes == 2 * full + row  # x once, the product, the rsqrt once
    assert set(saved.by_op().op) >= {"pow", "rsqrt", "mul"}
    assert saved.by_module().bytes.sum() == saved.total_bytes


def test_a_compiled_rmsnorm_saves_less():
    norm = HandoutRMSNorm(D)
    x = torch.randn(B, T, D, requires_grad=True)
    compiled = torch.compile(norm, backend="aot_eager_decomp_partition")
    compiled(x)  # compile first: the measurement should see the fused function, not the tracing
    with SavedTensors(norm, by_operation=False) as fused:
        compiled(x).sum()
    with SavedTensors(norm) as eager:
        norm(x).sum()
    assert fused.total_bytes < eager.total_bytes
    kept = sorted(r.shape for r in fused.records if not r.parameter)
    assert kept == [(B, T, 1), (B, T, D)]  # the input and one (B, T, 1) statistic; the product is recomputed


def tiny(num_heads: int = 4, d_model: int = 32, **kw) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(vocab_size=61, context_length=12, d_model=d_model, num_layers=4,
                                     num_heads=num_heads, d_ff=48, attention="naive"), **kw)


def gradients(model: TransformerLM, tokens: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad()
    model(tokens).float().pow(2).mean().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("checkpoint_blocks", [1, 2, 4, (2, 1)])
def test_checkpointing_gives_the_same_gradients_and_keeps_less(checkpoint_blocks):
    tokens = torch.randint(0, 61, (3, 12))
    plain, checked = tiny(), tiny(checkpoint_blocks=checkpoint_blocks)
    for a, b in zip(gradients(plain, tokens), gradients(checked, tokens)):
        assert torch.equal(a, b)  # the recomputation runs the same operations on the same inputs
    with SavedTensors(plain) as everything:
        plain(tokens)
    with SavedTensors(checked) as boundaries:
        checked(tokens)
    blocks = sum(r.bytes for r in everything.records if r.first and not r.parameter and r.module.startswith("layers"))
    assert blocks > 0 and not any(r.module.startswith("layers") for r in boundaries.records)
    # what remains: everything outside the blocks, and each outer group's input (3 × 12 × 32 fp32), as predicted
    outer = checkpoint_blocks if isinstance(checkpoint_blocks, int) else checkpoint_blocks[0]
    assert boundaries.total_bytes == everything.total_bytes - blocks + math.ceil(4 / outer) * 3 * 12 * 32 * 4


def test_checkpoint_settings_are_checked():
    for bad in (-1, (1, 2), (2, -1)):
        with pytest.raises(ValueError, match="checkpoint_blocks"):
            tiny(checkpoint_blocks=bad)
    with pytest.raises(ValueError, match="recompute must be one of"):
        tiny(checkpoint_blocks=1, recompute="some")


class OpCounts(TorchDispatchMode):
    """How many times each op runs inside the block."""

    def __init__(self):
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.name()] = self.counts.get(func.name(), 0) + 1
        return func(*args, **(kwargs or {}))


def attention_runs_and_gradients(attention: str, tokens: torch.Tensor, **model_kw):
    """Per (checkpoint_blocks, recompute): how many times the attention's forward op ran in one forward and backward
    of a 4-block model, and the gradients."""
    runs, grads = {}, {}
    for blocks, recompute in ((0, "all"), (1, "all"), (1, "keep_attention")):
        model = tiny(checkpoint_blocks=blocks, recompute=recompute, **model_kw).to(tokens.device)
        if tokens.is_cuda:
            model = model.to(torch.bfloat16)
        model.set_attention(attention)
        with OpCounts() as ops:
            grads[blocks, recompute] = gradients(model, tokens)
        runs[blocks, recompute] = sum(n for op, n in ops.counts.items()
                                      if op in ATTENTION_OPS)  # the attention forward op, per block
    return runs, grads


@pytest.mark.parametrize("attention", ["sdpa", "flash_cpp"])  # PyTorch's op, and our C++ operator's
def test_keeping_attention_through_the_recomputation_runs_it_once_with_the_same_gradients(attention):
    # head dim 16, which flash_cpp takes
    runs, grads = attention_runs_and_gradients(attention, torch.randint(0, 61, (3, 12)), num_heads=2)
    assert runs == {(0, "all"): 4, (1, "all"): 8, (1, "keep_attention"): 4}
    for a, b in zip(grads[0, "all"], grads[1, "keep_attention"]):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kept_groups", [0, 1, 3, 4])
def test_keeping_attention_in_the_first_groups_only_recomputes_it_in_the_others(kept_groups):
    tokens = torch.randint(0, 61, (3, 12))
    plain = tiny(num_heads=2)
    plain.set_attention("sdpa")
    want = gradients(plain, tokens)
    model = tiny(num_heads=2, checkpoint_blocks=1, recompute="keep_attention", kept_groups=kept_groups)
    model.set_attention("sdpa")
    with OpCounts() as ops:
        got = gradients(model, tokens)
    runs = sum(n for op, n in ops.counts.items() if op in ATTENTION_OPS)
    assert runs == 4 + (4 - kept_groups)  # every block's forward, and again in each group recomputed whole
    for a, b in zip(want, got):
        assert torch.equal(a, b)


@pytest.mark.parametrize("recompute, kept_groups, stored_groups", [("all", None, 0), ("all", None, 1), ("all", None, 4),
                                                                    ("keep_attention", 1, 1), ("keep_attention", 2, 2),
                                                                    ("keep_attention", None, 3)])
def test_stored_groups_are_the_last_and_run_once_with_the_same_gradients(recompute, kept_groups, stored_groups):
    tokens = torch.randint(0, 61, (3, 12))
    plain = tiny(num_heads=2)
    plain.set_attention("sdpa")
    want = gradients(plain, tokens)
    model = tiny(num_heads=2, checkpoint_blocks=1, recompute=recompute, kept_groups=kept_groups,
                 stored_groups=stored_groups)
    model.set_attention("sdpa")
    calls = [0] * len(model.layers)
    for i, block in enumerate(model.layers):
        block.register_forward_pre_hook(lambda *_, i=i: calls.__setitem__(i, calls[i] + 1))
    with OpCounts() as ops:
        got = gradients(model, tokens)
    stored = list(range(4 - stored_groups, 4))
    assert calls == [1 if i in stored else 2 for i in range(4)]  # a checkpointed block runs again in the backward
    kept = 0 if recompute == "all" else 4 - stored_groups if kept_groups is None else kept_groups
    runs = sum(n for op, n in ops.counts.items() if op in ATTENTION_OPS)
    assert runs == 4 + (4 - stored_groups - kept)  # attention again only where its group is recomputed whole
    for a, b in zip(want, got):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kw, words", [
    (dict(checkpoint_blocks=1, stored_groups=5), r"in \[0, 4\], got 5"),
    (dict(checkpoint_blocks=2, stored_groups=3), r"in \[0, 2\], got 3"),
    (dict(checkpoint_blocks=1, stored_groups=-1), r"got -1"),
    (dict(checkpoint_blocks=1, stored_groups=True), r"got True"),
    (dict(stored_groups=1), r"no block is checkpointed"),
    (dict(checkpoint_blocks=1, recompute="keep_attention", kept_groups=3, stored_groups=2), r"overlap: there are 4"),
])
def test_stored_groups_that_are_no_count_of_checkpointed_groups_are_refused(kw, words):
    with pytest.raises(ValueError, match=words):
        tiny(**kw)


@pytest.mark.parametrize("kw, words", [
    (dict(checkpoint_blocks=1, recompute="keep_attention", kept_groups=5), r"in \[0, 4\], got 5"),
    (dict(checkpoint_blocks=2, recompute="keep_attention", kept_groups=3), r"in \[0, 2\], got 3"),
    (dict(checkpoint_blocks=1, recompute="keep_attention", kept_groups=-1), r"got -1"),
    (dict(checkpoint_blocks=1, recompute="keep_attention", kept_groups=True), r"got True"),
    (dict(checkpoint_blocks=1, recompute="all", kept_groups=2), r"only recompute='keep_attention' keeps"),
    (dict(recompute="keep_attention", kept_groups=2), r"no block is checkpointed"),
])
def test_kept_groups_that_name_no_checkpointed_groups_are_refused(kw, words):
    with pytest.raises(ValueError, match=words):
        tiny(**kw)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
# flash_triton's C++ operator has its own such test, after its plans are made (test_flash_triton_host.py,
# test_gpu_keep_attention_keeps_the_cpp_operator_through_the_recomputation)
@pytest.mark.parametrize("attention", ["sdpa_cudnn", "flash_cuda", "flash_hopper"])
def test_keeping_attention_runs_each_gpu_attention_once(attention):
    device = torch.device("cuda")
    why = unavailable(attention, device, torch.bfloat16, 64)
    if why:
        pytest.skip(why)
    runs, grads = attention_runs_and_gradients(attention, torch.randint(0, 61, (3, 12), device=device), num_heads=2,
                                               d_model=128)  # head dim 64, which every kernel takes
    assert runs == {(0, "all"): 4, (1, "all"): 8, (1, "keep_attention"): 4}
    for a, b in zip(grads[0, "all"], grads[1, "keep_attention"]):
        torch.testing.assert_close(a, b)  # the backward may add up in another order


@pytest.mark.parametrize("attention", ["naive", "flash_pytorch", "flash_triton_python"])
def test_keeping_an_attention_the_policy_cannot_see_is_refused_when_the_blocks_run(attention):
    model = tiny(num_heads=2, checkpoint_blocks=1, recompute="keep_attention")
    model.set_attention(attention)  # the attention may change after the constructor: the forward checks
    tokens = torch.randint(0, 61, (2, 12))
    with pytest.raises(ValueError, match=f"cannot keep the output of attention '{attention}'.*recompute='all'"):
        model(tokens)
    with torch.no_grad():
        model(tokens)  # nothing recomputed without gradients: nothing to refuse
    tiny(num_heads=2, recompute="keep_attention")(tokens)  # nor without checkpointing


def test_keeping_attention_keeps_the_forward_of_every_attention_node_of_ours():
    # each C++ autograd node names the forward op it calls (`Ops::forward`); a node whose forward the policy does
    # not know is recomputed under keep_attention, silently (flash_hopper was, when its node's forward was renamed)
    sources = [*(Path(systems.attention.__file__).parent / "flash_cpp").glob("*.cpp"),
               Path(systems.attention.__file__).parent / "flash_triton" / "host.cpp"]
    forwards = {name for source in sources
                for name in re.findall(r'constexpr const char\* forward = "([\w:]+)"', source.read_text())}
    assert {"systems_flash::forward", "systems_flash::triton_forward",
            "systems_flash::hopper_attention_forward"} <= forwards  # the pattern still finds them
    assert forwards <= ATTENTION_OPS


def test_one_level_of_checkpointing_on_paper():
    # 32 blocks of 100 bytes each, boundaries of 1 byte: k* = sqrt(32 / 100) < 1, so single blocks win
    assert one_level_peak(32, 0, 100, 1) == 3200
    assert one_level_peak(32, 1, 100, 1) == 32 + 100
    assert one_level_peak(32, 4, 100, 1) == 8 + 400
    assert best_group(32, 100, 1) == 1
    # boundaries as large as a block: sqrt(32) ≈ 5.7, the nearest divisor is best
    assert best_group(32, 1, 1) in (4, 8) and one_level_peak(32, best_group(32, 1, 1), 1, 1) == 12


def test_nested_checkpointing_on_paper():
    assert nested_levels(32) == (16, 8, 4, 2, 1)
    levels = nested_levels(32)
    # 2 boundaries per level, 5 levels, then one block's residuals: O(log N) against N for no checkpointing
    assert nested_peak(32, levels, block=100, boundary=1) == 2 * 5 + 100
    assert nested_peak(32, levels, 100, 1) < one_level_peak(32, best_group(32, 100, 1), 100, 1)


def test_the_model_refuses_bad_tokens_with_the_limit_named():
    model = tiny()
    with pytest.raises(ValueError, match=r"\[0, 61\).*from 0 to 61"):
        model(torch.tensor([[0, 61]]))
    with pytest.raises(ValueError, match=r"from -1 to"):
        model(torch.tensor([[-1, 3]]))
    with pytest.raises(ValueError, match="at least one token"):
        model(torch.zeros(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="integer ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="context_length must be a positive integer, got -4"):
        ModelConfig(context_length=-4)
    assert math.isfinite(model(torch.tensor([[0, 60]])).sum().item())
