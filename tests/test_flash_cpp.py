"""FlashAttention-2 as a C++ operator (systems.attention.flash_cpp): forward, log-sum-exp and gradients against the
float64 oracle, the operator's registration as PyTorch checks it, torch.compile with lengths that change between
calls, and a model built with it. The extension is built on first use (a C++ compiler and ninja: both are in the
test requirements and on every machine the tests run on)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time

import pytest
import torch
from flash_common import (SHAPE_CASES, TOL, assert_close_to, bad_inputs, check_against_reference,
                          check_bad_input_refused, check_compiled_at_changing_lengths, check_model_matches_naive,
                          make_qkv, reference)

from systems.attention import flash_cpp, get_attention, unavailable
from systems.attention._checks import as_4d
from systems.attention.flash_cpp import flash_attention_cpp

CPU = torch.device("cpu")
LENGTHS = (((2, 4), 64), ((2, 4), 96), ((1, 4), 130), ((3, 2), 17))  # (batch dims, N) of the compiled calls, in turn


def logsumexp(q, k, v, is_causal):
    """L from the forward op itself: the C++ autograd node keeps its saved tensors out of Python's reach."""
    _, L = torch.ops.systems_flash.forward(as_4d(q.detach()), as_4d(k.detach()), as_4d(v.detach()), is_causal)
    return L.view(q.shape[:-1])


def check(q, k, v, is_causal, tol):
    check_against_reference(flash_attention_cpp, q, k, v, is_causal, tol, logsumexp=logsumexp)


