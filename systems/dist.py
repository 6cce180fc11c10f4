"""Process groups: setup and teardown, spawning a function on N local processes, rank-0 printing.

Two ways in, one code path after:

* under ``torchrun`` the environment names rank and world size: call :func:`setup` with no arguments. It checks
  the variables first (:func:`launch_environment`): a missing one or values that disagree (``RANK=5`` with
  ``WORLD_SIZE=2``) are a :class:`LaunchError` naming them at once, before anything waits on a peer;
* from a notebook or a test, :func:`launch` starts ``world_size`` processes on this machine, runs
  ``fn(rank, world_size, *args)`` in each and returns every rank's return value. It never hangs: a
  process that dies or a group that stalls past ``timeout_s`` ends all of them and raises.

NCCL on GPUs (one GPU per rank), gloo on CPUs: :func:`default_backend` picks.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import socket
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def default_backend() -> str:
    return "nccl" if torch.cuda.is_available() else "gloo"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LaunchError(ValueError):
    """The environment describes a process group that cannot form."""


# What torchrun sets in every process it starts; the first three say that the process is one of a group.
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Launch:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int


def launch_environment(env=None) -> Launch | None:
    """The process group the environment describes (torchrun's variables), checked; None where it describes none.

    Raises :class:`LaunchError`, naming the variables, where some are set and others missing, where one is not a
    number, or where they disagree: a rank outside the world, a local rank past the ranks of its node, a port
    outside 1..65535, a master address that does not resolve. Each of these would otherwise wait on peers that
    never come until a timeout minutes later, or fail with a bare ``KeyError``."""
    env = os.environ if env is None else env
    present = [v for v in LAUNCH_VARIABLES[:3] if v in env]
    if not present:
        return None
    missing = [v for v in LAUNCH_VARIABLES if not env.get(v)]
    if missing:
        raise LaunchError(f"incomplete launch environment: {', '.join(present)} set but {', '.join(missing)} not; "
                          "start the processes with torchrun (which sets all of "
                          f"{', '.join(LAUNCH_VARIABLES)}), or unset {', '.join(present)} to run one process")
    values = {}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT", "LOCAL_WORLD_SIZE"):
        if name in env:
            try:
                values[name] = int(env[name])
            except ValueError:
                raise LaunchError(f"{name}={env[name]!r} is not an integer") from None
    rank, world, local = values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"]
    local_world = values.get("LOCAL_WORLD_SIZE", world)
    problems = []
    if world < 1:
        problems.append(f"WORLD_SIZE={world} must be at least 1")
    elif not 0 <= rank < world:
        problems.append(f"RANK={rank} must lie in [0, WORLD_SIZE={world})")
    if not 1 <= local_world <= max(world, 1):
        problems.append(f"LOCAL_WORLD_SIZE={local_world} must lie in [1, WORLD_SIZE={world}]")
    elif not 0 <= local < local_world:
        problems.append(f"LOCAL_RANK={local} must lie in [0, {local_world})")
    elif local > rank:
        problems.append(f"LOCAL_RANK={local} cannot exceed RANK={rank}")
    if not 1 <= values["MASTER_PORT"] <= 65535:
        problems.append(f"MASTER_PORT={values['MASTER_PORT']} must lie in [1, 65535]")
    if problems:
        raise LaunchError("inconsistent launch environment: " + "; ".join(problems))
    try:
        socket.getaddrinfo(env["MASTER_ADDR"], values["MASTER_PORT"])
    except (socket.gaierror, UnicodeError) as exc:
        raise LaunchError(f"MASTER_ADDR={env['MASTER_ADDR']!r} does not resolve ({exc})") from None
    return Launch(rank, world, local, env["MASTER_ADDR"], values["MASTER_PORT"])


def setup(
    rank: int | None = None,
    world_size: int | None = None,
    backend: str | None = None,
    timeout_s: float = 300.0,
) -> torch.device:
    """Join the default process group and return this rank's device (cuda:local_rank or cpu); with no rank and
    world size given, as the environment describes (:func:`launch_environment`)."""
    local_rank = rank
    if rank is None or world_size is None:
        env = launch_environment()
        if env is None:
            raise LaunchError(f"no process group to join: none of {', '.join(LAUNCH_VARIABLES[:3])} is set (start "
                              "the processes with torchrun)")
        rank, world_size, local_rank = env.rank, env.world_size, env.local_rank
    backend = backend or default_backend()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", local_rank))
        if local_rank >= torch.cuda.device_count():
            raise LaunchError(f"LOCAL_RANK={local_rank} names GPU {local_rank}, but this node has "
                              f"{torch.cuda.device_count()}")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(
        backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s)
    )
    return device


@contextlib.contextmanager
def group_from_environment() -> Iterator[None]:
    """Inside: the process group the environment describes (torchrun's), joined on entry and left on exit, where
    none exists yet; otherwise (an existing group, or one process alone) nothing changes."""
    joined = launch_environment() is not None and not dist.is_initialized()
    if joined:
        setup()
    try:
        yield
    finally:
        if joined:
            teardown()


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
