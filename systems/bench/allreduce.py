"""All-reduce benchmark, single node, several processes (handout §2.1.3).

For each backend and device (gloo on CPU, NCCL on GPUs), tensor size (float32, 1 MiB to 1 GiB) and
process count, every rank all-reduces a random tensor ``warmup`` times untimed, then ``iters`` times
timed, each timed call between a barrier (so the ranks start together) and a device synchronise (so the
clock sees the transfer, not the queueing). Every rank's times are gathered with ``all_gather_object``
and the slowest rank's mean is the result, as in §2.1.2. Bandwidths, as in nccl-tests:

    algorithm bandwidth  algbw = bytes / time
    bus bandwidth        busbw = algbw · 2(n−1)/n     (what each link carries in a ring all-reduce)

    python -m systems.bench.allreduce --backend gloo --world-sizes 2 4 6 --sizes-mb 1 10 100
"""

from __future__ import annotations

import argparse
import statistics

import pandas as pd
import torch
import torch.distributed as dist

from systems.cli import integer, positive
from systems.device import OOM, local_device, run_or_oom, timed
from systems.dist import launch

MIB = 2**20
SIZES_MB = (1, 10, 100, 1000)
WORLD_SIZES = (2, 4, 6)
DEVICE_OF = {"gloo": "cpu", "nccl": "cuda"}


def time_all_reduce(x: torch.Tensor, warmup: int, iters: int, device: torch.device) -> list[float]:
    """This rank's wall time (ms) of each of ``iters`` all-reduces of ``x``."""
    n = dist.get_world_size()
    for _ in range(warmup):
        dist.all_reduce(x)
        x.div_(n)
    times = []
    for _ in range(iters):
        dist.barrier()
        with timed(device) as elapsed:
            dist.all_reduce(x)
        times.append(elapsed.ms)
        x.div_(n)
    return times


def _worker(rank: int, world: int, sizes_mb: list[float], warmup: int, iters: int) -> list[dict]:
    device = local_device()
    rows = []
    for mb in sizes_mb:
        # rand, not zeros; divided by the world size after each call so the values stay bounded. A size that does not
        # fit on some rank is a row that says so, on every rank alike (the ranks agree before any collective on it)
        x = run_or_oom(lambda: torch.rand(int(mb * MIB) // 4, device=device))
        fits = [None] * world
        dist.all_gather_object(fits, x is not OOM)
        if not all(fits):
            rows.append({"size_mb": mb, "status": "OOM"})
            continue
        times = time_all_reduce(x, warmup, iters, device)
        del x
        every = [None] * world
        dist.all_gather_object(every, times)
        means = [statistics.fmean(t) for t in every]
        rows.append({"size_mb": mb, "status": "ok", "time_ms": max(means), "fastest_rank_ms": min(means),
                     "median_ms": statistics.median(every[means.index(max(means))]), "times_ms": every})
    return rows


def benchmark(backend: str, world_sizes=WORLD_SIZES, sizes_mb=SIZES_MB, warmup: int = 5, iters: int = 10,
              timeout_s: float = 300.0) -> pd.DataFrame:
    """One row per (world size, size): slowest rank's mean time, algbw and busbw in GB/s, or why not measured."""
    rows = []
    for world in world_sizes:
        base = {"backend": backend, "device": DEVICE_OF[backend], "world_size": world}
        if backend == "nccl" and torch.cuda.device_count() < world:
            status = f"unavailable: needs {world} GPUs"
            rows += [{**base, "size_mb": mb, "status": status} for mb in sizes_mb]
            continue
        for r in launch(_worker, world, list(sizes_mb), warmup, iters, backend=backend, timeout_s=timeout_s)[0]:
            if r["status"] == "ok":
                r["algbw_GBps"] = r["size_mb"] * MIB / (r["time_ms"] / 1e3) / 1e9
                r["busbw_GBps"] = r["algbw_GBps"] * 2 * (world - 1) / world
            rows.append({**base, **r})
    cols = ["backend", "device", "world_size", "size_mb", "status", "time_ms", "median_ms", "fastest_rank_ms",
            "algbw_GBps", "busbw_GBps", "times_ms"]
    return pd.DataFrame(rows).reindex(columns=cols)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", nargs="+", default=["gloo"], choices=list(DEVICE_OF))
    p.add_argument("--world-sizes", nargs="+", type=integer(1), default=list(WORLD_SIZES))
    p.add_argument("--sizes-mb", nargs="+", type=positive, default=list(SIZES_MB))
    p.add_argument("--warmup", type=integer(0), default=5)
    p.add_argument("--iters", type=integer(1), default=10)
    args = p.parse_args(argv)
    df = pd.concat([benchmark(b, args.world_sizes, args.sizes_mb, args.warmup, args.iters) for b in args.backend])
    print(df.drop(columns="times_ms").to_string(index=False))
    return df


if __name__ == "__main__":
    main()
