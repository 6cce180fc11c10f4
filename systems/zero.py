"""Optimizer state sharding, ZeRO stage 1 (2025 handout §3, 2026 §6; Rajbhandari et al., 2020, "ZeRO", §5.1 P_os).

Every rank keeps the full parameters and gradients, but the optimizer state (AdamW's two moments)
only for the parameters it owns, so optimizer-state memory per rank falls by the world size:

    from systems.zero import ShardedOptimizer
    opt = ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-3)
    ...; loss.backward(); ddp.finish_gradient_synchronization(); opt.step()

``step`` runs the wrapped optimizer on the owned parameters, then every owner broadcasts its updated
parameters to the other ranks. Ownership is a greedy largest-first assignment to the least-loaded rank
(in bytes), so one huge embedding next to many small norms still balances as well as whole tensors can.
Frozen parameters get owners too: a layer unfrozen later (gradual unfreezing) is then trained by its owner
like any other, and a parameter is broadcast only while it can change (it requires grad or holds one).

``state_dict()`` gathers every owner's state into one dict keyed exactly like the unsharded optimizer's,
and ``load_state_dict`` keeps the entries this rank owns: a checkpoint taken at world size N resumes at
world size M, or in a plain ``torch.optim.AdamW``. Without a process group it is a plain optimizer.
The tests are ``tests/test_zero.py``; the memory and time accounting is ``notebooks/11_optimizer_sharding.py``.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterable

import torch
import torch.distributed as dist
from torch.optim import Optimizer

# Broadcast strategies of ``step`` (the chapter times both):
#   "param": one asynchronous broadcast per parameter, in place: no extra memory, many small collectives.
#   "flat":  per owner, parameters flattened into buckets of at most ``bucket_mb`` MiB, one broadcast per
#            bucket, at most two buckets in flight: few collectives, two buckets of extra memory.
BROADCASTS = ("param", "flat")


class ShardedOptimizer(Optimizer):
    """``optimizer_cls`` over this rank's share of ``params``; parameters are synchronised after each step.

    ``params`` are tensors or param-group dicts, as for any optimizer; ``kwargs`` go to ``optimizer_cls``.
    ``process_group`` defaults to the default group (or none: world size 1).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        optimizer_cls: type[Optimizer],
        *,
        process_group: dist.ProcessGroup | None = None,
        broadcast: str = "param",
        bucket_mb: float = 32.0,
        **kwargs: Any,
    ):
        if not (isinstance(optimizer_cls, type) and issubclass(optimizer_cls, Optimizer)):
            raise TypeError(f"optimizer_cls must be a torch.optim.Optimizer subclass, got {optimizer_cls!r}")
        if issubclass(optimizer_cls, ShardedOptimizer):
            raise TypeError("optimizer_cls is already a ShardedOptimizer: shard a plain optimizer once")
        if broadcast not in BROADCASTS:
            raise ValueError(f"broadcast must be one of {BROADCASTS}, got {broadcast!r}")
        params = list(params)
        if not params:
            raise ValueError("ShardedOptimizer got an empty parameter list")
        self.process_group = process_group
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank(process_group) if self.distributed else 0
        self.world_size = dist.get_world_size(process_group) if self.distributed else 1
        self.broadcast, self.bucket_mb = broadcast, bucket_mb
        self.optimizer_cls = optimizer_cls
        self.owner: dict[torch.Tensor, int] = {}  # parameter -> rank that holds its optimizer state
        self._load = [0] * self.world_size  # bytes owned per rank, across all groups so far
        self._buckets: dict[tuple[int, ...], list[tuple[int, list[torch.Tensor]]]] = {}  # see _flat_buckets
        self.local: Optimizer | None = None  # built after the super-constructor has added every group
        super().__init__(params, defaults=dict(kwargs))
        self.local = optimizer_cls([self._local_group(g) for g in self.param_groups], **kwargs)
        # Hyper-parameters the caller left to optimizer_cls's defaults (betas, eps, ...) become visible in our
        # groups too, so schedulers, state_dict and later groups see the same values the local optimizer uses.
        self.defaults = {**self.local.defaults, **self.defaults}
        for group in self.param_groups:
            for key, value in self.local.defaults.items():
                group.setdefault(key, value)

    # ---- sharding ---------------------------------------------------------------------------------------

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group (the super-constructor calls this too) and assign its parameters to ranks."""
        param_group = dict(param_group)
        params = param_group["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        # Tied weights can be listed twice; they are one tensor with one owner and one state.
        param_group["params"] = list({id(p): p for p in params}.values())
        for p in param_group["params"]:
            _check_device(p, dist.get_backend(self.process_group) if self.distributed else None)
        super().add_param_group(param_group)  # validates; fills in defaults
        group = self.param_groups[-1]
        owners = assign_owners([p.numel() * p.element_size() for p in group["params"]], self._load)
        self.owner.update(zip(group["params"], owners))
        self._buckets = {}
        if self.local is not None:
            self.local.add_param_group(self._local_group(group))

    def _local_group(self, group: dict[str, Any]) -> dict[str, Any]:
        """The group as the local optimizer sees it: same hyper-parameters, only the owned parameters.
        Every group has a local twin (possibly empty), so group i here is group i there."""
        owned = [p for p in group["params"] if self.owner.get(p) == self.rank]
        return {**{k: v for k, v in group.items() if k != "params"}, "params": owned}

    def owned_parameters(self, rank: int | None = None) -> list[torch.Tensor]:
        rank = self.rank if rank is None else rank
        return [p for g in self.param_groups for p in g["params"] if self.owner.get(p) == rank]

    # ---- the step ---------------------------------------------------------------------------------------

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None, **kwargs: Any):
        # Learning-rate schedules write to our param_groups; the local optimizer must see the same values.
        for ours, theirs in zip(self.param_groups, self.local.param_groups):
            theirs.update({k: v for k, v in ours.items() if k != "params"})
        loss = self.local.step(closure, **kwargs)  # optimizers run the closure with grad enabled themselves
        if self.world_size > 1:
            self._synchronize_parameters()
        return loss

    def _src(self, owner: int) -> int:
        # broadcast takes a global rank even inside a sub-group
        return dist.get_global_rank(self.process_group, owner) if self.process_group is not None else owner

    def _changing(self) -> list[torch.Tensor]:
        """Parameters the last step may have changed. requires_grad and grad presence are the same on every
        rank of an SPMD program, so every rank computes the same list and the broadcasts match."""
        return [p for g in self.param_groups for p in g["params"] if p.requires_grad or p.grad is not None]

    @torch.no_grad()
    def _synchronize_parameters(self) -> None:
        changing = self._changing()
        if self.broadcast == "param":
            works = [
                dist.broadcast(p, src=self._src(self.owner[p]), group=self.process_group, async_op=True)
                for p in changing
            ]
            for work in works:
                work.wait()
            return
        # "flat": double buffering bounds the extra memory to two buckets while keeping the link busy.
        pending: deque = deque()
        for owner, params in self._flat_buckets(changing):
            if owner == self.rank:
                flat = torch._utils._flatten_dense_tensors(params)
            else:
                flat = torch.empty(sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device)
            work = dist.broadcast(flat, src=self._src(owner), group=self.process_group, async_op=True)
            pending.append((work, flat, owner, params))
            if len(pending) > 1:
                _unflatten_into(*pending.popleft(), self.rank)
        while pending:
            _unflatten_into(*pending.popleft(), self.rank)

    def _flat_buckets(self, changing: list[torch.Tensor]) -> list[tuple[int, list[torch.Tensor]]]:
        """Per owner, consecutive ``changing`` parameters of one dtype and device, at most ``bucket_mb`` MiB
        each; cached per set of changing parameters (it changes only when layers are frozen or unfrozen)."""
        key = tuple(id(p) for p in changing)
        if key not in self._buckets:
            limit = self.bucket_mb * 2**20
            buckets: list[tuple[int, list[torch.Tensor]]] = []
            for owner in range(self.world_size):
                open_runs: dict[tuple, tuple[list[torch.Tensor], int]] = {}  # (dtype, device) -> (params, bytes)
                for p in (p for p in changing if self.owner[p] == owner):
                    kind, size = (p.dtype, p.device), p.numel() * p.element_size()
                    run, used = open_runs.get(kind, ([], 0))
                    if run and used + size > limit:
                        buckets.append((owner, run))
                        run, used = [], 0
                    open_runs[kind] = (run + [p], used + size)
                buckets += [(owner, run) for run, _ in open_runs.values()]
            self._buckets = {key: buckets}  # only the current set is worth keeping
        return self._buckets[key]

    # ---- checkpoints ------------------------------------------------------------------------------------

    def _global_index(self) -> dict[int, int]:
        """id(param) -> its index in an unsharded optimizer's state_dict (position across all groups)."""
        return {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}

    def state_dict(self) -> dict[str, Any]:
        """The full state, gathered from every owner (a collective: every rank must call it).

        Keyed like the unsharded ``optimizer_cls``'s state_dict, tensors on the CPU, identical on every rank.
        """
        index = self._global_index()
        local = self.local.state_dict()["state"]
        local_params = [p for g in self.local.param_groups for p in g["params"]]
        mine = {
            index[id(local_params[i])]: {k: _to_cpu(v) for k, v in s.items()} for i, s in local.items()
        }
        shards = [mine]
        if self.world_size > 1:
            shards = [None] * self.world_size
            dist.all_gather_object(shards, mine, group=self.process_group)
        state = {i: s for shard in shards for i, s in shard.items()}
        groups = []
        for g in self.param_groups:
            groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]})
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a full state dict (from ``state_dict()`` at any world size, or an unsharded optimizer's)."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"state dict has {len(groups)} param groups, this optimizer {len(self.param_groups)}")
        for saved, ours in zip(groups, self.param_groups):
            if len(saved["params"]) != len(ours["params"]):
                raise ValueError(
                    f"a param group of the state dict has {len(saved['params'])} parameters, ours {len(ours['params'])}"
                )
        index = self._global_index()
        # saved indices are positions too, so position -> saved index maps our params onto the saved ones
        saved_index = [i for g in groups for i in g["params"]]
        local_groups, local_state, n = [], {}, 0
        for saved, theirs in zip(groups, self.local.param_groups):
            ids = []
            for p in theirs["params"]:
                key = saved_index[index[id(p)]]
                if key in state_dict["state"]:
                    # copies: torch keeps CPU "step" tensors as given, and stepping would then advance the
                    # caller's checkpoint in place
                    local_state[n] = {k: _clone(v) for k, v in state_dict["state"][key].items()}
                ids.append(n)
                n += 1
            local_groups.append({**{k: v for k, v in saved.items() if k != "params"}, "params": ids})
        self.local.load_state_dict({"state": local_state, "param_groups": local_groups})
        for saved, ours in zip(groups, self.param_groups):
            ours.update({k: v for k, v in saved.items() if k != "params"})


def assign_owners(sizes: list[int], load: list[int]) -> list[int]:
    """The rank owning each of ``sizes`` (bytes): largest first onto the least-loaded rank; ``load`` (bytes
    per rank so far) is updated in place. Ties go to the earlier item and the lower rank, so every rank
    computes the same assignment without communicating. The most-loaded rank exceeds the mean by at most
    the largest item."""
    owners = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):  # sorted() is stable: ties keep their order
        r = min(range(len(load)), key=lambda j: (load[j], j))
        owners[i] = r
        load[r] += sizes[i]
    return owners


