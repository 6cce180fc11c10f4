"""The fused LM head + cross-entropy and the fused AdamW (systems.fused) against PyTorch's own.

Without a GPU the Triton kernels run in Triton's interpreter (tests/conftest.py), on fp32 and float64 inputs whose
reference is computed in float64; the ``gpu`` cases run bf16 at larger sizes. Both kernels are also compiled for
the H100 here, so what the interpreter accepts and the compiler would refuse fails on any machine.
"""

from __future__ import annotations

import copy
import math
import re
from itertools import product

import pytest
import torch
import torch.nn.functional as F
from flash_common import ptxas_report, rerun_without_interpreter
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from systems.fused import FusedAdamW, linear_cross_entropy
from systems.fused import adamw as fused_adamw
from systems.fused import cross_entropy

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def reference_loss(hidden, weight, targets, ignore_index=-100, reduction="mean", upstream=1.0):
    """F.cross_entropy over the whole logits, in float64: the loss and the gradients of hidden and weight."""
    h = hidden.detach().double().requires_grad_()
    w = weight.detach().double().requires_grad_()
    loss = F.cross_entropy((h @ w.T).flatten(0, -2), targets.flatten(), ignore_index=ignore_index,
                           reduction=reduction)
    (loss * upstream).backward()
    return loss.detach(), h.grad, w.grad


def fused_loss(hidden, weight, targets, upstream=1.0, **kw):
    h, w = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    loss = linear_cross_entropy(h, w, targets, **kw)
    (loss * upstream).backward()
    return loss.detach(), h.grad, w.grad


def assert_close(actual, expected, what, rtol=2e-5, atol=2e-6):
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


# ---- the loss against F.cross_entropy -------------------------------------------------------------------------

@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 24), st.integers(1, 20), st.integers(1, 300), st.sampled_from(["mean", "sum"]),
       st.sampled_from([None, 1, 7]), st.floats(0.0, 0.5), st.sampled_from([torch.float32, torch.float64]),
       st.integers(0, 2**31 - 1))
@example(5, 8, 5000, "mean", 2, 0.2, torch.float32, 0)  # a row of several vocabulary blocks
@example(4, 3, 1, "sum", None, 0.0, torch.float64, 1)  # a vocabulary of one
def test_the_loss_and_both_gradients_match_cross_entropy_over_the_whole_logits(n, d, vocab, reduction, chunk,
                                                                               ignored, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, d, generator=g, dtype=dtype)
    weight = torch.randn(vocab, d, generator=g, dtype=dtype) / math.sqrt(d)
    targets = torch.randint(0, vocab, (n,), generator=g)
    targets[torch.rand(n, generator=g) < ignored] = -100
    upstream = 1.5  # the loss scaled after the call: the gradients scale with it
    expected = reference_loss(hidden, weight, targets, reduction=reduction, upstream=upstream)
    actual = fused_loss(hidden, weight, targets, upstream=upstream, reduction=reduction, chunk_tokens=chunk)
    if bool((targets == -100).all()) and reduction == "mean":  # the mean of nothing, as PyTorch has it
        assert actual[0].isnan() and expected[0].isnan()
        return
    for name, a, e in zip(("loss", "d hidden", "d weight"), actual, expected):
        assert a.dtype == (torch.float32 if name == "loss" else dtype)
        assert_close(a, e, name, rtol=2e-5 * max(1, vocab / 1000), atol=2e-6 * max(1, n if reduction == "sum" else 1))


