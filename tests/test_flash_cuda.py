"""FlashAttention-2 in CUDA C++ (systems.attention.flash_cpp's CUDA kernels, registered as flash_cuda).

On any machine with nvcc: every kernel the operator launches compiled for sm_80 and sm_90, spilling no more than a
scalar or two; and the reasons the name gives where it cannot run (no GPU, a CPU-only PyTorch, an older GPU, no nvcc,
inputs it does not take). On a GPU: every output against the float64 oracle at the held-out kinds of shapes the other
kernels are tested at, PyTorch's checks of the operators on CUDA tensors, torch.compile with lengths that change,
a model against naive attention, and the CS336 attention tests' procedure through the adapters."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from flash_common import (GPU_CASES, TOL, check_against_reference, check_compiled_at_changing_lengths,
                          check_model_matches_naive_under_autocast, check_sum_backward, deterministic_algorithms,
                          make_qkv, saved_logsumexp)

from systems.attention import flash_cpp, unavailable
from systems.attention._checks import as_4d
from systems.attention.flash_cpp import FlashAttentionCuda, cuda_unavailable, cuda_unsupported, flash_attention_cuda
from systems.attention.reference import attention_logsumexp, naive_attention

GPU = pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0)),
                         reason="needs an NVIDIA GPU of compute capability 8.0 or newer")
SOURCES = Path(flash_cpp.__file__).parent
NVCC = shutil.which("nvcc") or next((str(p) for p in [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" /
                                                      "nvcc"] if p.exists()), None)
# every kernel instantiation a launch can reach: 2 dtypes x 2 head dims x causal or not, per kernel (the dK/dV pass
# also one pass or two; delta per dtype and head dim, dQ's scaling per dtype)
KERNELS = {"flash_cuda_forward.cu": {"flash_fwd_kernel": 8},
           "flash_cuda_backward.cu": {"flash_bwd_dkdv_kernel": 16, "flash_bwd_dq_kernel": 8,
                                      "delta_kernel": 4, "flash_bwd_scale_dq_kernel": 2}}
SPILL_BYTES_ALLOWED = 16  # per kernel, stores and loads: a loop-invariant scalar or two (see the test)


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit) to compile the kernels")
@pytest.mark.parametrize("arch", ["80", "90"])
@pytest.mark.parametrize("source", list(KERNELS))
def test_kernels_compile_spilling_at_most_a_scalar_or_two(source, arch, tmp_path):
    run = subprocess.run([NVCC, "-std=c++17", "-O3", "-cubin", f"-gencode=arch=compute_{arch},code=sm_{arch}",
                          "-Xptxas", "-v", str(SOURCES / source), "-o", str(tmp_path / "kernels.cubin")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    entries = re.findall(r"Compiling entry function '(\w+)'", run.stderr)
    counts = {name: sum(name in entry for entry in entries) for name in KERNELS[source]}
    assert counts == KERNELS[source], entries
    # The largest kernels sit at 255 registers with their tile copies unrolled (load_tile): ptxas may then keep a
    # loop-invariant scalar or two in local memory, stored once and reloaded once a tile step. More than that is a
    # spill that costs time.
    spilled = [int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", run.stderr)]
    assert len(spilled) == 2 * len(entries) and max(spilled) <= SPILL_BYTES_ALLOWED, run.stderr


def test_the_name_says_why_it_cannot_run(monkeypatch):
    cpu = torch.device("cpu")
    assert unavailable("flash_cuda", cpu, torch.bfloat16, 64) == "runs on NVIDIA GPUs (its kernels are CUDA C++), " \
                                                                  "not on cpu"
    for attend in (flash_attention_cuda, FlashAttentionCuda.apply):  # the machine's reason, the same error from both
        with pytest.raises(RuntimeError, match="flash_cuda runs on NVIDIA GPUs"):
            attend(*(torch.randn(2, 8, 64),) * 3)
    gpu = torch.device("cuda", 0)
    # each reason is found before anything is built: a build under the patched torch below would differ in its
    # arguments from the real one, and load a second library defining the same operators
    monkeypatch.setattr(flash_cpp, "_load", lambda *args, **kwargs: pytest.fail("a reason needed a build"))
    monkeypatch.setattr(torch.version, "cuda", None)
    assert cuda_unavailable(gpu) == "needs a PyTorch built with CUDA; this one is built for the CPU only"
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cuda_unavailable(gpu) == "needs a CUDA GPU, and none is visible"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    assert cuda_unavailable(gpu) == "needs a GPU of compute capability 8.0 or newer (bf16 tensor-core products); " \
                                    "Tesla T4 is 7.5"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr("torch.utils.cpp_extension.CUDA_HOME", None)
    flash_cpp._build_cuda.cache_clear()
    try:
        assert cuda_unavailable(gpu) == "needs nvcc (the CUDA toolkit) to build its kernels, and none was found " \
                                        "(set CUDA_HOME)"
    finally:
        flash_cpp._build_cuda.cache_clear()


def test_inputs_the_kernels_do_not_take_are_named():
    assert cuda_unsupported(torch.bfloat16, 64) is None and cuda_unsupported(torch.float16, 128) is None
    assert cuda_unsupported(torch.float32, 64) == "computes in float16 or bfloat16, as FlashAttention-2 does, not " \
                                                  "float32 (cast the inputs, or run under torch.autocast)"
    assert cuda_unsupported(torch.bfloat16, 96) == "takes head dims 64 and 128, not 96"
    assert "head dims 16..128" in unavailable("flash_cuda", torch.device("cuda"), torch.bfloat16, 256)


# ---- on the GPU ----

def logsumexp(q, k, v, is_causal):
    """L from the forward op itself: the C++ autograd node keeps its saved tensors out of Python's reach."""
    _, L = torch.ops.systems_flash.forward(as_4d(q.detach()), as_4d(k.detach()), as_4d(v.detach()), is_causal)
    return L.view(q.shape[:-1])


