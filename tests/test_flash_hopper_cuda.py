"""FlashAttention's forward written for Hopper in CUDA C++ (systems.attention.flash_cpp.hopper, registered as
flash_hopper) with the backward written for Hopper (one pass; two under deterministic algorithms) behind the same
C++ autograd node, and each on its own.

On any machine with nvcc: every kernel instantiation compiled for sm_90a without spilling and without ptxas
serialising the asynchronous products, the tile loops moving nothing into uniform registers, and the order the
persistent grids take their tiles in; the reasons the name gives where it cannot run. On an sm_90 GPU: every output
against the float64 oracle at the held-out kinds of shapes the other kernels are tested at, for each variant of the
ablation, and the backward's gradients; PyTorch's checks of the ops; torch.compile with lengths that change; a model against naive attention; the
CS336 attention tests' procedure."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch
import triton
from flash_common import (GPU_CASES, TOL, assert_close_to, check_against_reference, check_compiled_at_changing_lengths,
                          check_model_matches_naive_under_autocast, deterministic_algorithms, make_qkv, reference)
from test_flash_cuda import NVCC, SOURCES

from systems.attention import unavailable
from systems.attention._checks import as_4d
from systems.attention.flash_cpp import hopper
from systems.attention.flash_cpp.hopper import backward_hopper_cuda, flash_attention_hopper, forward_hopper_cuda
from systems.attention.reference import naive_attention

HOPPER = pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)),
                            reason="needs a Hopper GPU (sm_90)")
# (stages, pingpong, consumers): the kernel's instantiations, three consumers at head dim 64 only
VARIANTS = [(s, p, c) for s in (2, 3) for p in (True, False) for c in (2, 3)]


def ptxas_report(source: str, tmp_path) -> str:
    """What ptxas reports of each kernel in ``source`` compiled for sm_90a, host and device passes both (-c), as the
    extension's build runs them: the host pass sees no sm_90a code."""
    run = subprocess.run([NVCC, "-std=c++17", "-O3", "-c", *hopper.ARCH_FLAGS, "-Xptxas", "-v", str(SOURCES / source),
                          "-o", str(tmp_path / "kernel.o")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stderr


@pytest.fixture(scope="module")
def forward_build(tmp_path_factory):
    """The forward compiled once for sm_90a: ptxas's report, and the object it wrote (its SASS for cuobjdump)."""
    out = tmp_path_factory.mktemp("forward")
    return ptxas_report("flash_hopper_forward.cu", out), out / "kernel.o"


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit) to compile the kernel")
def test_kernels_compile_for_sm90a_without_spilling_or_serialising(forward_build):
    report, _ = forward_build
    entries = re.findall(r"Compiling entry function '(\w+)'", report)
    # 2 dtypes x (2 consumer counts at head dim 64, 1 at 128) x 2 ring depths x causal or not x ping-pong or not, and
    # with two consumers, causal, the same again with the last key tile halved; head dims 72 and 80 in the tiles of
    # 128: 2 dtypes x ping-pong or not x (not causal, causal, causal with the last key tile halved), a ring of 3
    assert len(entries) == 76, entries
    spilled = [int(n) for n in re.findall(r"(\d+) bytes spill stores", report)]
    assert len(spilled) == len(entries) and not any(spilled), report
    # C7512/C7514/C7515 (wgmma serialised) come as "info", C7508 (setmaxnreg ignored) as a warning
    assert "warning" not in report and "Potential Performance Loss" not in report, report


# the backward's instantiations: 2 dtypes x 3 head dims (64, 128, and 72 and 80 in the tiles of 128) x causal or
# not, per kernel, the dK/dV kernel with one pass and two; the one pass's last kernel, which scales dQ's sums, and the
# first, per dtype and tile width
BACKWARD_KERNELS = {"hopper_bwd_dkdv_kernel": 24, "hopper_bwd_dq_kernel": 12, "delta_kernel": 4,
                    "dq_from_accumulator_kernel": 4}


@pytest.fixture(scope="module")
def backward_build(tmp_path_factory):
    """The backward compiled once for sm_90a: ptxas's report, and the object it wrote (its SASS for cuobjdump)."""
    out = tmp_path_factory.mktemp("backward")
    return ptxas_report("flash_hopper_backward.cu", out), out / "kernel.o"


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit) to compile the kernels")
def test_backward_kernels_compile_for_sm90a(backward_build):
    report, _ = backward_build
    # each entry's report: its name, then the bytes it spills
    reports = [(block.split("'")[0], int(re.search(r"(\d+) bytes spill stores", block).group(1)))
               for block in report.split("Compiling entry function '")[1:]]
    counts = {name: sum(name in entry for entry, _ in reports) for name in BACKWARD_KERNELS}
    assert counts == BACKWARD_KERNELS, reports
    assert not any(stores for _, stores in reports), report
    assert "warning" not in report and "Potential Performance Loss" not in report, report


