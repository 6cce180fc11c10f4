"""The Hopper kernels timed beside SDPA's cuDNN and FlashAttention-2 back ends and our Triton kernels, in one process
(a GPU with sm_90 needed): the forward's variants, in CUDA C++ (:mod:`systems.attention.flash_cpp.hopper`: the ring's
depth, ping-pong on or off) and in Gluon (:mod:`systems.attention.flash_hopper`), and the Gluon backward alone.

    python -m systems.bench.hopper --json hopper.json
    python -m systems.bench.hopper --passes forward --without-gluon

Every point is ``triton.testing.do_bench``'s median; each result is compared with cuDNN's (the largest difference
relative to cuDNN's largest value, over O or over dQ, dK and dV) so a fast wrong kernel shows. TFLOP/s counts the
visible half of a causal score matrix (:mod:`systems.flops`). The backward of SDPA and of our Triton kernel is timed
through autograd (``torch.autograd.grad`` on a kept graph), the Hopper one as a call of its launcher on the Triton
forward's O and L.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch
import triton

from systems.attention.flash_cpp.hopper import backward_hopper_cuda, forward_hopper_cuda
from systems.attention.flash_hopper import BACKWARD_TILES, VARIANTS, BackwardTiles, backward_hopper, forward_hopper
from systems.attention.flash_triton import flash_attention_triton, flash_forward_triton
from systems.attention.peers import sdpa_cudnn, sdpa_flash
from systems.bench.flash_sweep import TABLE_SHAPES
from systems.cli import dump_json, integer
from systems.files import write_text_atomically
from systems.flops import attention_flops
from systems.provenance import stamp

SHAPES = TABLE_SHAPES


def _peers() -> dict:
    return {"SDPA cuDNN": lambda q, k, v, c: sdpa_cudnn(q, k, v, c),
            "SDPA FlashAttention-2": lambda q, k, v, c: sdpa_flash(q, k, v, c),
            "ours (Triton)": lambda q, k, v, c: flash_forward_triton(q, k, v, c)[0]}


def _model_layout(B: int, H: int, n: int, d: int) -> torch.Tensor:
    """Random bf16 (B, H, n, d) laid out as the model lays it out: (B, n, H, d) memory."""
    return torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)


def _relative_error(got, want) -> float:
    return max(((g.float() - w.float()).abs().max() / w.float().abs().max()).item() for g, w in zip(got, want))


def _row(shape, causal, impl, ms, flops, err) -> dict:
    B, H, n, d = shape
    return {"shape": f"{B}×{H}×{n}×{d}", "causal": causal, "impl": impl, "ms": ms, "tflops": flops / ms / 1e9,
            "err_vs_cudnn": err}


# the CUDA C++ forward's ablation: (ring depth, ping-pong, consumer warpgroups); three consumers at head dim 64 only
CUDA_VARIANTS = ((3, True, 2), (3, False, 2), (2, True, 2), (2, False, 2), (3, True, 3), (3, False, 3), (2, True, 3))


def cuda_variants(head_dim: int) -> dict[str, tuple[int, bool, int]]:
    """The CUDA C++ forward's variants built for ``head_dim``, by the name the tables give them."""
    return {f"CUDA C++, {stages} stages{', ping-pong' if pingpong else ''}, {consumers} consumers":
            (stages, pingpong, consumers) for stages, pingpong, consumers in CUDA_VARIANTS
            if consumers == 2 or head_dim == 64}


def forward_variants(shapes=SHAPES, rep_ms: int = 200, gluon: bool = True) -> pd.DataFrame:
    """One row per (shape, implementation) of the forward: ms, TFLOP/s and the difference from cuDNN's output; the
    CUDA C++ variants' rows also name their ring depth, ping-pong and consumer warpgroups."""
    rows = []
    for (B, H, n, d), causal in shapes:
        q, k, v = (_model_layout(B, H, n, d) for _ in range(3))
        flops = attention_flops(n, n, d, B * H, causal, "fwd")
        want = sdpa_cudnn(q, k, v, causal)
        variants = cuda_variants(d)
        calls = _peers() | {name: (lambda q, k, v, c, var=var: forward_hopper_cuda(q, k, v, c, *var)[0])
                            for name, var in variants.items()}
        if gluon:
            calls |= {f"Gluon, {name}": (lambda q, k, v, c, var=var: forward_hopper(q, k, v, c, var)[0])
                      for name, var in VARIANTS.items()}
        for impl, call in calls.items():
            err = _relative_error([call(q, k, v, causal)], [want])
            ms = triton.testing.do_bench(lambda: call(q, k, v, causal), rep=rep_ms, return_mode="median")
            stages, pingpong, consumers = variants.get(impl, (None, None, None))
            rows.append(_row((B, H, n, d), causal, impl, ms, flops, err) |
                        {"stages": stages, "pingpong": pingpong, "consumers": consumers})
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def backward_kernels(shapes=SHAPES, rep_ms: int = 200) -> pd.DataFrame:
    """One row per (shape, implementation) of the backward alone: ms, TFLOP/s, the difference from cuDNN's
    gradients."""
    rows = []
    for (B, H, n, d), causal in shapes:
        q, k, v, do = (_model_layout(B, H, n, d) for _ in range(4))
        flops = attention_flops(n, n, d, B * H, causal, "bwd")
        qkv = tuple(t.detach().requires_grad_() for t in (q, k, v))
        graphs = {"SDPA cuDNN": sdpa_cudnn(*qkv, causal), "SDPA FlashAttention-2": sdpa_flash(*qkv, causal),
                  "ours (Triton)": flash_attention_triton(*qkv, causal)}
        calls = {impl: (lambda o=o: torch.autograd.grad(o, qkv, do, retain_graph=True)) for impl, o in graphs.items()}
        o, L = flash_forward_triton(q, k, v, causal)
        calls["Gluon (Hopper)"] = lambda: backward_hopper(q, k, v, o, do, L, causal)
        calls["CUDA C++ (Hopper)"] = lambda: backward_hopper_cuda(q, k, v, o, do, L, causal)
        want = calls["SDPA cuDNN"]()
        for impl, call in calls.items():
            err = _relative_error(call(), want)
            ms = triton.testing.do_bench(call, rep=rep_ms, return_mode="median")
            rows.append(_row((B, H, n, d), causal, impl, ms, flops, err))
        del graphs, calls, want
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)


