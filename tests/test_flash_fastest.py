"""``flash`` (systems.attention.fastest): our fastest FlashAttention for the inputs' device, the kernels written for
Hopper on an sm_90 GPU where they build and the Triton kernel elsewhere.

On any machine: the choice for each kind of device (a Hopper GPU faked where there is none), the one warning a Hopper
GPU without the Hopper kernels gives, the calls going to the kernel chosen, the reasons ``unavailable`` gives, and
off Hopper the results against the float64 oracle, in a model and compiled into one graph at changing lengths. On an
sm_90 GPU: the same results as ``flash_hopper`` bit for bit, and the whole model compiled with CUDA graphs, its
sequence length changing, against the eager model."""

from __future__ import annotations

import warnings

import pytest
import torch
from flash_common import (DEVICE, TOL, check_against_reference, check_compiled_at_changing_lengths,
                          check_model_matches_naive, deterministic_algorithms, make_qkv)

from systems.attention import fastest, get_attention, runs_as, unavailable
from systems.attention.flash_cpp import hopper
from systems.recompute import check_recompute

HOPPER = pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)),
                            reason="needs a Hopper GPU (sm_90)")
GPU0 = torch.device("cuda", 0)


@pytest.fixture
def fresh_choices(monkeypatch):
    """The choice asked again for every device, as in a new process."""
    monkeypatch.setattr(fastest, "_HOPPER_RUNS", {})


def fake_gpu(monkeypatch, capability, hopper_why):
    """A GPU of ``capability`` visible, on which the Hopper kernels give ``hopper_why`` for not running (None: they
    run)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(hopper, "unavailable", lambda device: hopper_why)


def test_the_name_is_registered_beside_the_kernels_it_chooses_between():
    assert get_attention("flash") is fastest.flash_attention
    check_recompute("keep_attention", "flash")  # it runs one operator the policy can keep, whichever it takes


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without a GPU")
def test_off_a_gpu_it_is_the_triton_kernel_and_says_nothing(fresh_choices):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fastest.fastest_flash(torch.device("cpu")) == runs_as("flash", torch.device("cpu")) == "flash_triton"
    for dtype, d in ((torch.bfloat16, 64), (torch.float32, 64), (torch.float32, 200)):
        assert unavailable("flash", torch.device("cpu"), dtype, d) == \
            unavailable("flash_triton", torch.device("cpu"), dtype, d)
    assert unavailable("flash", torch.device("cpu"), torch.float32, 200).startswith("takes head dims")


def test_a_hopper_gpu_takes_the_hopper_kernels(fresh_choices, monkeypatch):
    fake_gpu(monkeypatch, (9, 0), None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fastest.fastest_flash(GPU0) == "flash_hopper"
    assert runs_as("flash", GPU0) == "flash_hopper" and runs_as("sdpa", GPU0) == "sdpa"


@pytest.mark.parametrize("capability", [(8, 0), (10, 0)])
def test_another_gpu_takes_the_triton_kernel_without_a_word(fresh_choices, monkeypatch, capability):
    fake_gpu(monkeypatch, capability, "needs a Hopper GPU")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fastest.fastest_flash(GPU0) == "flash_triton"


def test_a_hopper_gpu_without_the_hopper_kernels_says_why_once(fresh_choices, monkeypatch):
    why = "needs nvcc (the CUDA toolkit) to build its kernel, and none was found (set CUDA_HOME)"
    fake_gpu(monkeypatch, (9, 0), why)
    with pytest.warns(UserWarning) as said:
        assert fastest.fastest_flash(GPU0) == "flash_triton"
        assert fastest.fastest_flash(GPU0) == "flash_triton"
    said = [str(w.message) for w in said]
    assert said == [f"attention 'flash' takes the Triton kernel on cuda:0, since flash_hopper {why}"]


@pytest.mark.parametrize("on_hopper", [True, False])
def test_a_call_goes_to_the_kernel_chosen_for_its_device(fresh_choices, monkeypatch, on_hopper):
    calls = []
    monkeypatch.setattr(fastest, "hopper_runs", lambda device: on_hopper)
    monkeypatch.setattr(hopper, "flash_attention_hopper", lambda *a: calls.append(("flash_hopper", a)) or a[0])
    monkeypatch.setattr(fastest, "flash_attention_triton", lambda *a: calls.append(("flash_triton", a)) or a[0])
    q = torch.randn(1, 2, 5, 16)
    assert fastest.flash_attention(q, q, q, True) is q
    assert calls == [("flash_hopper" if on_hopper else "flash_triton", (q, q, q, True))]


@pytest.mark.skipif(torch.cuda.is_available(), reason="off a GPU: the Triton kernel in the interpreter")
def test_off_hopper_it_matches_the_oracle_in_a_model_and_compiled():
    n_q, n_k = torch.randint(20, 90, (2,)).tolist()  # fresh lengths each run
    for is_causal in (False, True):
        q, k, v = make_qkv((2, 3), n_q, n_k, 32)
        check_against_reference(fastest.flash_attention, q, k, v, is_causal, TOL[torch.float32])
    check_model_matches_naive("flash", context_length=24, num_layers=1, tol=TOL[torch.float32])
    # one graph: the choice is a constant of the trace, not a break
    check_compiled_at_changing_lengths(fastest.flash_attention, [((1, 2), n) for n in (40, 56, 33)], 32,
                                       TOL[torch.float32], backend="aot_eager")


# ---- on the GPU ----

@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("d", [64, 80, 128])
def test_gpu_on_hopper_it_is_flash_hopper_bit_for_bit(d):
    assert fastest.fastest_flash(DEVICE) == "flash_hopper"
    assert unavailable("flash", DEVICE, torch.bfloat16, d) is None
    q, k, v = make_qkv((2, 3), 300, 333, d, dtype=torch.bfloat16)
    do = torch.randn_like(q)
    with deterministic_algorithms():  # the backward's two passes, which repeat bit for bit
        got, want = ((f(q, k, v, True), *torch.autograd.grad(f(q, k, v, True), (q, k, v), do))
                     for f in (fastest.flash_attention, hopper.flash_attention_hopper))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.gpu
@HOPPER
def test_gpu_the_model_compiled_with_cuda_graphs_at_changing_lengths_matches_eager():
    from systems.model import TransformerLM, preset

    torch.manual_seed(0)
    model = TransformerLM(preset("tiny", vocab_size=97, context_length=256, num_heads=4, d_model=256,
                                 attention="flash")).to(DEVICE)
    compiled = torch.compile(model, mode="reduce-overhead")
    for n in (256, 192, 256, 77):
        tokens = torch.randint(0, 97, (2, n), device=DEVICE)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            want = model(tokens).float()
            want.square().mean().backward()
            eager_grads = [p.grad.clone() for p in model.parameters()]
            for _ in range(3):  # warm-up, recorded, replayed
                torch.compiler.cudagraph_mark_step_begin()
                model.zero_grad(set_to_none=True)
                got = compiled(tokens).float()
                got.square().mean().backward()
        torch.testing.assert_close(got, want, rtol=3e-2, atol=3e-2)
        for p, g in zip(model.parameters(), eager_grads):
            torch.testing.assert_close(p.grad, g, rtol=5e-2, atol=5e-2 * g.abs().max().item())
        model.zero_grad(set_to_none=True)