def test_batched_hidden_states_another_ignore_index_and_frozen_inputs():
    hidden, weight = torch.randn(2, 5, 8), torch.randn(40, 8)
    targets = torch.randint(0, 40, (2, 5))
    targets[0, 1] = 7
    expected = reference_loss(hidden, weight, targets, ignore_index=7)
    actual = fused_loss(hidden, weight, targets, ignore_index=7)
    for name, a, e in zip(("loss", "d hidden", "d weight"), actual, expected):
        assert_close(a, e, name)
    # a frozen weight: only hidden's gradient; no gradient at all without autograd
    h = hidden.clone().requires_grad_()
    linear_cross_entropy(h, weight, targets, ignore_index=7).backward()
    assert_close(h.grad, expected[1], "d hidden alone")
    with torch.no_grad():
        loss = linear_cross_entropy(hidden.requires_grad_(), weight, targets, ignore_index=7)
    assert not loss.requires_grad and math.isclose(loss.item(), expected[0].item(), rel_tol=1e-5)


def test_a_target_outside_the_vocabulary_makes_the_loss_nan_not_a_wrong_number():
    hidden, weight = torch.randn(3, 4), torch.randn(10, 4)
    for bad in (10, 1000, -1):
        loss = linear_cross_entropy(hidden, weight, torch.tensor([1, bad, 2]))
        assert loss.isnan(), bad


def test_a_second_backward_is_refused_not_a_wrong_gradient():
    # the gradients made in the forward are scaled in place by the first backward: autograd's version check refuses
    # to use them again, naming the op
    h = torch.randn(3, 4, requires_grad=True)
    loss = linear_cross_entropy(h, torch.randn(10, 4), torch.tensor([1, 2, 3]))
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*linear_cross_entropy"):
        loss.backward()