# the backward's tiles tried per head dim (query tile of dK/dV, key tile of dQ, ring depth), the default first
TILES_TRIED = {64: (BACKWARD_TILES[64], BackwardTiles(64, 128, 3), BackwardTiles(64, 64), BackwardTiles(32, 128),
                    BackwardTiles(128, 128, 2)),
               128: (BACKWARD_TILES[128], BackwardTiles(32, 64, 2), BackwardTiles(64, 64, 2), BackwardTiles(32, 128, 2),
                     BackwardTiles(16, 64))}
TILE_SHAPES = (((1, 16, 16384, 64), True), ((1, 16, 16384, 128), True), ((8, 32, 1024, 128), True))


def backward_tiles(shapes=TILE_SHAPES, rep_ms: int = 200) -> pd.DataFrame:
    """The Hopper backward at each of :data:`TILES_TRIED` for the shape's head dim: ms, TFLOP/s, the difference
    from cuDNN's gradients."""
    rows = []
    for (B, H, n, d), causal in shapes:
        q, k, v, do = (_model_layout(B, H, n, d) for _ in range(4))
        flops = attention_flops(n, n, d, B * H, causal, "bwd")
        qkv = tuple(t.detach().requires_grad_() for t in (q, k, v))
        want = torch.autograd.grad(sdpa_cudnn(*qkv, causal), qkv, do)
        o, L = flash_forward_triton(q, k, v, causal)
        for tiles in TILES_TRIED[d]:
            call = lambda tiles=tiles: backward_hopper(q, k, v, o, do, L, causal, tiles)  # noqa: E731
            err = _relative_error(call(), want)
            ms = triton.testing.do_bench(call, rep=rep_ms, return_mode="median")
            impl = f"dK/dV query tile {tiles.block_m}, dQ key tile {tiles.block_n}, {tiles.stages} stages"
            rows.append(_row((B, H, n, d), causal, impl, ms, flops, err))
        del want
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> dict[str, pd.DataFrame]:
    p = argparse.ArgumentParser(prog="python -m systems.bench.hopper", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rep", type=integer(1), default=200, help="do_bench's repetitions, in ms")
    p.add_argument("--passes", choices=("forward", "backward", "both", "tiles"), default="both",
                   help="tiles: the backward at each of its tiles tried")
    p.add_argument("--without-gluon", action="store_true", help="the forward's CUDA C++ variants only, not Gluon's")
    p.add_argument("--json", help="write the rows (with provenance) here")
    args = p.parse_args(argv)
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        p.error("the Hopper kernels need a Hopper GPU (sm_90)")
    tables = {}
    if args.passes in ("forward", "both"):
        tables["forward"] = forward_variants(rep_ms=args.rep, gluon=not args.without_gluon)
    if args.passes in ("backward", "both"):
        tables["backward"] = backward_kernels(rep_ms=args.rep)
    if args.passes == "tiles":
        tables["backward tiles"] = backward_tiles(rep_ms=args.rep)
    if args.json:
        write_text_atomically(args.json, dump_json({"provenance": stamp("full"), **{
            name: df.to_dict("records") for name, df in tables.items()}}, indent=1), "results")
    for name, df in tables.items():
        print(f"{name}, ms:")
        print(df.pivot_table(index="impl", columns="shape", values="ms", sort=False).round(3).to_string())
        print(f"{name}, largest difference from cuDNN:")
        print(df.pivot_table(index="impl", columns="shape", values="err_vs_cudnn", sort=False).to_string(
            float_format="{:.1e}".format))
    return tables


if __name__ == "__main__":
    main(sys.argv[1:])