def innermost_product_loops(kernel: str) -> list[list[str]]:
    """The instructions of each loop in ``kernel`` (one function of cuobjdump's SASS listing) that holds wgmma
    products and no other loop that does (the loop over key or query tiles; the forward's loop over query tiles too,
    where the compiler gave a query tile of one key tile a path of its own)."""
    lines = [(int(m.group(1), 16), m.group(2)) for m in
             (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line) for line in kernel.splitlines()) if m]
    index = {address: i for i, (address, _) in enumerate(lines)}
    loops = []
    for end, (_, text) in enumerate(lines):
        branch = re.search(r"\bBRA\s.*?0x([0-9a-f]+)", text)
        start = index.get(int(branch.group(1), 16)) if branch else None
        if start is not None and start < end and any("HGMMA" in t for _, t in lines[start:end + 1]):
            loops.append((start, end))
    return [[text for _, text in lines[start:end + 1]] for start, end in loops
            if not any(inner != (start, end) and start <= inner[0] and inner[1] <= end for inner in loops)]


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit) to compile the kernels")
@pytest.mark.parametrize("build, name, count", [("forward_build", "hopper_fwd_kernel", 76),
                                                ("backward_build", "dkdv_kernel", 24)])
def test_tile_loops_move_nothing_into_uniform_registers(build, name, count, request):
    # each consumer's index reaches the compiler as the same in every lane of a warp (warp_uniform): computed per
    # lane, the tile loop built the wgmma descriptors in each lane's registers and moved them to the uniform ones
    # (R2UR) every tile, and was the slower for it (book/log.md, 2026-11-28 and 2026-11-29). The one exception: at
    # head dim 64 the kernels that halve a consumer's last key tile keep Q's address in a lane register and move
    # four of S's descriptors a tile, as flash_hopper's was timed (0.96 to 0.99 of the unhalved kernel's time where
    # it pays, 2026-11-30)
    _, kernel_object = request.getfixturevalue(build)
    sass = subprocess.run([triton.knobs.nvidia.cuobjdump.path, "-sass", str(kernel_object)], capture_output=True,
                          text=True, check=True).stdout
    kernels = [f for f in re.split(r"\n\s+Function : ", sass)[1:] if name in f.split("\n", 1)[0]]
    assert len(kernels) == count
    for kernel in kernels:
        tile_loop = min((loop for loop in innermost_product_loops(kernel) if any("MUFU.EX2" in t for t in loop)),
                        key=len)
        moves = [text for text in tile_loop if re.match(r"(@!?\w+\s+)?R2UR\b", text)]
        halved_at_64 = re.search(r"Li64ELi64ELi\dELi2ELb1ELb\dELb1E", kernel.split("\n", 1)[0]) is not None
        assert len(moves) <= (4 if halved_at_64 else 0), (kernel.split("\n", 1)[0], moves)


