"""What autograd saves for the backward pass, tensor by tensor, attributed to the module and the operation that
saved it (2026 handout §3.1, autograd residuals).

A ``torch.autograd.graph.saved_tensors_hooks`` pack hook sees every tensor an operation keeps for its backward.
:class:`SavedTensors` records each one with the innermost module running (forward hooks on the model's modules)
and the operation saving it (the innermost ``torch`` function being called, from a ``TorchFunctionMode``).
Parameters are listed but not counted: they exist whether or not anything is saved. A storage saved twice (the
same tensor by two operations, or two views of it) is counted once, which is what the memory holds.

    with SavedTensors(model) as saved:
        loss = model(x).sum()
    saved.total_bytes              # bytes kept alive for the backward pass
    saved.by_module(), saved.by_op(), saved.table()

Inside ``torch.utils.checkpoint`` regions the checkpoint's own hooks take over (they keep nothing but the
region's inputs), so a checkpointed model shows what it really keeps. A compiled module saves its tensors from
one fused autograd function; measure it with ``by_operation=False`` (the operation tracker would change what
``torch.compile`` traces), after a first call has compiled it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import torch
from torch.overrides import TorchFunctionMode


@dataclass
class Saved:
    module: str
    op: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int  # of the storage, counted once over all records
    storage: int  # the storage's address: records with the same one share memory
    parameter: bool
    first: bool  # the first record of its storage (the one the bytes are counted on)


class _CurrentOp(TorchFunctionMode):
    """Keeps the name of the innermost torch function running, for the pack hook to read."""

    def __init__(self):
        super().__init__()
        self.stack: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.stack.append(getattr(func, "__name__", str(func)).strip("_"))  # Tensor.__mul__ -> mul
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.stack.pop()


def module_names(model: torch.nn.Module) -> dict[torch.nn.Module, str]:
    """Each module's name within ``model`` (the model itself by its type): how records name the module running."""
    return {m: name or type(m).__name__ for name, m in model.named_modules()}


@dataclass
class SavedTensors:
    """Context manager recording what autograd saves while it is active; see the module doc."""

    model: torch.nn.Module | None = None
    by_operation: bool = True
    records: list[Saved] = field(default_factory=list)

    def __enter__(self) -> "SavedTensors":
        self._modules: list[str] = []
        self._handles = []
        if self.model is not None:
            for module, name in module_names(self.model).items():
                self._handles.append(module.register_forward_pre_hook(self._enter_module(name)))
                self._handles.append(module.register_forward_hook(self._leave_module))
        self._params = {p.untyped_storage().data_ptr() for p in (self.model.parameters() if self.model else ())}
        self._seen: set[tuple[str, int]] = set()
        self._ops = _CurrentOp()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        if self.by_operation:
            self._ops.__enter__()
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        if self.by_operation:
            self._ops.__exit__(*exc)
        for handle in self._handles:
            handle.remove()

    def _enter_module(self, name: str):
        def hook(module, args) -> None:
            self._modules.append(name)
        return hook

    def _leave_module(self, module, args, output) -> None:  # returns None: a forward hook's result replaces the output
        self._modules.pop()

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        key = (str(t.device), storage.data_ptr())
        first = key not in self._seen
        self._seen.add(key)
        parameter = isinstance(t, torch.nn.Parameter) or storage.data_ptr() in self._params
        self.records.append(Saved(self._modules[-1] if self._modules else "", self._ops.stack[-1] if self._ops.stack
                                  else "", tuple(t.shape), str(t.dtype).removeprefix("torch."), storage.nbytes(),
                                  storage.data_ptr(), parameter, first))
        return t

    @property
    def total_bytes(self) -> int:
        """Bytes of the distinct non-parameter storages saved."""
        return sum(r.bytes for r in self.records if r.first and not r.parameter)

    def table(self) -> pd.DataFrame:
        """Every saved tensor in the order saved, with the bytes it adds (0 for a storage already counted)."""
        rows = [{**r.__dict__, "adds_bytes": r.bytes if (r.first and not r.parameter) else 0} for r in self.records]
        return pd.DataFrame(rows, columns=list(Saved.__dataclass_fields__) + ["adds_bytes"])

    def by_module(self) -> pd.DataFrame:
        return self._group("module")

    def by_op(self) -> pd.DataFrame:
        return self._group("op")

    def _group(self, key: str) -> pd.DataFrame:
        t = self.table()
        out = t.groupby(key, sort=False).agg(tensors=("shape", "size"), bytes=("adds_bytes", "sum")).reset_index()
        out["MiB"] = out.bytes / 2**20
        return out.sort_values("bytes", ascending=False, ignore_index=True)


def block_residuals(cfg, batch: int, compiled: bool = False, device: str | torch.device | None = None
                    ) -> "SavedTensors":
    """What one Transformer block of ``cfg`` saves for its backward pass on a random (batch, context, d_model) fp32
    input; ``compiled`` measures ``torch.compile(block, fullgraph=True)``, as the 2026 handout's §3.2 does."""
    from systems.model import TransformerBlock

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(0)
    with torch.device(device):
        block = TransformerBlock(cfg)
        x = torch.randn(batch, cfg.context_length, cfg.d_model, requires_grad=True)
    run = torch.compile(block, fullgraph=True) if compiled else block
    if compiled:
        run(x)  # compile outside the measurement
    with SavedTensors(block, by_operation=not compiled) as saved:
        run(x)
    return saved


def model_residuals_per_token(cfg, context: int = 64) -> float:
    """Bytes one token of ``cfg`` keeps for the backward pass of its training loss (fp32, eager), measured on the
    CPU: a one-block model with its embedding, head and loss, plus the other blocks at one block's cost. With an
    attention that keeps no context × context matrix (``sdpa``), this does not depend on the context length,
    so a short one measures it."""
    from dataclasses import replace

    from systems.model import TransformerLM

    if cfg.attention == "naive":
        raise ValueError("naive attention keeps a context × context matrix: bytes per token depend on the context")
    torch.manual_seed(0)
    one = replace(cfg, num_layers=1, context_length=context)
    model = TransformerLM(one)
    tokens = torch.randint(cfg.vocab_size, (1, context + 1))
    with SavedTensors(model, by_operation=False) as saved:
        model(tokens[:, :-1], tokens[:, 1:])  # forward and loss
    block = block_residuals(one, 1, device="cpu").total_bytes
    return (saved.total_bytes + (cfg.num_layers - 1) * block) / context
