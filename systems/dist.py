"""Process groups: setup and teardown, spawning a function on N local processes, rank-0 printing.

Two ways in, one code path after:

* under ``torchrun`` the environment names rank and world size: call :func:`setup` with no arguments;
* from a notebook or a test, :func:`launch` starts ``world_size`` processes on this machine, runs
  ``fn(rank, world_size, *args)`` in each and returns every rank's return value. It never hangs: a
  process that dies or a group that stalls past ``timeout_s`` ends all of them and raises.

NCCL on GPUs (one GPU per rank), gloo on CPUs: :func:`default_backend` picks.
"""

from __future__ import annotations

import os
import pickle
import queue
import socket
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup(
    rank: int | None = None,
    world_size: int | None = None,
    backend: str | None = None,
    timeout_s: float = 300.0,
) -> torch.device:
    """Join the default process group and return this rank's device (cuda:local_rank or cpu)."""
    rank = int(os.environ["RANK"]) if rank is None else rank
    world_size = int(os.environ["WORLD_SIZE"]) if world_size is None else world_size
    backend = backend or default_backend()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(
        backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s)
    )
    return device


def teardown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def print0(*args, **kwargs) -> None:
    if rank() == 0:
        print(*args, **kwargs, flush=True)


def _worker(rank, world_size, backend, port, timeout_s, fn, args, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world_size)
    os.environ["LOCAL_RANK"] = str(rank)
    try:
        setup(rank, world_size, backend, timeout_s)
        # pickled here, not by the queue: the queue would share tensors through this process's memory,
        # which is gone by the time the parent reads them
        results.put((rank, "ok", pickle.dumps(fn(rank, world_size, *args))))
    except BaseException:  # the parent re-raises it with the rank attached
        results.put((rank, "error", traceback.format_exc()))
    finally:
        teardown()


def launch(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    backend: str | None = None,
    timeout_s: float = 120.0,
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` fresh processes; return results by rank.

    ``fn`` must be importable (a module-level function), as with any spawned process. Raises
    ``RuntimeError`` with the failing rank's traceback, or ``TimeoutError`` if the ranks have not all
    finished within ``timeout_s`` seconds (the processes are killed, so a deadlock cannot outlive it).
    """
    backend = backend or default_backend()
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(f"nccl with {world_size} ranks needs {world_size} GPUs, found {torch.cuda.device_count()}")
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(
            target=_worker,
            args=(r, world_size, backend, port, timeout_s, fn, args, results),
            daemon=False,
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    collected: dict[int, Any] = {}
    try:
        while len(collected) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"{fn.__name__} on {world_size} ranks did not finish within {timeout_s:.0f} s "
                    f"(ranks done: {sorted(collected)})"
                )
            try:
                r, status, payload = results.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                dead = [i for i, p in enumerate(procs) if p.exitcode not in (None, 0) and i not in collected]
                if dead:
                    raise RuntimeError(f"rank {dead[0]} exited with code {procs[dead[0]].exitcode}")
                continue
            if status == "error":
                raise RuntimeError(f"rank {r} failed:\n{payload}")
            collected[r] = pickle.loads(payload)
        for p in procs:
            p.join(timeout=max(deadline - time.monotonic(), 5.0))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    return [collected[r] for r in range(world_size)]