# The order in which the persistent grids take their work (head_rank), compiled as host code and walked over grids of
# every kind: one tile a head, one head, more blocks than items, the leaderboards' shapes.
HEAD_RANK_CHECK = r"""
#include <algorithm>
#include <cstdio>
#include <vector>
#include "flash_hopper.cuh"
int main() {
  for (int ranks : {1, 2, 3, 8, 86, 128, 256}) {
    for (int heads : {1, 2, 7, 16, 33, 64, 256, 512}) {
      for (int blocks : {0, 1, 5, 132}) {
        const int n = heads * ranks;
        std::vector<int> seen(n, 0), bh(n), rank(n);
        for (int item = 0; item < n; ++item) {
          const auto taken = systems_flash_hopper::head_rank(item, ranks, heads, blocks);
          bh[item] = taken.bh, rank[item] = taken.rank;
          if (taken.bh < 0 || taken.bh >= heads || taken.rank < 0 || taken.rank >= ranks) return 1;
          seen[taken.bh * ranks + taken.rank] += 1;
        }
        // from `first` on no item is longer than the one before (rank 0 the longest)
        int first = n - 1;
        while (first > 0 && rank[first - 1] <= rank[first]) --first;
        bool plain = true;  // before it, a head's tiles one after another, heads in order
        for (int item = 0; item < (blocks == 0 ? n : first); ++item) {
          plain = plain && bh[item] == item / ranks && rank[item] == item % ranks;
        }
        const int tail = n - first, least = std::min(n, 2 * blocks), most = std::min(n, 2 * blocks + ranks - 1);
        const bool one_each = std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; });
        if (!one_each || !plain || (blocks > 0 && ranks > 1 && (tail < least || tail > most))) {
          std::printf("ranks %d, heads %d, blocks %d: one each %d, plain before %d, %d items at the end\n", ranks,
                      heads, blocks, one_each, plain, tail);
          return 1;
        }
      }
    }
  }
  return 0;
}
"""


