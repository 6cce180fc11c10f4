"""Shared by the FlashAttention tests: inputs, the float64 oracle, per-dtype tolerances, bad inputs."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from systems.attention.oracle import TF32_TOLERANCE, TOLERANCE, reference_forward_backward
from systems.model import TransformerLM, preset


@contextlib.contextmanager
def deterministic_algorithms(enabled: bool = True):
    """torch.use_deterministic_algorithms(enabled) for the block, then the mode as it was."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(enabled)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# bf16 is tested on the GPU only: the Triton interpreter multiplies raw bf16 bits (pitfalls.md)
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if DEVICE.type == "cuda" else [])

# Largest error allowed, relative to the largest entry of the reference: the package's policy (oracle.py)
TOL, TF32_TOL = TOLERANCE, TF32_TOLERANCE


# Shapes every FlashAttention implementation is checked at: batch dims, Nq, Nk, d
SHAPE_CASES = [
    ((2,), 1, 1, 16),
    ((2,), 17, 100, 32),  # ragged, more keys than queries
    ((1, 3), 100, 17, 64),  # (B, H, N, d), more queries than keys
    ((2, 2), 130, 130, 128),  # past one 64-row tile
    ((2,), 33, 47, 48),  # head dim that is not a power of two
]

# The held-out kinds of shapes the GPU kernels (Hopper, CUDA C++) are checked at: batch dims, Nq, Nk, d, dtype,
# contiguous. Lengths that are not whole tiles, Nq = 1, Nq != Nk both ways, strided inputs, both head dims and dtypes.
GPU_CASES = [((2, 3), 200, 200, 64, torch.bfloat16, True), ((1, 2), 130, 77, 64, torch.float16, False),
             ((1, 1), 1, 1, 64, torch.bfloat16, True), ((2, 2), 333, 333, 128, torch.bfloat16, False),
             ((1, 2), 77, 300, 128, torch.float16, True), ((1, 2), 300, 77, 128, torch.bfloat16, True),
             ((3,), 1000, 1000, 64, torch.bfloat16, True)]


def make_qkv(batch: tuple[int, ...], n_q: int, n_k: int, d: int, dtype=torch.float32, contiguous=True, seed=None):
    """Random q (*batch, n_q, d), k, v (*batch, n_k, d) needing grad; non-contiguous ones are strided views."""
    g = torch.Generator().manual_seed(seed) if seed is not None else None

    def one(n):
        if contiguous:
            x = torch.randn(*batch, n, d, generator=g)
        else:
            # the sequence dim outermost and the head dim padded: every stride differs from the contiguous one
            x = torch.randn(n, *batch, d + 8, generator=g).movedim(0, -2)[..., :d]
        return x.to(device=DEVICE, dtype=dtype).requires_grad_()

    q, k, v = one(n_q), one(n_k), one(n_k)
    if not contiguous:
        assert not q.is_contiguous()
    return q, k, v


def misaligned(x: torch.Tensor) -> torch.Tensor:
    """``x``'s values in a view one element past a 16-byte boundary (what Triton specialises pointers on)."""
    flat = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
    view = flat[1:].view(x.shape).copy_(x.detach())
    assert view.data_ptr() % 16 != 0
    return view.requires_grad_()


def reference(q, k, v, do, is_causal):
    """(O, L, dQ, dK, dV) in float64 from the naive formula (systems.attention.oracle)."""
    return reference_forward_backward(q, k, v, do, is_causal)


def assert_close_to(actual, expected, tol, name):
    """Every element within tol * max|expected| (plus tol relative): scale-aware and still element-wise."""
    actual, expected = actual.double(), expected.double()
    assert actual.shape == expected.shape, f"{name}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert torch.isfinite(actual).all(), f"{name}: non-finite values"
    # Floor at the scale of the unit-normal inputs: a gradient that is exactly 0 in exact arithmetic (dQ with one
    # key, or of a causal first row) is a difference of O(1) terms, so its rounding error is relative to those.
    scale = expected.abs().max().clamp_min(1.0)
    torch.testing.assert_close(actual, expected, atol=tol * scale.item(), rtol=tol, msg=lambda m: f"{name}: {m}")


def saved_logsumexp(o, q):
    """The one saved tensor shaped like q without its last dim, found the way the CS336 tests find it."""
    found = [t for t in o.grad_fn.saved_tensors if t.shape == q.shape[:-1]]
    assert len(found) == 1, f"expected exactly one saved tensor of shape {tuple(q.shape[:-1])}, got {len(found)}"
    return found[0]


def check_against_reference(apply, q, k, v, is_causal, tol, do=None, logsumexp=None):
    """Run ``apply(q, k, v, is_causal)`` forward and backward; compare O, L, dQ, dK, dV with the oracle. L is the
    tensor the autograd function saved (as the CS336 tests find it), or ``logsumexp(q, k, v, is_causal)`` where the
    autograd node keeps it out of Python's reach (a C++ one)."""
    o = apply(q, k, v, is_causal)
    if logsumexp is None:
        L = saved_logsumexp(o, q)
        assert o.grad_fn.is_causal == is_causal
    else:
        L = logsumexp(q, k, v, is_causal)
    do = torch.randn_like(o) if do is None else do
    o.backward(do)
    expected = reference(q, k, v, do, is_causal)
    for name, actual, exp in zip(("O", "L", "dQ", "dK", "dV"), (o, L, q.grad, k.grad, v.grad), expected):
        assert_close_to(actual, exp, tol, name)


