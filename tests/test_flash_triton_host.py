"""The Triton kernels' eager host path in C++ (systems/attention/flash_triton/host.py, host.cpp): correct against the
float64 oracle at the held-out kinds of shapes, a plan per layout (the first calls through Python, the later ones
from C++ alone), the ops' schemas, Meta kernels and autograd under ``torch.library.opcheck``, and the Python path as
the fallback. On a machine without a GPU, what it says and that the public function takes the Python path."""

import contextlib

import pytest
import torch
from flash_common import (
    GPU_CASES,
    TF32_TOL,
    TOL,
    check_against_reference,
    check_model_matches_naive,
    deterministic_algorithms,
    make_qkv,
    misaligned,
    saved_logsumexp,
)

from systems.attention import get_attention, unavailable
from systems.attention._checks import as_4d
from systems.attention.flash_triton import FlashConfig, flash_attention_triton, host, launch
from systems.model import ModelConfig, TransformerLM

GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_without_a_gpu_the_host_path_says_why_and_the_python_path_runs():
    if torch.cuda.is_available():
        pytest.skip("the CPU machine's case")
    assert host.unavailable() in ("launches compiled kernels, and Triton's interpreter compiles none",
                                  "needs a CUDA GPU and a PyTorch built with CUDA")
    q, k, v = make_qkv((1, 2), 20, 20, 16)
    o = flash_attention_triton(q, k, v, True)
    assert type(o.grad_fn).__name__ == "FlashAttentionTritonBackward"  # the Python autograd function's node
    with pytest.raises(RuntimeError, match="C\\+\\+ host path of the Triton kernels"):
        host.plan_count()


def test_the_python_path_is_registered_beside_it():
    assert get_attention("flash_triton_python").__name__ == "flash_attention_triton_python"
    assert unavailable("flash_triton_python", torch.device("cpu"), torch.bfloat16, 64) == \
        unavailable("flash_triton", torch.device("cpu"), torch.bfloat16, 64)


def logsumexp(q, k, v, is_causal):
    """L as the C++ operator's forward returns it (its autograd node keeps it out of Python's reach)."""
    with torch.no_grad():
        return torch.ops.systems_flash.triton_forward(as_4d(q), as_4d(k), as_4d(v), is_causal)[1].view(q.shape[:-1])


@contextlib.contextmanager
def python_launches():
    """Counts the launches that go through the Python launcher (the first calls of a layout)."""
    calls = []
    patch = pytest.MonkeyPatch()
    for name in ("launch_forward", "first_backward"):
        original = getattr(launch, name)
        patch.setattr(launch, name, lambda *a, _f=original, _n=name, **kw: (calls.append(_n), _f(*a, **kw))[1])
    try:
        yield calls
    finally:
        patch.undo()


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("is_causal", [True, False])
@pytest.mark.parametrize("batch,n_q,n_k,d,dtype,contiguous", GPU_CASES + [
    ((2, 3), 300, 333, 48, torch.bfloat16, True),  # two column blocks, 32 + 16, and one pass: dQ's rows 48 wide
    ((1, 2), 200, 77, 80, torch.bfloat16, False)])  # 64 + 16 columns, two passes
def test_gpu_host_path_against_the_oracle(untuned_plans, batch, n_q, n_k, d, dtype, contiguous, is_causal):
    # Three calls, fresh inputs each: the first of a layout goes through Python, whose launches become the plan, the
    # later ones launch from C++ alone; every one against the oracle. (Untuned tiles, so that each shape is not
    # tuned; the tests below run the tuned path.)
    assert host.unavailable() is None
    for call in range(3):
        q, k, v = make_qkv(batch, n_q, n_k, d, dtype=dtype, contiguous=contiguous)
        with python_launches() as calls:
            check_against_reference(flash_attention_triton, q, k, v, is_causal, TOL[dtype], logsumexp=logsumexp)
        assert (calls == ["launch_forward", "first_backward"]) if call == 0 else (calls == []), call


@pytest.fixture
def untuned_plans(monkeypatch):
    """Plans made from the first candidate tiles that fit (no tuning), forgotten afterwards."""
    host.forget_plans()
    monkeypatch.setattr(host, "DEFAULT", FlashConfig(autotune=False))
    yield
    host.forget_plans()


@pytest.mark.gpu
@GPU
def test_gpu_a_plan_per_layout():
    # Layouts Triton specialises differently (strides, 16-byte alignment, a stride-0 dO, deterministic mode's two
    # passes) each get a plan of their own, found on their third call; each call checked against the oracle.
    ones = torch.ones((), device="cuda", dtype=torch.bfloat16)
    for layout in ("contiguous", "strided", "misaligned", "stride-0 dO", "deterministic"):
        with contextlib.ExitStack() as stack:
            if layout == "deterministic":
                stack.enter_context(deterministic_algorithms())
            for call in range(3):
                q, k, v = make_qkv((2, 3), 203, 203, 64, dtype=torch.bfloat16, contiguous=layout != "strided")
                if layout == "misaligned":
                    q, k, v = misaligned(q), misaligned(k), misaligned(v)
                do = ones.expand(2, 3, 203, 64) if layout == "stride-0 dO" else None
                with python_launches() as calls:
                    check_against_reference(flash_attention_triton, q, k, v, True, TOL[torch.bfloat16], do=do,
                                            logsumexp=logsumexp)
                if call == 2:
                    assert calls == [], layout


