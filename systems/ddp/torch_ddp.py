"""PyTorch's own ``DistributedDataParallel`` behind this package's interface: the anchor of every benchmark.

Its reducer already does what ``bucketed.py`` does (buckets, hooks, launch in a fixed order), in C++, and
synchronises inside ``backward()``; so ``finish_gradient_synchronization`` has nothing left to wait for and
records no communication time (NaN): the communication is hidden inside the backward pass's time.
"""

from __future__ import annotations

import math

import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


class TorchDDP(DistributedDataParallel):
    def __init__(self, module: nn.Module, *, process_group: dist.ProcessGroup | None = None,
                 sync_timing: bool = False, bucket_size_mb: float = 25.0, find_unused_parameters: bool = False):
        if not dist.is_initialized():
            raise RuntimeError("torch.nn.parallel.DistributedDataParallel needs an initialised process group")
        device = next(module.parameters()).device
        super().__init__(
            module,
            device_ids=[device] if device.type == "cuda" else None,
            process_group=process_group,
            bucket_cap_mb=bucket_size_mb,
            find_unused_parameters=find_unused_parameters,
        )
        self.sync_timing = sync_timing
        self.comm_ms: list[float] = []

    def finish_gradient_synchronization(self) -> None:
        self.comm_ms.append(math.nan)