@pytest.mark.skipif(NVCC is None, reason="needs nvcc (the CUDA toolkit) to compile the check")
def test_the_persistent_grids_take_every_tile_once_and_end_on_the_shortest(tmp_path):
    # the last heads, as many as hold two turns of the grid's blocks, go longest first across them, so that no block
    # starts a long tile as the others run out of work; the rest keep a head's tiles together, sharing its rows in L2
    (tmp_path / "check.cu").write_text(HEAD_RANK_CHECK)
    build = subprocess.run([NVCC, "-std=c++17", "-I", str(SOURCES), str(tmp_path / "check.cu"), "-o",
                            str(tmp_path / "check")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(tmp_path / "check")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout


def test_the_name_says_why_it_cannot_run(monkeypatch):
    assert unavailable("flash_hopper", torch.device("cpu"), torch.bfloat16, 64) == \
        "runs on Hopper GPUs (its kernel is CUDA C++ for sm_90a), not on cpu"
    with pytest.raises(RuntimeError, match="flash_hopper runs on Hopper GPUs"):
        flash_attention_hopper(*(torch.randn(2, 8, 64, dtype=torch.bfloat16),) * 3)
    with pytest.raises(RuntimeError, match="flash_hopper runs on Hopper GPUs"):
        forward_hopper_cuda(*(torch.randn(2, 8, 64, dtype=torch.bfloat16),) * 3)
    with pytest.raises(ValueError, match="flash_hopper computes in float16 or bfloat16"):
        forward_hopper_cuda(*(torch.randn(2, 8, 64),) * 3)
    with pytest.raises(ValueError, match=r"name all of stages, pingpong and consumers or none, not \(2, None, 3\)"):
        forward_hopper_cuda(*(torch.randn(2, 8, 64, dtype=torch.bfloat16),) * 3, stages=2, consumers=3)
    gpu = torch.device("cuda", 0)
    monkeypatch.setattr(hopper, "_build", lambda: pytest.fail("a reason needed a build"))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    assert hopper.unavailable(gpu) == "needs a Hopper GPU (compute capability 9.0: H100, H200); NVIDIA " \
                                      "A100-SXM4-80GB is 8.0"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr("torch.utils.cpp_extension.CUDA_HOME", None)
    assert hopper.unavailable(gpu) == "needs nvcc (the CUDA toolkit) to build its kernel, and none was found " \
                                      "(set CUDA_HOME)"


def test_inputs_the_kernel_does_not_take_go_to_the_portable_kernel(monkeypatch):
    calls = []
    monkeypatch.setattr("systems.attention.flash_triton.flash_attention_triton",
                        lambda q, k, v, is_causal: calls.append((q.dtype, q.shape[-1], is_causal)) or q)
    q = torch.randn(1, 2, 16, 96, dtype=torch.bfloat16)
    flash_attention_hopper(q, q, q, True)
    q = torch.randn(1, 2, 16, 64)
    flash_attention_hopper(q, q, q, False)
    assert calls == [(torch.bfloat16, 96, True), (torch.float32, 64, False)]
    # head dims 72 and 80 are the Hopper kernels' own: without a Hopper GPU they are refused, not sent on
    for d in (72, 80):
        q = torch.randn(1, 2, 16, d, dtype=torch.bfloat16)
        with pytest.raises(RuntimeError, match="flash_hopper runs on Hopper GPUs"):
            flash_attention_hopper(q, q, q, True)
    assert len(calls) == 2
    q = torch.randn(1, 2, 16, 96, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="flash_hopper takes head dims 64, 72, 80 and 128, not 96"):
        forward_hopper_cuda(q, q, q, True)


# ---- on the GPU ----

def logsumexp(q, k, v, is_causal):
    """L from the forward op itself: the C++ autograd node keeps its saved tensors out of Python's reach."""
    _, L = torch.ops.systems_flash.hopper_forward(as_4d(q.detach()), as_4d(k.detach()), as_4d(v.detach()), is_causal)
    return L.view(q.shape[:-1])


# the shapes every GPU kernel is held to, and beside them: one query against many keys, whole tiles only, a long pair
# at both head dims (several trips round the ring of stages), batch x heads past the grid's first dimension, and
# a dozen key blocks to each multiprocessor of the one pass's persistent grid, at both head dims (and several query
# tiles to each of the forward's, some of one key tile, so its ring goes on from tile to tile at every length)
CASES = GPU_CASES + [((2,), 1, 257, 128, torch.float16, True), ((1, 2), 256, 256, 64, torch.float16, True),
                     ((1, 2), 2048, 2048, 128, torch.bfloat16, True), ((1, 2), 1500, 1700, 64, torch.bfloat16, True),
                     ((8, 64), 65, 65, 64, torch.bfloat16, True), ((1, 2), 4100, 4500, 128, torch.float16, False),
                     ((1, 1), 700, 4200, 128, torch.bfloat16, True), ((6, 50), 333, 777, 64, torch.bfloat16, False),
                     ((6, 50), 333, 777, 128, torch.float16, True), ((2, 3), 200, 333, 80, torch.bfloat16, False),
                     ((1, 2), 1000, 1000, 72, torch.float16, True), ((6, 50), 333, 777, 80, torch.bfloat16, True)]
IDS = [f"{c[1]}x{c[2]}-d{c[3]}-{str(c[4])[6:]}" for c in CASES]


def case_inputs(case: int, requires_grad: bool = False):
    """q, k, v of CASES[case] (leaves autograd tracks, or detached), and their dtype."""
    batch, n_q, n_k, d, dtype, contiguous = CASES[case]
    q, k, v = make_qkv(batch, n_q, n_k, d, dtype=dtype, contiguous=contiguous)
    return *(t if requires_grad else t.detach() for t in (q, k, v)), dtype


@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_gpu_forward_variants_match_the_oracle(case, is_causal):
    q, k, v, dtype = case_inputs(case)
    want_o, want_L, *_ = reference(q, k, v, torch.zeros_like(q), is_causal)
    for stages, pingpong, consumers in VARIANTS:
        if (consumers == 3 and q.shape[-1] != 64) or (q.shape[-1] in (72, 80) and stages != 3):
            continue
        o, L = forward_hopper_cuda(q, k, v, is_causal, stages, pingpong, consumers)
        which = f"{stages} stages, ping-pong {pingpong}, {consumers} consumers"
        assert_close_to(o, want_o, TOL[dtype], f"O, {which}")
        assert_close_to(L, want_L, TOL[dtype], f"L, {which}")


@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n_k", [8191, 8192])
def test_gpu_the_forward_matches_the_oracle_on_both_sides_of_the_halved_last_tile(d, n_k):
    # causal with two consumers, a consumer's last key tile is halved below 8,192 keys (halves_last_tile) and not
    # from there on: both kernels of the variant flash_hopper runs, on query tiles some of whose consumers see only
    # the first half of their last key tile (queries end at 300, 44 rows into the third query tile's first consumer)
    q, k, v = make_qkv((1, 2), 300, n_k, d, dtype=torch.bfloat16, contiguous=False)
    q, k, v = (t.detach() for t in (q, k, v))
    want_o, want_L, *_ = reference(q, k, v, torch.zeros_like(q), True)
    o, L = forward_hopper_cuda(q, k, v, True, 3, True, 2)
    assert_close_to(o, want_o, TOL[torch.bfloat16], "O")
    assert_close_to(L, want_L, TOL[torch.bfloat16], "L")


@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_gpu_attention_matches_the_oracle(case, is_causal):
    q, k, v, dtype = case_inputs(case, requires_grad=True)
    check_against_reference(flash_attention_hopper, q, k, v, is_causal, TOL[dtype], logsumexp=logsumexp)


@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("deterministic", [False, True], ids=["one-pass", "two-pass"])
@pytest.mark.parametrize("case", range(len(CASES)), ids=IDS)
def test_gpu_backward_matches_the_oracle(case, is_causal, deterministic):
    q, k, v, dtype = case_inputs(case)
    do = torch.randn_like(q)
    o, L = forward_hopper_cuda(q, k, v, is_causal)
    *_, want_dq, want_dk, want_dv = reference(q, k, v, do, is_causal)
    with deterministic_algorithms(deterministic):
        grads = backward_hopper_cuda(q, k, v, o, do, L, is_causal)
    for name, got, want in zip(("dQ", "dK", "dV"), grads, (want_dq, want_dk, want_dv)):
        assert_close_to(got, want, TOL[dtype], name)


@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("d, n", [(64, 300), (128, 4100), (128, 300)])
def test_gpu_the_backward_takes_one_pass_unless_asked_to_be_deterministic(d, n):
    from torch.profiler import ProfilerActivity, profile

    q, k, v, do = (torch.randn(2, 3, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    o, L = forward_hopper_cuda(q, k, v, True)

    def kernels_and_grads():
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            grads = backward_hopper_cuda(q, k, v, o, do, L, True)
            torch.cuda.synchronize()
        return {e.key for e in prof.key_averages()}, grads

    names, fast = kernels_and_grads()
    assert any("dq_from_accumulator" in name for name in names), names
    assert not any("hopper_bwd_dq_kernel" in name for name in names), names
    with deterministic_algorithms():
        names, first = kernels_and_grads()
        _, second = kernels_and_grads()
    assert any("hopper_bwd_dq_kernel" in name for name in names) and \
        not any("dq_from_accumulator" in name for name in names)
    for a, b in zip(first, second):
        assert torch.equal(a, b)  # two passes add nothing up in a changing order
    for a, b in zip(first, fast):  # one pass adds the same terms in another order
        torch.testing.assert_close(a, b, rtol=0, atol=2e-2 * b.float().abs().max().item())


@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("layout", ["contiguous", "model"])
def test_gpu_the_operators_pass_pytorchs_checks(d, layout):
    assert hopper.unavailable(torch.device("cuda")) is None  # loads the ops
    q, k, v = (torch.randn(2, 2, 77, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    if layout == "model":  # q and k (B, H, N, d) contiguous, v a view of (B, N, H, d)
        v = torch.randn(2, 77, 2, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
    for causal in (False, True):
        torch.library.opcheck(torch.ops.systems_flash.hopper_attention.default, (q, k, v, causal))
        for forward in (torch.ops.systems_flash.hopper_forward, torch.ops.systems_flash.hopper_attention_forward):
            torch.library.opcheck(forward.default, (q.detach(), k.detach(), v.detach(), causal))
        o, L = torch.ops.systems_flash.hopper_forward(q.detach(), k.detach(), v.detach(), causal)
        for backward in (torch.ops.systems_flash.hopper_backward, torch.ops.systems_flash.hopper_attention_backward):
            torch.library.opcheck(backward.default, (q.detach(), k.detach(), v.detach(), o, torch.randn_like(o), L,
                                                     causal))


@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("d, shape, causal", [
    (128, (1, 2, 16384), True), (128, (1, 2, 1024), True), (64, (1, 2, 16384), True), (64, (1, 2, 4096), True),
    (64, (7, 9, 2048), True), (64, (64, 32, 512), True), (64, (1, 2, 77), True), (64, (1, 2, 2048), False),
    (80, (4, 3, 1024), True), (72, (1, 2, 300), False)])  # head dim 64: where the Triton backward was once taken
def test_gpu_the_attention_takes_the_hopper_backward_at_every_shape(d, shape, causal):
    # the backward under flash_hopper's autograd node is the Hopper backward: dK and dV bit for bit, dQ to the
    # rounding of its fp32 sums, which the one pass adds up in an order that changes from call to call
    q, k, v, do = (torch.randn(*shape, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    qkv = [t.clone().requires_grad_() for t in (q, k, v)]
    got = torch.autograd.grad(flash_attention_hopper(*qkv, is_causal=causal), qkv, do)
    o, L = torch.ops.systems_flash.hopper_attention_forward(q, k, v, causal)
    want = backward_hopper_cuda(q, k, v, o, do, L, causal)
    assert torch.equal(got[1], want[1]) and torch.equal(got[2], want[2])
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=2e-2)


@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("d, n, causal, consumers", [(128, 1024, True, 2), (128, 1024, False, 2), (80, 1024, True, 2),
                                                     (72, 700, False, 2), (64, 16384, True, 3),
                                                     (64, 2048, True, 3), (64, 2047, True, 2), (64, 1024, True, 2),
                                                     (64, 512, True, 2), (64, 8192, False, 3), (64, 1024, False, 3)])
def test_gpu_the_attention_takes_the_faster_forward_for_the_shape(d, n, causal, consumers):
    # flash_hopper's forward is, bit for bit, the Hopper forward with the variant chosen for the shape (two consumer
    # warpgroups where causal queries see fewer than 2,048 keys), its O laid out (B, N, H, d)
    q, k, v = (torch.randn(1, 2, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, L = torch.ops.systems_flash.hopper_attention_forward(q, k, v, causal)
    want = forward_hopper_cuda(q, k, v, causal, 3, True, consumers)
    assert torch.equal(o, want[0]) and torch.equal(L, want[1])
    assert o.transpose(1, 2).is_contiguous()
    out = flash_attention_hopper(q, k, v, causal)
    assert torch.equal(out, o) and out.transpose(1, 2).is_contiguous()


@pytest.mark.gpu
@HOPPER
def test_gpu_variants_it_is_not_built_for_are_refused():
    assert hopper.unavailable(torch.device("cuda")) is None  # loads the ops
    q = torch.randn(2, 2, 77, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="not 4 stages and 2 consumers at head dim 64"):
        torch.ops.systems_flash.hopper_forward_variant(q, q, q, True, 4, True, 2)
    q = torch.randn(2, 2, 77, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="not 3 stages and 3 consumers at head dim 128"):
        torch.ops.systems_flash.hopper_forward_variant(q, q, q, True, 3, True, 3)
    q = torch.randn(2, 2, 77, 80, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="not 2 stages and 2 consumers at head dim 80"):
        torch.ops.systems_flash.hopper_forward_variant(q, q, q, True, 2, True, 2)
    q = torch.randn(2, 2, 77, 96, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="take head dims 64, 72, 80 and 128; got 96"):
        torch.ops.systems_flash.hopper_forward(q, q, q, True)
    with pytest.raises(ValueError, match="flash_hopper computes in float16 or bfloat16"):
        forward_hopper_cuda(q.float(), q.float(), q.float(), True)


@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("dynamic", [None, True], ids=["recompile", "dynamic"])
def test_gpu_compiled_with_lengths_that_change(dynamic):
    check_compiled_at_changing_lengths(flash_attention_hopper, (((2, 4), 64), ((2, 4), 96), ((1, 4), 130),
                                                                ((3, 2), 17)),
                                       128, TOL[torch.bfloat16], dtype=torch.bfloat16, dynamic=dynamic)


@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("d", [64, 80, 128])
def test_gpu_compiled_in_the_models_layout(d, monkeypatch):
    # the model's q and k are contiguous and v a view of (B, N, H, d): the compiled graph checks the strides of every
    # gradient against the Meta kernel's; traced as a process's first call is (before the build's flag is set), in
    # one graph
    q, k, do = (torch.randn(2, 3, 200, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    v_rows = torch.randn(2, 200, 3, d, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    monkeypatch.setattr(hopper, "_READY", False)
    grads = {}
    compiled = torch.compile(flash_attention_hopper, fullgraph=True)
    for name, f in (("compiled", compiled), ("eager", flash_attention_hopper)):
        leaves = [t.clone().requires_grad_() for t in (q, k, v_rows)]
        o = f(leaves[0], leaves[1], leaves[2].transpose(1, 2), is_causal=True)
        grads[name] = (o, *torch.autograd.grad(o, leaves, do))
    for got, want in zip(grads["compiled"], grads["eager"]):
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=0, atol=2e-2 * want.float().abs().max().item())


@pytest.mark.gpu
@HOPPER
def test_gpu_compiled_with_a_graph_break_after_it_in_a_fresh_process(monkeypatch):
    # a graph break makes dynamo trace the frame again; the second trace must take the path the first took, although
    # the first one's check built the kernel and set the flag (a compiled block under FSDP2 did, in a process that
    # had not called the kernel before)
    def attend_then_break(q, k, v):
        o = flash_attention_hopper(q, k, v, is_causal=True)
        torch._dynamo.graph_break()
        return o * 2

    q, k, v = (torch.randn(1, 2, 300, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    built = hopper._build  # cached once built: the flag is set again as the first build sets it

    def build_and_set_the_flag():
        why = built()
        hopper._READY = why is None
        return why

    torch._dynamo.reset()
    monkeypatch.setattr(hopper, "_READY", False)
    monkeypatch.setattr(hopper, "_build", build_and_set_the_flag)
    got = torch.compile(attend_then_break)(q, k, v)
    torch.testing.assert_close(got, attend_then_break(q, k, v), rtol=0, atol=0)


@pytest.mark.gpu
@HOPPER
def test_gpu_model_matches_naive_attention_under_autocast():
    check_model_matches_naive_under_autocast("flash_hopper", context_length=160, num_heads=4, tol=TOL[torch.bfloat16])


@pytest.mark.gpu
@HOPPER
@pytest.mark.parametrize("is_causal", [False, True])
def test_gpu_the_cs336_attention_tests_with_bf16_inputs(is_causal):
    # the course's test_attention.py procedure, (4, 128, 64) inputs from seed 0, in bf16 (the kernel's dtype): the
    # output and the gradients against the naive formula in fp32 on the same values, within bf16's tolerance
    torch.random.manual_seed(0)
    q, k, v = (torch.randn(4, 128, 64, device="cuda").bfloat16().requires_grad_() for _ in range(3))
    do = torch.randn(4, 128, 64, device="cuda").bfloat16()
    o = flash_attention_hopper(q, k, v, is_causal)
    exact = [t.detach().float().requires_grad_() for t in (q, k, v)]
    want = naive_attention(*exact, is_causal)
    torch.testing.assert_close(o.float(), want, rtol=2e-2, atol=2e-2)
    got = torch.autograd.grad(o, (q, k, v), do)
    for g, w in zip(got, torch.autograd.grad(want, exact, do.float())):
        torch.testing.assert_close(g.float(), w, rtol=2e-2, atol=2e-2)


def test_the_ops_give_their_shapes_without_a_gpu():
    from systems.attention.flash_cpp import unavailable as cpp_unavailable

    assert cpp_unavailable(torch.device("cpu")) is None  # builds the operator, whose schemas include these ops
    q = torch.empty(2, 3, 5, 64, device="meta", dtype=torch.bfloat16)
    k = torch.empty(2, 3, 7, 64, device="meta", dtype=torch.bfloat16)
    for o, L in (torch.ops.systems_flash.hopper_forward(q, k, k, True),
                 torch.ops.systems_flash.hopper_forward_variant(q, k, k, False, 2, False, 3)):
        assert o.shape == q.shape and o.dtype == q.dtype
        assert L.shape == (2, 3, 5) and L.dtype == torch.float32
    assert str(torch.ops.systems_flash.hopper_attention.default._schema) == \
        "systems_flash::hopper_attention(Tensor q, Tensor k, Tensor v, bool is_causal) -> Tensor"
    o, L = torch.ops.systems_flash.hopper_attention_forward(q, k, k, True)
    assert o.shape == q.shape and o.transpose(1, 2).is_contiguous() and L.shape == (2, 3, 5)
    assert L.dtype == torch.float32
    grads = torch.ops.systems_flash.hopper_attention_backward(q, k, k, o, o, L, True)
    assert [g.shape for g in grads] == [q.shape, k.shape, k.shape]