def test_the_backward_makes_no_second_tensor_the_size_of_a_gradient():
    # the gradients exist from the forward on; the backward scales them where they lie. Any tensor it creates with
    # as many elements as one of them (zeros standing in for the gradients flowing into the op's gradient outputs,
    # a copy) would double the head's memory at the leaderboard's shape
    from torch.utils._python_dispatch import TorchDispatchMode

    class Created(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {a.data_ptr() for a in args if isinstance(a, torch.Tensor)}
            self.sizes += [(str(func), t.numel()) for t in (out if isinstance(out, (tuple, list)) else (out,))
                           if isinstance(t, torch.Tensor) and t.data_ptr() not in inputs]
            return out

    hidden = torch.randn(24, 8, requires_grad=True)
    weight = torch.randn(40, 8, requires_grad=True)
    loss = linear_cross_entropy(hidden, weight, torch.randint(0, 40, (24,)))
    with Created() as created:
        loss.backward()
    assert not [(op, n) for op, n in created.sizes if n in (hidden.numel(), weight.numel())], created.sizes
    assert hidden.grad is not None and weight.grad is not None


def test_the_op_passes_pytorchs_custom_op_checks():
    from systems.fused.cross_entropy import _loss_and_grads

    hidden, weight = torch.randn(5, 8, requires_grad=True), torch.randn(20, 8, requires_grad=True)
    args = (hidden, weight, torch.randint(0, 20, (5,)), -100, True, torch.float32, 2, True, True)
    # the schema, the fake implementation against the real one, and autograd's registration (not the gradient's
    # numerics, which the tests above check against F.cross_entropy: the op's extra outputs carry no gradient)
    torch.library.opcheck(_loss_and_grads, args, test_utils=("test_schema", "test_faketensor",
                                                             "test_autograd_registration"))


@pytest.mark.parametrize("call, words", [
    (lambda: linear_cross_entropy(torch.randn(3, 4), torch.randn(10, 5), torch.zeros(3, dtype=torch.long)),
     "disagree"),
    (lambda: linear_cross_entropy(torch.randn(3, 4), torch.randn(10, 4), torch.zeros(4, dtype=torch.long)),
     "targets must be shaped"),
    (lambda: linear_cross_entropy(torch.randn(3, 4), torch.randn(10, 4), torch.zeros(3)), "integer ids"),
    (lambda: linear_cross_entropy(torch.randn(3, 4), torch.randn(10, 4), torch.zeros(3, dtype=torch.long),
                                  reduction="none"), "reduction must be one of"),
    (lambda: linear_cross_entropy(torch.randn(3, 4), torch.randn(10, 4), torch.zeros(3, dtype=torch.long),
                                  chunk_tokens=0), "chunk_tokens"),
])
def test_bad_calls_are_named(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_chunks_keep_their_logits_within_the_budget():
    # the 2026 leaderboard's vocabulary in bf16: a chunk's logits take at most a GiB, whole tiles of tokens
    tokens = cross_entropy.chunk_tokens_for(151_936, 2)
    assert tokens * 151_936 * 2 <= cross_entropy.CHUNK_BYTES and tokens % 128 == 0 and tokens >= 3000
    assert cross_entropy.chunk_tokens_for(10**12, 4) == 1  # a vocabulary larger than the budget: a token at a time


def test_the_weight_gradient_accumulates_in_its_own_dtype_sliced_when_the_products_are_narrower(monkeypatch):
    monkeypatch.setattr(cross_entropy, "VOCAB_SLICE", 3)  # several slices of rows
    out, a, b = torch.randn(10, 4), torch.randn(10, 6).double(), torch.randn(6, 4).double()
    expected = out.double() + a @ b
    cross_entropy._accumulate(out, a, b)
    assert_close(out, expected, "sliced accumulation", rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("weight_dtype", [torch.bfloat16, torch.float32])
def test_gpu_bf16_under_autocast_against_the_unfused_head(weight_dtype):
    torch.manual_seed(0)
    n, d, vocab = 3000, 256, 50_000
    hidden = torch.randn(n, d, device="cuda")
    weight = (torch.randn(vocab, d, device="cuda") / 16).to(weight_dtype)
    targets = torch.randint(0, vocab, (n,), device="cuda")
    targets[::17] = -100
    expected = reference_loss(hidden.bfloat16().float(), weight.bfloat16().float(), targets)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        actual = fused_loss(hidden, weight, targets, chunk_tokens=1024)
    assert actual[1].dtype == torch.float32 and actual[2].dtype == weight_dtype
    # bf16 logits (as the unfused head rounds them), the rest in fp32
    for name, a, e in zip(("loss", "d hidden", "d weight"), actual, expected):
        torch.testing.assert_close(a.double(), e, rtol=2e-2, atol=2e-2 * e.abs().max().item(),
                                   msg=lambda m, name=name: f"{name}: {m}")


# ---- AdamW against torch.optim.AdamW ---------------------------------------------------------------------------

SHAPES = [(3, 5), (fused_adamw.CHUNK + 17,), (1,), (64, 33)]


def adamw_run(optimizer, steps, shapes=SHAPES, device="cpu", dtype=torch.float32, seed=0, **options):
    """Parameters of ``shapes`` after ``steps`` steps on seeded gradients, and the optimizer."""
    g = torch.Generator(device=device).manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=g, device=device).to(dtype)) for s in shapes]
    opt = optimizer(params, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **options)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g, device=device).to(dtype)
        opt.step()
    return params, opt


def ulp_scaled(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor) -> float:
    """The largest |a − b| in units of the fp32 spacing at ``scale`` (the larger of the value before and after)."""
    spacing = torch.finfo(torch.float32).eps * torch.exp2(torch.floor(torch.log2(scale.abs().clamp_min(1e-30))))
    return float(((a.double() - b.double()).abs() / spacing.double()).max())


