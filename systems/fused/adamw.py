"""AdamW as one pass over memory (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", 2019; the 2026
handout §9's suggested fused AdamW).

An optimizer step reads each parameter, its gradient and the two moments, and writes the parameter and the moments
back: 16 bytes read and 12 written per fp32 parameter, and a few dozen operations on them that a GPU does not
notice. Its time is memory traffic. PyTorch's for-each AdamW runs the update as a dozen passes over the lists of
tensors (a multiply, a lerp, an addcmul, a square root, ...), each reading and writing memory; its ``fused=True``
one is a single CUDA kernel. Here one Triton kernel (:func:`_adamw_kernel`) reads and writes every value once, and
one launch updates every parameter of a group: the tensors' addresses go to the kernel in a table, and each program
updates one chunk of :data:`CHUNK` values of one tensor (as apex's multi-tensor apply splits them).

The update is PyTorch's, written as its fused CUDA kernel writes it (``fused_adam_utils.cuh``): every value and
scalar in fp32, the moments through fused multiply-adds, the division and the square root rounded as IEEE asks::

    p ← p − (lr·λ)·p                                   (one fused multiply-add)
    m ← β1·m + (g − β1·g)                              (two)
    v ← β2·v + (g² − β2·g²)                            (two)
    p ← p − (lr / (1 − β1^t)) · m / (√v / √(1 − β2^t) + ε)

The moments are fp32 also for a bf16 parameter, which is updated in fp32 and rounded once. The state is kept as
``torch.optim.AdamW`` keeps it (per parameter ``step``, ``exp_avg``, ``exp_avg_sq``), so state dicts and checkpoints
move between the two (moments loaded into this one stay fp32).

    optimizer = FusedAdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

import numpy as np
import torch
import triton
import triton.language as tl

from systems.triton_interpreter import INTERPRET, patch_interpreter

CHUNK = 1 << 16  # values one program updates
_BLOCK = 1024  # of them at a time
_TRITON_TYPES = {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}
_ADAMW_ONLY = {"amsgrad": False, "maximize": False, "decoupled_weight_decay": True}


@triton.jit
def _adamw_math(p, g, m, v, decay, beta1, beta2, eps, step_size, correction2_sqrt):
    """The update of loaded fp32 values, operation for operation as PyTorch's fused kernel does it (Triton's plain
    ``/`` and ``tl.sqrt`` are approximate on a GPU: the rounded ones are asked for by name)."""
    p = tl.fma(-decay, p, p)
    m = tl.fma(beta1, m, tl.fma(-beta1, g, g))
    g2 = g * g
    v = tl.fma(beta2, v, tl.fma(-beta2, g2, g2))
    denom = tl.div_rn(tl.sqrt_rn(v), correction2_sqrt) + eps
    return p - tl.div_rn(step_size * m, denom), m, v


@triton.jit
def _adamw_kernel(addresses, numels, chunk_tensor, chunk_start, scalars, P_TYPE: tl.constexpr, G_TYPE: tl.constexpr,
                  ALIGNED: tl.constexpr, CHUNK_SIZE: tl.constexpr, BLOCK: tl.constexpr):
    """One chunk of one tensor. ``addresses``: per tensor (parameter, gradient, exp_avg, exp_avg_sq) as int64;
    ``scalars`` (fp32): lr·λ, β1, β2, ε, the step size lr / (1 − β1^t) and √(1 − β2^t).
    ``ALIGNED``: every address is a multiple of 16 bytes, so whole blocks move in 16-byte accesses."""
    chunk = tl.program_id(0)
    t = tl.load(chunk_tensor + chunk)
    start = tl.multiple_of(tl.load(chunk_start + chunk), CHUNK_SIZE)  # chunks begin at multiples of their size
    n = tl.load(numels + t)
    param = tl.load(addresses + 4 * t).to(tl.pointer_type(P_TYPE))
    grad = tl.load(addresses + 4 * t + 1).to(tl.pointer_type(G_TYPE))
    exp_avg = tl.load(addresses + 4 * t + 2).to(tl.pointer_type(tl.float32))
    exp_avg_sq = tl.load(addresses + 4 * t + 3).to(tl.pointer_type(tl.float32))
    if ALIGNED:
        param, grad = tl.multiple_of(param, 16), tl.multiple_of(grad, 16)
        exp_avg, exp_avg_sq = tl.multiple_of(exp_avg, 16), tl.multiple_of(exp_avg_sq, 16)
    decay, beta1, beta2 = tl.load(scalars), tl.load(scalars + 1), tl.load(scalars + 2)
    eps, step_size, correction2_sqrt = tl.load(scalars + 3), tl.load(scalars + 4), tl.load(scalars + 5)
    for offset in range(0, CHUNK_SIZE, BLOCK):
        at = start + offset + tl.arange(0, BLOCK)
        if start + offset + BLOCK <= n:  # a whole block: no mask, so the accesses can be vectors
            p, m, v = _adamw_math(tl.load(param + at).to(tl.float32), tl.load(grad + at).to(tl.float32),
                                  tl.load(exp_avg + at), tl.load(exp_avg_sq + at), decay, beta1, beta2, eps,
                                  step_size, correction2_sqrt)
            tl.store(param + at, p.to(P_TYPE))
            tl.store(exp_avg + at, m)
            tl.store(exp_avg_sq + at, v)
        else:
            inside = at < n
            p, m, v = _adamw_math(tl.load(param + at, mask=inside).to(tl.float32),
                                  tl.load(grad + at, mask=inside).to(tl.float32), tl.load(exp_avg + at, mask=inside),
                                  tl.load(exp_avg_sq + at, mask=inside), decay, beta1, beta2, eps, step_size,
                                  correction2_sqrt)
            tl.store(param + at, p.to(P_TYPE), mask=inside)
            tl.store(exp_avg + at, m, mask=inside)
            tl.store(exp_avg_sq + at, v, mask=inside)


class FusedAdamW(torch.optim.Optimizer):
    """AdamW with the update of every parameter of a group done by one kernel launch (see the module doc)."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"Invalid betas: {betas}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        # the options torch.optim.AdamW's groups carry, at the one setting this update implements, so that a state
        # dict loads into either (torch's Adam reads a group without them as plain Adam, L2 decay)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, **_ADAMW_ONLY,
                                      foreach=None, fused=None, capturable=False, differentiable=False))
        self._chunks: dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        # torch.optim.Optimizer casts loaded moments to the parameter's dtype; ours are fp32 whatever it is
        for state in self.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    state[key] = state[key].float()

    def _state(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            other = {k: group.get(k) for k, v in _ADAMW_ONLY.items() if group.get(k, v) != v}
            if other:
                raise ValueError(f"FusedAdamW implements AdamW only ({_ADAMW_ONLY}); a group asks for {other}")
            batches: dict[tuple, list[tuple[torch.Tensor, ...]]] = defaultdict(list)
            stepped = [(p, self._state(p)) for p in group["params"] if p.grad is not None]
            for p, _ in stepped:
                if p.grad.is_sparse:
                    raise RuntimeError("FusedAdamW does not take sparse gradients")
                if p.dtype not in _TRITON_TYPES or p.grad.dtype not in _TRITON_TYPES:
                    raise TypeError(f"FusedAdamW updates fp32, bf16 and fp16 parameters, got {p.dtype} "
                                    f"(gradient {p.grad.dtype})")
            torch._foreach_add_([s["step"] for _, s in stepped], 1.0)
            for p, s in stepped:
                key = (p.device, p.dtype, p.grad.dtype, float(s["step"]))
                batches[key].append((p, p.grad, s["exp_avg"], s["exp_avg_sq"]))
            for key, tensors in batches.items():
                self._launch(group, key[3], tensors)
        return loss

    def _launch(self, group: dict, step: float, tensors: list[tuple[torch.Tensor, ...]]) -> None:
        """One kernel launch updating ``tensors`` (parameter, gradient, exp_avg, exp_avg_sq), all at ``step``."""
        if INTERPRET:
            patch_interpreter()
        param, grad = tensors[0][0], tensors[0][1]
        for quad in tensors:
            if not all(_local(t).is_contiguous() for t in quad):
                raise ValueError("FusedAdamW needs contiguous parameters, gradients and moments")
        addresses, numels, chunk_tensor, chunk_start = self._tables(param.device, tensors)
        lr, (beta1, beta2), eps, decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        scalars = torch.tensor(adamw_scalars(lr, beta1, beta2, eps, decay, step), dtype=torch.float32,
                               device=param.device)
        aligned = all(_local(t).data_ptr() % 16 == 0 for quad in tensors for t in quad)
        _adamw_kernel[(len(chunk_tensor),)](addresses, numels, chunk_tensor, chunk_start, scalars,
                                            P_TYPE=_TRITON_TYPES[param.dtype], G_TYPE=_TRITON_TYPES[grad.dtype],
                                            ALIGNED=aligned, CHUNK_SIZE=CHUNK, BLOCK=_BLOCK, num_warps=4)

    def _tables(self, device: torch.device, tensors: list[tuple[torch.Tensor, ...]]):
        """The kernel's tables: each tensor's four addresses and its length (new every step: a gradient may move),
        and which tensor and offset each chunk covers (kept while the lengths stay the same)."""
        sizes = tuple(_local(quad[0]).numel() for quad in tensors)
        key = (device, sizes)
        if key not in self._chunks:
            chunk_tensor = [i for i, n in enumerate(sizes) for _ in range(0, n, CHUNK)]
            chunk_start = [s for n in sizes for s in range(0, n, CHUNK)]
            self._chunks[key] = (torch.tensor(sizes, dtype=torch.int64, device=device),
                                 torch.tensor(chunk_tensor, dtype=torch.int32, device=device),
                                 torch.tensor(chunk_start, dtype=torch.int64, device=device))
        addresses = torch.tensor([_local(t).data_ptr() for quad in tensors for t in quad], dtype=torch.int64,
                                 device=device)
        return (addresses, *self._chunks[key])


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a sharded tensor (FSDP2's parameters are DTensors): AdamW is element by element, so
    updating each rank's shard updates the whole."""
    return t.to_local() if hasattr(t, "to_local") else t


def adamw_scalars(lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, step: float
                  ) -> list[float]:
    """The kernel's scalars at ``step``, each rounded to fp32 where PyTorch's fused kernel computes it in fp32: lr·λ,
    β1, β2, ε, the step size lr / (1 − β1^t) and √(1 − β2^t)."""
    f32 = np.float32
    lr_, beta1_, beta2_ = f32(lr), f32(beta1), f32(beta2)
    correction1 = f32(1) - np.power(beta1_, f32(step))
    correction2 = f32(1) - np.power(beta2_, f32(step))
    return [float(v) for v in (lr_ * f32(weight_decay), beta1_, beta2_, f32(eps), lr_ / correction1,
                               np.sqrt(correction2))]