# the shapes every GPU kernel is held to, and beside them: one query against many keys, whole tiles only, a long pair
CASES = GPU_CASES + [((2,), 1, 257, 128, torch.float16, True), ((1, 2), 256, 256, 64, torch.float16, True),
                     ((1, 2), 2048, 2048, 128, torch.bfloat16, True)]


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[1]}x{c[2]}-d{c[3]}-{str(c[4])[6:]}" for c in CASES])
def test_gpu_matches_the_oracle(case, is_causal):
    batch, n_q, n_k, d, dtype, contiguous = CASES[case]
    q, k, v = make_qkv(batch, n_q, n_k, d, dtype=dtype, contiguous=contiguous)
    check_against_reference(flash_attention_cuda, q, k, v, is_causal, TOL[dtype], logsumexp=logsumexp)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("case", [1, 4, 6], ids=lambda c: f"{CASES[c][1]}x{CASES[c][2]}-d{CASES[c][3]}")
def test_gpu_deterministic_mode_takes_two_passes_that_repeat_bit_for_bit(case, is_causal):
    # by default dQ is added up in the dK/dV pass in any order (the oracle tests above run that way); asked for
    # deterministic algorithms, the backward takes two passes: right, and the same bits every time
    batch, n_q, n_k, d, dtype, contiguous = CASES[case]
    q, k, v = make_qkv(batch, n_q, n_k, d, dtype=dtype, contiguous=contiguous)
    with deterministic_algorithms():
        check_against_reference(flash_attention_cuda, q, k, v, is_causal, TOL[dtype], logsumexp=logsumexp)
        do = torch.randn_like(q)
        runs = [torch.autograd.grad(flash_attention_cuda(q, k, v, is_causal), (q, k, v), do) for _ in range(3)]
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(run, runs[0]))


@pytest.mark.gpu
@GPU
def test_gpu_stride_zero_gradient_and_layouts_the_kernels_cannot_write():
    check_sum_backward(flash_attention_cuda, (2, 2), 300, 64, TOL[torch.bfloat16], dtype=torch.bfloat16)
    # q dense but with the head dim outermost: the output keeps q's layout, written through a copy
    q, k, v = (torch.randn(2, 2, 64, 100, device="cuda", dtype=torch.bfloat16).transpose(-1, -2).requires_grad_()
               for _ in range(3))
    check_against_reference(flash_attention_cuda, q, k, v, True, TOL[torch.bfloat16], logsumexp=logsumexp)


@pytest.mark.gpu
@GPU
def test_gpu_inputs_it_does_not_take_are_refused():
    q = torch.randn(1, 2, 16, 64, device="cuda")
    with pytest.raises(ValueError, match="flash_cuda computes in float16 or bfloat16"):
        flash_attention_cuda(q, q, q, True)
    q = torch.randn(1, 2, 16, 96, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="head dims 64 and 128, not 96"):
        flash_attention_cuda(q, q, q, True)
    with pytest.raises(RuntimeError, match="does not support double backward"):
        q = torch.randn(1, 2, 16, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        torch.autograd.grad(flash_attention_cuda(q, q, q, True).sum(), q, create_graph=True)


@pytest.mark.gpu
@GPU
def test_gpu_the_operators_pass_pytorchs_checks():
    q, k, v = (torch.randn(2, 2, 77, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    for causal in (False, True):
        torch.library.opcheck(torch.ops.systems_flash.attention.default, (q, k, v, causal))
        torch.library.opcheck(torch.ops.systems_flash.forward.default, (q.detach(), k.detach(), v.detach(), causal))


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("dynamic", [None, True], ids=["recompile", "dynamic"])
def test_gpu_compiled_with_lengths_that_change(dynamic, monkeypatch):
    monkeypatch.setattr(flash_cpp, "_CUDA_LOADED", False)  # traced as a process's first call is: one graph all the same
    check_compiled_at_changing_lengths(flash_attention_cuda, (((2, 4), 64), ((2, 4), 96), ((1, 4), 130), ((3, 2), 17)),
                                       64, TOL[torch.bfloat16], dtype=torch.bfloat16, dynamic=dynamic)


@pytest.mark.gpu
@GPU
def test_gpu_model_matches_naive_attention_under_autocast():
    check_model_matches_naive_under_autocast("flash_cuda", context_length=96, num_heads=2, tol=TOL[torch.bfloat16])


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("is_causal", [False, True])
def test_gpu_the_cs336_attention_tests_through_the_adapter(is_causal):
    # the course's test_attention.py: (4, 128, 64) fp32 inputs from seed 0, the log-sum-exp found among the saved
    # tensors by its shape, the output, L and the gradients within 1e-2 of the naive formula in fp32
    import adapters

    impl = adapters.get_flashattention_autograd_function_cuda().apply
    torch.random.manual_seed(0)
    q, k, v = (torch.randn(4, 128, 64, device="cuda", requires_grad=True) for _ in range(3))
    do = torch.randn(4, 128, 64, device="cuda")
    o = impl(q, k, v, is_causal)
    torch.testing.assert_close(o, naive_attention(q, k, v, is_causal), rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(saved_logsumexp(o, q), attention_logsumexp(q, k, is_causal), rtol=1e-2, atol=1e-2)
    o.backward(do)
    want = torch.autograd.grad(naive_attention(q, k, v, is_causal), (q, k, v), do)
    for got, expected in zip((q.grad, k.grad, v.grad), want):
        torch.testing.assert_close(got, expected, rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match="computes fp32 inputs in fp16"):
        impl(q.detach() * 1e5, k, v, is_causal)
