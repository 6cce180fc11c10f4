"""Tiles chosen once per shape key: each kernel under ``triton.autotune`` for the first launch of a key (candidates
pruned by shared memory, keyed on what changes the best tiles, :mod:`.keys`), the choice remembered in
:data:`CHOSEN` and on disk (Triton's cache), so only the first run on a machine pays for tuning.
"""

from __future__ import annotations

import triton

from systems.attention.flash_triton import backward_kernels, kernels, keys
from systems.attention.flash_triton.tiles import CANDIDATES, Tiles, fitting

JIT = {"fwd": kernels.flash_fwd_kernel, "dkdv": backward_kernels.flash_bwd_dkdv_kernel,
       "dq": backward_kernels.flash_bwd_dq_kernel, "pre": backward_kernels.flash_bwd_preprocess_kernel}
# kernel -> (its EVEN flag, the length it tests, the tile it divides by), and the tile its programs own
EVEN = {"fwd": ("EVEN_K", "N_KEYS", "BLOCK_K"), "dkdv": ("EVEN_Q", "N_QUERIES", "BLOCK_Q"),
        "dq": ("EVEN_K", "N_KEYS", "BLOCK_K")}
PROGRAM_TILE = {"fwd": "BLOCK_Q", "dkdv": "BLOCK_K", "dq": "BLOCK_Q"}
CHOSEN: dict[tuple, Tiles] = {}  # shape key -> the tiles autotuning chose for it


def _tuner(kind: str):
    """The kernel under triton.autotune, for the first launch of a shape key: candidates pruned by shared memory,
    keyed on what changes the best tiles. Its EVEN flag follows each candidate's tile (a heuristic)."""
    flag, length, tile = EVEN[kind]

    def prune(configs, named_args, **kwargs):
        fits = fitting(kind, [to_tiles(c) for c in configs], kwargs["BLOCK_D"] + kwargs["TAIL_D"],
                       named_args["Q"].element_size())
        return [c for c in configs if to_tiles(c) in fits]

    configs = [triton.Config({"BLOCK_Q": t.block_q, "BLOCK_K": t.block_k}, num_warps=t.num_warps,
                             num_stages=t.num_stages) for t in CANDIDATES[kind]]
    even = triton.heuristics({flag: lambda a: a[length] % a[tile] == 0})(JIT[kind])
    # The dtype of every tensor argument joins the key automatically. cache_results keeps the choice on disk
    # (in Triton's cache directory), so only the first run on a machine pays for tuning. Timing a candidate runs
    # the kernel: the dQ it adds up must start from zero again each time.
    return triton.autotune(configs=configs, key=list(keys.TUNE_KEY), prune_configs_by={"early_config_prune": prune},
                           reset_to_zero=["DQ_ACC"] if kind == "dkdv" else None, cache_results=True)(even)


TUNERS = {kind: _tuner(kind) for kind in EVEN}


def to_tiles(c: triton.Config) -> Tiles:
    return Tiles(c.kwargs["BLOCK_Q"], c.kwargs["BLOCK_K"], c.num_warps, c.num_stages)


def tune(kind: str, key: tuple, rows: int, batch_heads: int, args, meta) -> None:
    """Time the candidate tiles on ``args`` (or read the tuning from disk) and remember the choice for ``key``."""
    tuner = TUNERS[kind]
    tuner[lambda m: grid(triton.cdiv(rows, m[PROGRAM_TILE[kind]]), batch_heads)](*args, **meta)
    CHOSEN[key] = to_tiles(tuner.best_config)


def grid(tiles: int, batch_heads: int) -> tuple[int, int]:
    """One program per tile and (batch, head), in one dimension: the kernels number them in head groups
    (``kernels.tile_and_head``)."""
    return tiles * batch_heads, 1


def autotune_report() -> dict[str, dict]:
    """Per kernel: the tiles autotuning chose for each key so far, and the seconds its last tuning took."""
    return {kind: {"chosen": {str(key): str(to_tiles(c)) for key, c in tuner.cache.items()},
                   "tuning_s": getattr(tuner, "bench_time", None)}
            for kind, tuner in TUNERS.items()}