@pytest.mark.gpu
@GPU
def test_gpu_deterministic_mode_repeats_bit_for_bit_from_cpp():
    q, k, v = make_qkv((2, 4), 300, 300, 64, dtype=torch.bfloat16)
    do = torch.randn_like(q)
    grads = []
    with deterministic_algorithms():
        for _ in range(4):
            q.grad = k.grad = v.grad = None
            flash_attention_triton(q, k, v, True).backward(do)
            grads.append((q.grad.clone(), k.grad.clone(), v.grad.clone()))
    for later in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(grads[0], later))


@pytest.mark.gpu
@GPU
def test_gpu_forgotten_plans_are_found_again():
    for _ in range(3):
        q, k, v = make_qkv((1, 2), 128, 128, 64, dtype=torch.bfloat16)
        flash_attention_triton(q, k, v, True).backward(torch.randn_like(q))
    assert host.plan_count() >= 2
    host.forget_plans()
    assert host.plan_count() == 0
    q, k, v = make_qkv((1, 2), 128, 128, 64, dtype=torch.bfloat16)  # fresh: no gradients added up from before
    with python_launches() as calls:
        check_against_reference(flash_attention_triton, q, k, v, True, TOL[torch.bfloat16], logsumexp=logsumexp)
    assert calls == ["launch_forward", "first_backward"] and host.plan_count() == 2


@pytest.mark.gpu
@GPU
def test_gpu_opcheck_of_the_host_ops():
    assert host.unavailable() is None  # loads the ops (the test may run alone)
    q, k, v = (t.detach() for t in make_qkv((2, 2), 100, 77, 64, dtype=torch.bfloat16))
    for _ in range(2):  # tune, then a plan: opcheck's calls run from C++
        torch.ops.systems_flash.triton_forward(q, k, v, True)
    o, L = torch.ops.systems_flash.triton_forward(q, k, v, True)
    do = torch.randn_like(o)
    torch.library.opcheck(torch.ops.systems_flash.triton_forward, (q, k, v, True))
    torch.library.opcheck(torch.ops.systems_flash.triton_backward, (q, k, v, o, do, L, True))
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    torch.library.opcheck(torch.ops.systems_flash.triton_attention, (qg, kg, vg, True))


@pytest.mark.gpu
@GPU
def test_gpu_double_backward_is_refused_by_the_cpp_node():
    q, k, v = make_qkv((1, 1), 64, 64, 64, dtype=torch.bfloat16)
    o = flash_attention_triton(q, k, v, True)
    assert "FlashAttentionTriton" not in type(o.grad_fn).__name__  # the C++ node
    with pytest.raises(RuntimeError, match="does not support double backward"):
        torch.autograd.grad(o.sum(), q, create_graph=True)


@pytest.mark.gpu
@GPU
def test_gpu_python_path_where_the_cpp_one_cannot_build(monkeypatch):
    monkeypatch.setattr(host, "READY", False)
    monkeypatch.setattr(host, "unavailable", lambda: "no compiler here")
    q, k, v = make_qkv((1, 2), 130, 130, 64, dtype=torch.bfloat16)
    check_against_reference(flash_attention_triton, q, k, v, True, TOL[torch.bfloat16])  # L saved in Python
    o = flash_attention_triton(q, k, v, True)
    assert saved_logsumexp(o, q).shape == q.shape[:-1]


@pytest.mark.gpu
@GPU
def test_gpu_model_eager_from_cpp_matches_naive():
    # fp32 inputs: the kernels' products run in TF32, so the tolerance of every other TF32 check (2e-3 failed on
    # one logit in 38,800 by 1.7e-4)
    check_model_matches_naive("flash_triton", context_length=200, num_layers=2, tol=TF32_TOL)


@pytest.mark.gpu
@GPU
def test_gpu_keep_attention_keeps_the_cpp_operator_through_the_recomputation():
    # selective checkpointing sees the C++ operator's forward op and keeps its outputs: same gradients as no
    # checkpointing, and attention's forward runs once per block, not twice
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += func.name() == "systems_flash::triton_forward"
            return func(*args, **(kwargs or {}))

    tokens = torch.randint(0, 97, (2, 256), device="cuda")
    grads, runs = {}, {}
    for blocks, recompute in ((0, "all"), (1, "all"), (1, "keep_attention")):
        torch.manual_seed(0)
        cfg = ModelConfig(vocab_size=97, context_length=256, d_model=128, num_layers=2, num_heads=2, d_ff=256,
                          attention="flash_triton")
        model = TransformerLM(cfg, checkpoint_blocks=blocks, recompute=recompute).cuda()
        for _ in range(2):  # tune, then plans: the counted step runs from C++
            model(tokens).float().sum().backward()
        model.zero_grad()
        with Count() as count:
            model(tokens).float().sum().backward()
        runs[blocks, recompute] = count.n
        grads[blocks, recompute] = [p.grad.clone() for p in model.parameters()]
    assert runs == {(0, "all"): 2, (1, "all"): 4, (1, "keep_attention"): 2}
    for a, b in zip(grads[0, "all"], grads[1, "keep_attention"]):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