def bad_inputs():
    """(q, k, v, words the error must contain) for input the kernels must refuse."""
    t = lambda *s, dtype=torch.float32: torch.randn(*s, dtype=dtype, device=DEVICE)  # noqa: E731
    return [
        ((t(2, 8, 16), t(3, 8, 16), t(3, 8, 16)), "batch"),
        ((t(2, 2, 8, 16), t(2, 3, 8, 16), t(2, 3, 8, 16)), "batch"),
        ((t(2, 8, 32), t(2, 8, 16), t(2, 8, 16)), "head dimension"),
        ((t(2, 8, 16), t(2, 8, 16), t(2, 9, 16)), "same shape"),
        ((t(2, 8, 8), t(2, 8, 8), t(2, 8, 8)), "head dimension"),
        ((t(2, 8, 256), t(2, 8, 256), t(2, 8, 256)), "head dimension"),
        ((t(8, 16), t(8, 16), t(8, 16)), "must be (batch"),
        ((t(2, 8, 16), t(2, 1, 8, 16), t(2, 1, 8, 16)), "number of dimensions"),
        ((t(2, 8, 16), t(2, 8, 16, dtype=torch.float16), t(2, 8, 16)), "dtype"),
        ((t(2, 8, 16, dtype=torch.float64),) * 3, "dtype"),
        ((t(2, 8, 16), t(2, 8, 16), t(2, 8, 16).to("meta")), "device"),
        ((t(2, 0, 16), t(2, 8, 16), t(2, 8, 16)), "at least 1"),
    ]


def check_sum_backward(apply, batch, n, d, tol, dtype=torch.float32):
    """``apply(q, k, v, causal).sum().backward()``, as the leaderboard harness does (dO has stride 0)."""
    q, k, v = make_qkv(batch, n, n, d, dtype=dtype)
    o = apply(q, k, v, True)
    o.sum().backward()
    expected = reference(q, k, v, torch.ones_like(o), True)
    for name, actual, exp in zip(("O", "dQ", "dK", "dV"), (o, q.grad, k.grad, v.grad), expected[:1] + expected[2:]):
        assert_close_to(actual, exp, tol, name)


def check_compiled_at_changing_lengths(apply, cases, d, tol, dtype=torch.float32, **compile_options):
    """``torch.compile(apply, fullgraph=True, **compile_options)`` called at each ``(batch, n)`` of ``cases`` in turn
    (the compiler retraces, or traces the lengths as symbols), every call's output and gradients against the oracle;
    returns the compiled function for further calls. One graph: a break around the attention would cost a model a
    graph per layer."""
    torch._dynamo.reset()
    compiled = torch.compile(apply, fullgraph=True, **compile_options)
    for batch, n in cases:
        check_sum_backward(compiled, batch, n, d, tol, dtype=dtype)
    return compiled


def check_bad_input_refused(apply, case):
    (q, k, v), words = bad_inputs()[case]
    with pytest.raises(ValueError, match=re.escape(words)):
        apply(q, k, v, False)


def check_model_matches_naive(attention, context_length, num_layers, tol):
    """The Transformer LM's logits with ``attention`` against the same model with naive attention."""
    tiny = dict(vocab_size=97, context_length=context_length, d_model=64, num_layers=num_layers, num_heads=4, d_ff=96)
    tokens = torch.randint(0, 97, (2, context_length), device=DEVICE)
    logits = {}
    for name in ("naive", attention):
        torch.manual_seed(0)
        logits[name] = TransformerLM(preset("small", attention=name, **tiny)).to(DEVICE)(tokens)
    torch.testing.assert_close(logits[attention], logits["naive"], rtol=tol, atol=tol)


def check_model_matches_naive_under_autocast(attention, context_length, num_heads, tol):
    """On the GPU under bf16 autocast (d_model 256, so the head dim is 256 / num_heads): the logits with
    ``attention`` against naive attention's, and finite gradients after a backward pass."""
    tiny = dict(vocab_size=97, context_length=context_length, d_model=256, num_layers=2, num_heads=num_heads, d_ff=384)
    tokens = torch.randint(0, 97, (2, context_length), device="cuda")
    logits = {}
    for name in ("naive", attention):
        torch.manual_seed(0)
        model = TransformerLM(preset("small", attention=name, **tiny)).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits[name] = model(tokens)
            logits[name].float().square().mean().backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    assert_close_to(logits[attention], logits["naive"].double(), tol, "logits")



def rerun_without_interpreter() -> bool:
    """Under Triton's interpreter the kernels are no compilable objects: run the calling test again in a process
    without it (compiling for a GPU needs no GPU) and say whether that was done."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
    env = os.environ | {"TRITON_INTERPRET": "0"}  # conftest only sets it where unset
    run = subprocess.run([sys.executable, "-m", "pytest", node, "-q", "-p", "no:cacheprovider", "-o", "addopts="],
                         env=env, capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert run.returncode == 0, run.stdout[-4000:]
    return True


def ptxas_report(ptx: str, tmp_path: Path) -> tuple[int, bool]:
    """What ptxas says when it assembles the PTX for the H100: (spilled bytes, wgmma serialised?)."""
    import triton

    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    arch = re.search(r"^\.target (sm_\w+)", ptx, re.MULTILINE).group(1)
    source = tmp_path / "kernel.ptx"
    source.write_text(ptx)
    run = subprocess.run([str(ptxas), "-v", f"--gpu-name={arch}", str(source), "-o", str(tmp_path / "kernel.cubin")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    spilled = sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", run.stderr))
    return spilled, "C7515" in run.stderr  # C7515: wgmma products serialised
