"""The Hopper kernels (Gluon): compiled for sm_90a on any machine (ptxas's registers and spills, the WGMMA waits each
kernel is meant to have, the register reallocation of the warp-specialised forward, products left in flight in
the backward), and on the H100 against the float64 oracle at the held-out kinds of shapes the Triton kernel is tested
at."""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import pytest
import torch
from flash_common import GPU_CASES, assert_close_to, make_qkv, reference, rerun_without_interpreter

from systems.attention.flash_hopper import BACKWARD_TILES, VARIANTS, Variant, backward_hopper, backward_kernels, \
    forward_hopper, kernels, unsupported

GPU = pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)),
                         reason="needs a Hopper GPU")
POINTERS = ("Q", "K", "V", "O", "L", "DO", "DELTA", "DK", "DV", "DQ")
FP32_POINTERS = ("L", "DELTA")


def _compile_for_sm90a(fn, consts: dict, tmp_path: Path) -> tuple[str, str]:
    """Gluon kernel ``fn`` compiled for the H100 as a launch would specialise it: its PTX and ptxas's report."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    signature = {n: "constexpr" if n in consts else "*fp32" if n in FP32_POINTERS else "*bf16" if n in POINTERS
                 else "fp32" if n in ("qk_scale", "scale") else "i32" for n in fn.arg_names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names) if n in POINTERS}
    compiled = triton.compile(GluonASTSource(fn, signature, consts, aligned), target=GPUTarget("cuda", 90, 32),
                              options=dict(num_warps=consts["num_warps"]))
    ptx = compiled.asm["ptx"]
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    (tmp_path / "k.ptx").write_text(ptx)
    run = subprocess.run([str(ptxas), "-v", "--gpu-name=sm_90a", str(tmp_path / "k.ptx"), "-o",
                          str(tmp_path / "k.cubin")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return ptx, run.stderr


def _forward_for_sm90a(variant: Variant, head_dim: int, is_causal: bool, tmp_path: Path) -> tuple[str, str]:
    fn = kernels.fwd_ws_kernel if variant.warp_specialised else kernels.fwd_kernel
    consts = dict(HEAD_DIM=head_dim, BLOCK_N=variant.block_n, STAGES=variant.stages, CAUSAL=is_causal)
    consts |= dict(CONSUMER_REGS=variant.consumer_registers, num_warps=4) if variant.warp_specialised else dict(
        OVERLAP=variant.overlap, num_warps=8)
    return _compile_for_sm90a(fn, consts, tmp_path)


def test_every_variant_compiles_for_the_h100_as_designed(tmp_path):
    if rerun_without_interpreter():
        return
    for (name, variant), head_dim in itertools.product(VARIANTS.items(), (64, 128)):
        where = f"{name}, head dim {head_dim}"
        ptx, report = _forward_for_sm90a(variant, head_dim, True, tmp_path)
        assert "sm_90a" in ptx and "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx, where
        assert not re.search(r"[1-9]\d* bytes spill stores", report), (where, report)
        waits = set(re.findall(r"wgmma.wait_group.sync.aligned (\d+)", ptx))
        # overlapped: S waited for with the PV before it still running; otherwise every product is waited for
        assert waits == ({"0", "1"} if variant.overlap else {"0"}), (where, waits)
        if variant.warp_specialised:  # the consumers take the registers the producer gives up
            assert re.search(rf"setmaxnreg.inc.sync.aligned.u32\s+{variant.consumer_registers};", ptx), where
            assert "C7508" not in report, (where, report)  # ptxas ignoring setmaxnreg says so


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("is_causal", [True, False])
def test_backward_compiles_for_the_h100_with_its_products_in_flight(head_dim, is_causal, tmp_path):
    if rerun_without_interpreter():
        return
    tiles = BACKWARD_TILES[head_dim]
    common = dict(HEAD_DIM=head_dim, STAGES=tiles.stages, CAUSAL=is_causal, num_warps=backward_kernels.NUM_WARPS.value)
    for fn, consts in ((backward_kernels.bwd_dkdv_kernel, common | dict(BLOCK_M=tiles.block_m)),
                       (backward_kernels.bwd_dq_kernel, common | dict(BLOCK_N=tiles.block_n))):
        where = f"{fn.__name__}, head dim {head_dim}"
        ptx, report = _compile_for_sm90a(fn, consts, tmp_path)
        assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx, where
        assert not re.search(r"[1-9]\d* bytes spill stores", report), (where, report)
        # S retired while dP runs (wait 1), then dP (wait 0); ptxas keeps them asynchronous (no C7512)
        assert set(re.findall(r"wgmma.wait_group.sync.aligned (\d+)", ptx)) == {"0", "1"}, where
        assert "C7512" not in report, (where, report)


def test_inputs_it_cannot_take_are_named():
    assert "Hopper" in unsupported(torch.zeros(1, 1, 4, 64))
    with pytest.raises(ValueError, match="Hopper"):
        forward_hopper(*(torch.zeros(1, 1, 4, 64, dtype=torch.bfloat16),) * 3)


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("is_causal", [True, False])
def test_gpu_every_variant_matches_the_oracle(name, is_causal):
    variant = VARIANTS[name]
    for batch, n_q, n_k, d, dtype, contiguous in GPU_CASES:
        q, k, v = make_qkv(batch, n_q, n_k, d, dtype=dtype, contiguous=contiguous)
        o, L = forward_hopper(q.detach(), k.detach(), v.detach(), is_causal, variant)
        want_o, want_L = reference(q, k, v, torch.zeros_like(q), is_causal)[:2]
        assert_close_to(o, want_o, 2e-2, f"O {batch} {n_q}x{n_k} d{d}")
        assert_close_to(L, want_L, 2e-3, f"L {batch} {n_q}x{n_k} d{d}")


@pytest.mark.gpu
@GPU
@pytest.mark.parametrize("is_causal", [True, False])
def test_gpu_backward_matches_the_oracle(is_causal):
    for batch, n_q, n_k, d, dtype, contiguous in GPU_CASES:
        q, k, v = make_qkv(batch, n_q, n_k, d, dtype=dtype, contiguous=contiguous)
        do = torch.randn_like(q)
        o, L = forward_hopper(q.detach(), k.detach(), v.detach(), is_causal)
        dq, dk, dv = backward_hopper(q.detach(), k.detach(), v.detach(), o, do, L, is_causal)
        want = reference(q, k, v, do, is_causal)
        where = f"{batch} {n_q}x{n_k} d{d} {dtype}"
        for name, got, expected in (("dQ", dq, want[2]), ("dK", dk, want[3]), ("dV", dv, want[4])):
            assert_close_to(got, expected, 2e-2, f"{name} {where}")