def cuda_fused_formula(p, g, m, v, step, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
    """One step of PyTorch's fused CUDA AdamW (``fused_adam_utils.cuh``), written again with float64 torch operations:
    every value and scalar in fp32, a fused multiply-add as one fp64 product and sum (a product of two fp32 values is
    exact there) rounded to fp32, a division or square root rounded to fp32, powers as float32 ``pow``."""
    f32 = lambda x: x.float().double()  # noqa: E731
    s = lambda x: float(torch.tensor(x, dtype=torch.float32))  # noqa: E731
    fma = lambda a, b, c: f32(a * b + c)  # noqa: E731
    beta1, beta2, lr, eps = s(betas[0]), s(betas[1]), s(lr), s(eps)
    correction1 = s(1 - torch.pow(torch.tensor(beta1), torch.tensor(float(step))).item())
    correction2 = s(1 - torch.pow(torch.tensor(beta2), torch.tensor(float(step))).item())
    step_size, correction2_sqrt = s(lr / correction1), s(correction2 ** 0.5)
    p, g, m, v = (x.double() for x in (p, g, m, v))
    p = fma(-s(lr * s(weight_decay)), p, p)
    m = fma(beta1, m, fma(-beta1, g, g))
    g2 = f32(g * g)
    v = fma(beta2, v, fma(-beta2, g2, g2))
    denom = f32(f32(f32(v.sqrt()) / correction2_sqrt) + eps)
    p = f32(p - f32(f32(step_size * m) / denom))
    return p.float(), m.float(), v.float()


def test_adamw_is_pytorchs_fused_update_bit_for_bit():
    # three steps, each from the state the last left, against the formula written independently above
    params, opt = adamw_run(FusedAdamW, 0)
    g = torch.Generator().manual_seed(11)
    for step in (1, 2, 3):
        expected = []
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
            state = opt.state.get(p) or {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
            expected.append(cuda_fused_formula(p.detach(), p.grad, state["exp_avg"], state["exp_avg_sq"], step))
        opt.step()
        for p, (p_want, m_want, v_want) in zip(params, expected):
            for got, want, name in ((p.detach(), p_want, "param"), (opt.state[p]["exp_avg"], m_want, "exp_avg"),
                                    (opt.state[p]["exp_avg_sq"], v_want, "exp_avg_sq")):
                assert torch.equal(got, want), (step, name, p.shape, (got - want).abs().max())


def test_adamw_updates_views_at_any_offset():
    # a parameter that is a view into a flat buffer 4 bytes past an alignment (as flat-buffer wrappers make them):
    # no 16-byte accesses there, the same update
    flat = torch.randn(fused_adamw.CHUNK + 300)
    param = torch.nn.Parameter(flat[1:fused_adamw.CHUNK + 201])
    assert param.data_ptr() % 16 != 0
    param.grad = torch.randn(param.shape)
    expected = cuda_fused_formula(param.detach(), param.grad, torch.zeros_like(param), torch.zeros_like(param), 1)
    FusedAdamW([param], lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1).step()
    assert torch.equal(param.detach(), expected[0])


@pytest.mark.parametrize("implementation", [{"fused": True}, {"foreach": True}], ids=["fused", "foreach"])
def test_adamw_follows_pytorchs_own_implementations_on_this_machine(implementation):
    # PyTorch's CPU kernels round differently from its CUDA one (an fp32 lerp for the first moment): after three
    # steps the two agree to fp32's precision
    ours, opt = adamw_run(FusedAdamW, 3)
    theirs, ref = adamw_run(torch.optim.AdamW, 3, **implementation)
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p, q, rtol=2e-6, atol=2e-7)
        for key in ("exp_avg", "exp_avg_sq"):
            mine, pytorchs = opt.state[p][key], ref.state[q][key]
            assert mine.dtype == torch.float32
            torch.testing.assert_close(mine, pytorchs, rtol=2e-6, atol=1e-7)  # terms of size ~1: cancellation
        assert float(opt.state[p]["step"]) == float(ref.state[q]["step"]) == 3.0


def test_many_adamw_steps_follow_pytorchs():
    ours, _ = adamw_run(FusedAdamW, 20)
    theirs, _ = adamw_run(torch.optim.AdamW, 20, foreach=True)
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_adamw_groups_frozen_parameters_and_state_dicts_move_between_the_two():
    g = torch.Generator().manual_seed(3)
    params = [torch.nn.Parameter(torch.randn(5, 4, generator=g)) for _ in range(3)]
    groups = [{"params": params[:2]}, {"params": params[2:], "lr": 1e-3, "weight_decay": 0.0}]
    ours = FusedAdamW(groups, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    twin = [torch.nn.Parameter(p.detach().clone()) for p in params]
    theirs = torch.optim.AdamW([{"params": twin[:2]}, {"params": twin[2:], "lr": 1e-3, "weight_decay": 0.0}],
                               lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    for step in range(4):
        for i, (p, q) in enumerate(zip(params, twin)):
            grad = None if (i == 1 and step == 1) else torch.randn(5, 4, generator=g)  # one without a gradient
            p.grad, q.grad = grad, None if grad is None else grad.clone()
        ours.step()
        theirs.step()
    for p, q in zip(params, twin):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    assert float(ours.state[params[1]]["step"]) == 3.0  # its step did not count where it had no gradient
    # ours -> torch's: the same state, so the same next step
    resumed = torch.optim.AdamW([{"params": twin[:2]}, {"params": twin[2:]}], foreach=True)
    resumed.load_state_dict(copy.deepcopy(ours.state_dict()))  # as through a file: not the same tensors
    for p, q in zip(params, twin):
        p.grad = torch.randn(5, 4, generator=g)
        q.grad = p.grad.clone()
    ours.step()
    resumed.step()
    for p, q in zip(params, twin):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    # torch's bf16 moments (a bf16 parameter's) -> ours: loaded as fp32
    p = torch.nn.Parameter(torch.zeros(5, 4, dtype=torch.bfloat16))
    back = FusedAdamW([p])
    back.load_state_dict({"state": {0: {"step": torch.tensor(2.0), "exp_avg": torch.ones(5, 4, dtype=torch.bfloat16),
                                        "exp_avg_sq": torch.ones(5, 4, dtype=torch.bfloat16)}},
                          "param_groups": [dict(back.param_groups[0], params=[0])]})
    assert back.state[p]["exp_avg"].dtype == torch.float32 and back.state[p]["step"].item() == 2.0


@pytest.mark.parametrize("options, words", [({"lr": -1.0}, "learning rate"), ({"betas": (1.0, 0.9)}, "betas"),
                                            ({"eps": -1.0}, "epsilon"), ({"weight_decay": -0.1}, "weight_decay")])
def test_adamw_refuses_what_pytorch_refuses(options, words):
    with pytest.raises(ValueError, match=words):
        FusedAdamW([torch.nn.Parameter(torch.zeros(2))], **options)


def test_adamw_refuses_what_it_cannot_update_in_words():
    p = torch.nn.Parameter(torch.zeros(4))
    p.grad = torch.zeros(4)
    opt = FusedAdamW([p])
    opt.param_groups[0]["amsgrad"] = True  # as a loaded state of torch's AdamW(amsgrad=True) would set it
    with pytest.raises(ValueError, match="AdamW only.*amsgrad"):
        opt.step()
    p = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    p.grad = torch.zeros(4, dtype=torch.float64)
    with pytest.raises(TypeError, match="fp32, bf16 and fp16"):
        FusedAdamW([p]).step()
    q = torch.nn.Parameter(torch.zeros(4, 4))
    q.grad = torch.zeros(4, 4).t()
    with pytest.raises(ValueError, match="contiguous"):
        FusedAdamW([q]).step()


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_adamw_against_pytorchs_fused(dtype):
    shapes = [(4096, 1024), (fused_adamw.CHUNK * 3 + 5,), (7,)]
    # fp32: three steps, so the bias corrections' powers are taken above step one too; bf16: one step, updated in
    # fp32 from the same bf16 values and rounded once (a bf16 parameter rounded every step drifts from an fp32 one)
    steps = 3 if dtype == torch.float32 else 1
    before, _ = adamw_run(FusedAdamW, steps - 1, shapes, "cuda", dtype)
    ours, opt = adamw_run(FusedAdamW, steps, shapes, "cuda", dtype)
    theirs, ref = adamw_run(torch.optim.AdamW, steps, shapes, "cuda", torch.float32, fused=True)
    for b, p, q in zip(before, ours, theirs):
        if dtype == torch.float32:
            assert ulp_scaled(p, q, torch.maximum(b.abs(), q.abs())) <= 1
        else:
            torch.testing.assert_close(p.float(), q.to(dtype).float(), rtol=1e-2, atol=1e-2)


# ---- compiled for the H100 --------------------------------------------------------------------------------------

def test_the_fused_kernels_compile_for_sm90(tmp_path):
    # the interpreter runs code the compiler refuses: compile both kernels for an H100 (no GPU needed) and let
    # ptxas say whether they spill
    if rerun_without_interpreter():
        return
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    def compile_(fn, signature, constants, num_warps):
        aligned = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if signature[n][0] == "*"}
        source = ASTSource(fn, signature, constants, aligned)
        return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps}).asm["ptx"]

    for dtype, block in (("bf16", 4096), ("fp32", 2048)):
        for grad in (True, False):
            names = cross_entropy._loss_and_grad_kernel.arg_names
            signature = {"logits_ptr": f"*{dtype}", "row_stride": "i64", "targets_ptr": "*i64", "loss_ptr": "*fp32",
                         "scale_ptr": "*fp32", "vocab": "i32", "ignore_index": "i32"}
            signature |= {n: "constexpr" for n in names if n not in signature}
            ptx = compile_(cross_entropy._loss_and_grad_kernel, signature, {"BLOCK_V": block, "GRAD": grad}, 8)
            assert ptxas_report(ptx, tmp_path)[0] == 0, (dtype, grad)
    import triton.language as tl

    for p_type, aligned in product((tl.float32, tl.bfloat16), (True, False)):
        signature = {"addresses": "*i64", "numels": "*i64", "chunk_tensor": "*i32", "chunk_start": "*i64",
                     "scalars": "*fp32"}
        signature |= {n: "constexpr" for n in fused_adamw._adamw_kernel.arg_names if n not in signature}
        constants = {"P_TYPE": p_type, "G_TYPE": p_type, "ALIGNED": aligned, "CHUNK_SIZE": fused_adamw.CHUNK,
                     "BLOCK": 1024}
        ptx = compile_(fused_adamw._adamw_kernel, signature, constants, 4)
        assert ptxas_report(ptx, tmp_path)[0] == 0, p_type
        # aligned tensors move in 16-byte accesses (the moments, fp32, always: 4 values a thread)
        assert aligned == bool(re.search(r"ld\.global(\.nc)?\.v4\.b32", ptx)), (p_type, aligned)


