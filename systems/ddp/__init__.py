"""Data-parallel training, one idea per module (handout §2.2–§2.3); the registry maps names to wrappers.

    from systems.ddp import get_wrapper
    ddp = get_wrapper("bucketed")(model, bucket_size_mb=25)      # model already on this rank's device
    loss_fn(ddp(x), y).backward()
    ddp.finish_gradient_synchronization()                         # before optimizer.step()
    optimizer.step()

Names: ``naive`` (§2.2.2, one blocking all-reduce per parameter), ``flat`` (§2.3.1, one flattened
all-reduce per dtype), ``overlap`` (§2.3.2, per-parameter async all-reduce from backward hooks),
``bucketed`` (§2.3.3), and ``torch`` (PyTorch's DistributedDataParallel behind the same interface).

Every wrapper is constructed as ``Cls(module, *, process_group=None, sync_timing=False, **options)``; the
options are ``bucket_size_mb`` (``bucketed``, ``torch``) and ``find_unused_parameters`` (``torch``). Every
wrapper has ``forward``, ``no_sync()``, ``finish_gradient_synchronization()``, ``.module`` and ``comm_ms``
(milliseconds spent in each synchronisation). :func:`wrap` drops options a variant does not take, so a
benchmark can build every variant from one set of keyword arguments.
"""

from __future__ import annotations

import inspect

import torch.nn as nn

from systems.ddp.base import DataParallel
from systems.ddp.bucketed import BucketedDDP
from systems.ddp.flat import FlatDDP
from systems.ddp.naive import NaiveDDP
from systems.ddp.overlap import OverlapDDP
from systems.ddp.torch_ddp import TorchDDP

WRAPPERS: dict[str, type[nn.Module]] = {
    "naive": NaiveDDP,
    "flat": FlatDDP,
    "overlap": OverlapDDP,
    "bucketed": BucketedDDP,
    "torch": TorchDDP,
}


def get_wrapper(name: str) -> type[nn.Module]:
    if name not in WRAPPERS:
        raise ValueError(f"unknown DDP variant {name!r}; choose one of {sorted(WRAPPERS)}")
    return WRAPPERS[name]


def wrap(name: str, module: nn.Module, **options) -> nn.Module:
    """``get_wrapper(name)(module, **options)``, keeping only the options that variant accepts."""
    cls = get_wrapper(name)
    accepted = set(inspect.signature(cls.__init__).parameters) | set(inspect.signature(DataParallel.__init__).parameters)
    return cls(module, **{k: v for k, v in options.items() if k in accepted})


__all__ = ["WRAPPERS", "get_wrapper", "wrap", "DataParallel", "NaiveDDP", "FlatDDP", "OverlapDDP",
           "BucketedDDP", "TorchDDP"]