def get_sharded_optimizer(params, optimizer_cls: type[Optimizer], **kwargs: Any) -> ShardedOptimizer:
    """The CS336 test adapter (``adapters.get_sharded_optimizer``)."""
    return ShardedOptimizer(params, optimizer_cls, **kwargs)


# ---- accounting -------------------------------------------------------------------------------------


def local_optimizer(optimizer: Optimizer) -> Optimizer:
    """The optimizer that holds this rank's state: ours, PyTorch's ZeroRedundancyOptimizer, or a plain one."""
    if isinstance(optimizer, ShardedOptimizer):
        return optimizer.local
    if type(optimizer).__name__ == "ZeroRedundancyOptimizer":
        return optimizer.optim
    return optimizer


def state_bytes(optimizer: Optimizer) -> int:
    """Bytes of optimizer-state tensors held by this rank (AdamW: two moments and a step counter per param)."""
    total = 0
    for state in local_optimizer(optimizer).state.values():
        local = (getattr(v, "_local_tensor", v) for v in state.values() if isinstance(v, torch.Tensor))
        total += sum(v.numel() * v.element_size() for v in local)  # a DTensor (FSDP2) counts its local shard
    return total


def state_bytes_per_rank(optimizer: Optimizer, group: dist.ProcessGroup | None = None) -> list[int]:
    """``state_bytes`` of every rank (a collective), in rank order; ``[state_bytes]`` without a process group."""
    mine = state_bytes(optimizer)
    if not (dist.is_available() and dist.is_initialized()):
        return [mine]
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, mine, group=group)
    return out


# ---- helpers ----------------------------------------------------------------------------------------


def _check_device(p: torch.Tensor, backend: str | None) -> None:
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"optimizer params must be tensors, got {type(p).__name__}")
    if p.device.type == "meta":
        raise ValueError("parameters on the meta device have no values to optimise; materialise them first")
    if backend == "nccl" and p.device.type != "cuda":
        raise ValueError(f"the nccl process group needs CUDA parameters, got one on {p.device}")
    if backend == "gloo" and p.device.type not in ("cpu", "cuda"):
        raise ValueError(f"the gloo process group cannot broadcast a parameter on {p.device}")


def _unflatten_into(work, flat: torch.Tensor, owner: int, params: list[torch.Tensor], rank: int) -> None:
    work.wait()
    if owner != rank:  # the owner's parameters already hold the values it sent
        for p, value in zip(params, torch._utils._unflatten_dense_tensors(flat, params)):
            p.copy_(value)


def _to_cpu(value: Any) -> Any:
    return value.detach().cpu().clone() if isinstance(value, torch.Tensor) else value


def _clone(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value