# ---- in the model and the trainer ------------------------------------------------------------------------------

def test_the_model_with_the_fused_loss_computes_the_same_loss_and_gradients():
    from systems.model import TransformerLM, preset

    torch.manual_seed(0)
    model = TransformerLM(preset("tiny", vocab_size=300, context_length=32, attention="naive"))
    tokens, targets = torch.randint(0, 300, (2, 32)), torch.randint(0, 300, (2, 32))
    losses, grads = [], []
    for fused in (False, True):
        model.set_fused_loss(fused)
        model.zero_grad(set_to_none=True)
        loss = model(tokens, targets)
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    assert_close(losses[1], losses[0], "loss", rtol=1e-6, atol=1e-6)
    for (name, _), fused, plain in zip(model.named_parameters(), grads[1], grads[0]):
        assert_close(fused, plain, name, rtol=1e-4, atol=1e-6)
    assert model(tokens).shape == (2, 32, 300)  # without targets: the logits, fused or not


def test_the_trainer_with_the_fused_loss_and_adamw_follows_the_plain_one():
    from systems.model import preset
    from systems.train import TrainConfig, train

    def run(fused):
        model = preset("tiny", context_length=16, attention="naive", fused_loss=fused)
        return train(TrainConfig(model=model, global_batch_size=4, max_steps=4, fused_adamw=fused, progress=False,
                                 device="cpu"))

    plain, fused = run(False), run(True)
    assert [r["loss"] for r in fused] == pytest.approx([r["loss"] for r in plain], rel=1e-5)