@pytest.fixture(scope="module", autouse=True)
def built():
    assert unavailable("flash_cpp", CPU, torch.float32, 64) is None  # the build works here: not skipped, checked


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("batch,n_q,n_k,d", SHAPE_CASES)
def test_matches_reference(batch, n_q, n_k, d, is_causal):
    q, k, v = make_qkv(batch, n_q, n_k, d, seed=None)
    q, k, v = (t.cpu().detach().requires_grad_() for t in (q, k, v))
    check(q, k, v, is_causal, TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_widened(dtype):
    q, k, v = (t.cpu().detach().requires_grad_() for t in make_qkv((2, 2), 40, 70, 32, dtype=dtype))
    check(q, k, v, True, TOL[dtype])


def test_non_contiguous_inputs_and_a_stride_zero_gradient():
    q, k, v = (t.cpu().detach().requires_grad_() for t in make_qkv((2, 3), 33, 40, 32, contiguous=False))
    check(q, k, v, True, TOL[torch.float32])
    q, k, v = (t.cpu().detach().requires_grad_() for t in make_qkv((2, 2), 20, 30, 16))
    flash_attention_cpp(q, k, v, True).sum().backward()  # dO expanded from a scalar: every stride 0
    expected = reference(q, k, v, torch.ones(2, 2, 20, 16), True)
    for name, actual, exp in zip(("dQ", "dK", "dV"), (q.grad, k.grad, v.grad), expected[2:]):
        assert_close_to(actual, exp, TOL[torch.float32], name)


def test_the_operators_pass_pytorchs_checks():
    # schema, autograd registration (the C++ autograd node), fake tensors (the Meta kernels), and AOT dispatch with
    # static and dynamic shapes: what torch.compile relies on
    q, k, v = (torch.randn(2, 2, 37, 16, requires_grad=True) for _ in range(3))
    for causal in (False, True):
        torch.library.opcheck(torch.ops.systems_flash.attention.default, (q, k, v, causal))
        torch.library.opcheck(torch.ops.systems_flash.forward.default, (q.detach(), k.detach(), v.detach(), causal))


@pytest.mark.parametrize("dynamic", [None, True], ids=["recompile", "dynamic"])
def test_compiled_with_lengths_that_change(dynamic):
    compiled = check_compiled_at_changing_lengths(flash_attention_cpp, LENGTHS, 32, TOL[torch.float32],
                                                  backend="aot_eager", dynamic=dynamic)
    q, k, v = (torch.randn(2, 3, n, 32, requires_grad=True) for n in (50, 70, 70))  # Nq != Nk, marked by hand
    for t in (q, k, v):
        torch._dynamo.mark_dynamic(t, 2)
    check_against_reference(compiled, q, k, v, False, TOL[torch.float32], logsumexp=logsumexp)


def test_compiled_before_any_eager_call_it_is_one_graph(monkeypatch):
    # a process whose first call is a compiled one traces the check that builds the operator: traced, the build's
    # file-system calls would break the graph around the attention (in a model: a break in every layer)
    monkeypatch.setattr(flash_cpp, "_LOADED", False)
    torch._dynamo.reset()
    compiled = torch.compile(flash_attention_cpp, backend="aot_eager", fullgraph=True)
    q, k, v = make_qkv((2, 3), 40, 33, 16)
    check_against_reference(compiled, q, k, v, True, TOL[torch.float32], logsumexp=logsumexp)


def test_compiled_with_a_graph_break_after_it_before_any_eager_call(monkeypatch):
    # a graph break makes dynamo trace the frame again: the second trace must take the first one's path, although
    # the first trace's check built the operator and set the flag (seen with flash_hopper in a compiled block)
    def attend_then_break(q, k, v):
        o = flash_attention_cpp(q, k, v, is_causal=True)
        torch._dynamo.graph_break()
        return o * 2

    built = flash_cpp._build  # cached once built: the flag is set again as the first build sets it

    def build_and_set_the_flag():
        why = built()
        flash_cpp._LOADED = why is None
        return why

    monkeypatch.setattr(flash_cpp, "_LOADED", False)
    monkeypatch.setattr(flash_cpp, "_build", build_and_set_the_flag)
    torch._dynamo.reset()
    q, k, v = make_qkv((2, 3), 40, 33, 16)
    got = torch.compile(attend_then_break, backend="aot_eager")(q, k, v)
    torch.testing.assert_close(got, 2 * flash_attention_cpp(q, k, v, is_causal=True), rtol=0, atol=0)


@pytest.mark.parametrize("case", range(len(bad_inputs())))
def test_bad_input_raises(case):
    check_bad_input_refused(flash_attention_cpp, case)


def test_double_backward_is_refused_and_other_devices_are_named():
    q, k, v = (torch.randn(2, 16, 16, requires_grad=True) for _ in range(3))
    with pytest.raises(RuntimeError, match="does not support double backward"):
        torch.autograd.grad(flash_attention_cpp(q, k, v, True).sum(), q, create_graph=True)
    assert "runs on the CPU" in unavailable("flash_cpp", torch.device("cuda"), torch.float32, 64)


def test_model_logits_match_naive_attention():
    assert get_attention("flash_cpp") is flash_attention_cpp
    check_model_matches_naive("flash_cpp", context_length=40, num_layers=2, tol=1e-4)


def test_without_a_compiler_it_says_why_and_the_package_still_imports(monkeypatch):
    from systems.attention import flash_cpp

    monkeypatch.setattr(flash_cpp.shutil, "which", lambda name: None)
    flash_cpp._build.cache_clear()
    try:
        assert unavailable("flash_cpp", CPU, torch.float32, 64) == "needs a C++ compiler (c++, g++ or clang++) to " \
                                                                     "build its extension"
    finally:
        flash_cpp._build.cache_clear()  # the next call finds the extension built and loads it again


BUILD_A_TINY_EXTENSION = """
import sys
from pathlib import Path
from systems.attention import flash_cpp
print(flash_cpp.build_extension("systems_tiny", (Path(sys.argv[1]),), "a tiny extension"))
"""


def tiny_build(tmp_path):
    """The command that builds a one-function extension into a fresh extensions folder, its environment, and the
    folder torch builds it in."""
    source = tmp_path / "tiny.cpp"
    source.write_text("int systems_tiny_answer() { return 42; }\n")
    env = os.environ | {"TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions")}
    build_directory = tmp_path / "extensions" / "systems_tiny"
    build_directory.mkdir(parents=True)
    return [sys.executable, "-c", BUILD_A_TINY_EXTENSION, str(source)], env, build_directory


def test_a_build_stopped_half_way_does_not_hold_up_the_next(tmp_path):
    command, env, build_directory = tiny_build(tmp_path)
    (build_directory / "lock").touch()  # torch's lock file as a build killed half-way leaves it: torch waits forever
    run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert run.stdout.strip() == "None", run.stderr
    assert not (build_directory / "lock").exists()


def test_a_second_build_waits_for_the_first_and_says_so(tmp_path):
    command, env, build_directory = tiny_build(tmp_path)
    log = tmp_path / "stderr.txt"
    with open(build_directory / "systems.lock", "w") as held, open(log, "w") as stderr:
        fcntl.flock(held, fcntl.LOCK_EX)  # a build under way in another process
        second = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
        try:
            deadline = time.monotonic() + 120
            while "waiting for another process" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert "waiting for another process that is building a tiny extension" in log.read_text()
            assert second.poll() is None
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
        out, _ = second.communicate(timeout=300)
    assert out.strip() == "None", log.read_text()
