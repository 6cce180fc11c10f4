"""The Hopper forward's variants (:mod:`systems.attention.flash_hopper`) timed beside SDPA's cuDNN and
FlashAttention-2 back ends and our Triton forward, forward only, in one process (a GPU with sm_90 needed).

    python -m systems.bench.hopper_forward --json hopper_forward.json

Every point is ``triton.testing.do_bench``'s median; each variant's output is compared with cuDNN's (the largest
difference relative to cuDNN's largest value) so a fast wrong kernel shows. TFLOP/s counts the visible half of a
causal score matrix (:mod:`systems.flops`).
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd
import torch
import triton

from systems.attention.flash_hopper import VARIANTS, forward_hopper
from systems.attention.flash_triton import flash_forward_triton
from systems.attention.peers import sdpa_cudnn, sdpa_flash
from systems.cli import dump_json, integer
from systems.files import write_text_atomically
from systems.flops import attention_flops
from systems.provenance import stamp

# (B, H, N, d), causal: the shapes of issue 29's table
SHAPES = (((1, 16, 16384, 64), True), ((1, 16, 16384, 128), True), ((8, 32, 1024, 128), True),
          ((4, 16, 2048, 64), True), ((1, 16, 8192, 64), False), ((2, 32, 32768, 128), True))


def _peers() -> dict:
    return {"SDPA cuDNN": lambda q, k, v, c: sdpa_cudnn(q, k, v, c),
            "SDPA FlashAttention-2": lambda q, k, v, c: sdpa_flash(q, k, v, c),
            "ours (Triton)": lambda q, k, v, c: flash_forward_triton(q, k, v, c)[0]}


def forward_variants(shapes=SHAPES, rep_ms: int = 200) -> pd.DataFrame:
    """One row per (shape, implementation): ms, TFLOP/s and the difference from cuDNN's output."""
    rows = []
    for (B, H, n, d), causal in shapes:
        # laid out as the model lays them out: (B, N, H, d) memory seen as (B, H, N, d)
        q, k, v = (torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
        flops = attention_flops(n, n, d, B * H, causal, "fwd")
        want = sdpa_cudnn(q, k, v, causal).float()
        calls = _peers() | {f"Gluon, {name}": (lambda q, k, v, c, var=var: forward_hopper(q, k, v, c, var)[0])
                            for name, var in VARIANTS.items()}
        for impl, call in calls.items():
            err = ((call(q, k, v, causal).float() - want).abs().max() / want.abs().max()).item()
            ms = triton.testing.do_bench(lambda: call(q, k, v, causal), rep=rep_ms, return_mode="median")
            rows.append({"shape": f"{B}×{H}×{n}×{d}", "causal": causal, "impl": impl, "ms": ms,
                         "tflops": flops / ms / 1e9, "err_vs_cudnn": err})
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    p = argparse.ArgumentParser(prog="python -m systems.bench.hopper_forward", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rep", type=integer(1), default=200, help="do_bench's repetitions, in ms")
    p.add_argument("--json", help="write the rows (with provenance) here")
    args = p.parse_args(argv)
    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        p.error("the Hopper forward needs a Hopper GPU (sm_90)")
    df = forward_variants(rep_ms=args.rep)
    if args.json:
        write_text_atomically(args.json, dump_json({"provenance": stamp("full"), "rows": df.to_dict("records")},
                                                   indent=1), "results")
    print(df.pivot_table(index="impl", columns="shape", values="ms", sort=False).round(3).to_string())
    return df


if __name__ == "__main__":
    main(sys.argv[1:])
