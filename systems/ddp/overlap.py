"""DDP that overlaps communication with the backward pass, one parameter at a time (handout §2.3.2).

A ``post_accumulate_grad`` hook fires as soon as a parameter's gradient is final for the backward pass
and starts an asynchronous all-reduce of it, in place; ``finish_gradient_synchronization`` only waits.
While the autograd engine computes the gradients of earlier layers, the collectives of later layers run
on the communication stream.

Launch order. Collectives pair up across ranks by issue order, and the order in which gradients become
ready is a local fact (a parameter unused on one rank's data never fires its hook there). So gradients
are launched in a fixed order, the reverse of ``model.parameters()`` (roughly the order backward produces
them): a ready gradient whose predecessors are not yet launched waits for them. Whatever has not been
launched when the backward pass ends (parameters unused in this step, or used only in earlier
micro-batches under ``no_sync``) is launched at synchronisation, in the same fixed order, with zeros where
a rank has no gradient. Every rank thus issues the same collectives in the same order, and none waits
for a hook that will never fire.

The unit of launching is a list of parameter indices; here each unit is one parameter.
``bucketed.py`` makes units of several parameters and reduces them through a flat buffer.
"""

from __future__ import annotations

import torch

from systems.ddp.base import DataParallel


class OverlapDDP(DataParallel):
    def __init__(self, module, **kwargs):
        super().__init__(module, **kwargs)
        self.units = self._make_units()
        self._unit_of = {i: u for u, unit in enumerate(self.units) for i in unit}
        self._reset()

    def _make_units(self) -> list[list[int]]:
        return [[i] for i in reversed(range(len(self.params)))]

    def _reset(self) -> None:
        self._missing = [len(unit) for unit in self.units]  # gradients each unit still waits for
        self._next = 0  # the first unit not yet launched
        self._ready: set[int] = set()
        self._in_flight: list[tuple[int, object, object]] = []  # (unit, what was reduced, handle)

    def _grad_ready(self, i: int) -> None:
        if i in self._ready:
            raise RuntimeError(
                f"parameter {i} received a second gradient before finish_gradient_synchronization(); its "
                "all-reduce may already be running: synchronise between backward passes, or accumulate "
                "inside no_sync()"
            )
        self._ready.add(i)
        self._missing[self._unit_of[i]] -= 1
        while self._next < len(self.units) and self._missing[self._next] == 0:
            self._launch(self._next)

    def _launch(self, u: int) -> None:
        (i,) = self.units[u]
        p = self.params[i]
        if p.grad is None:  # reduced anyway: another rank may have a gradient for it
            p.grad = torch.zeros_like(p)
        self._in_flight.append((u, p.grad, self._all_reduce(p.grad, async_op=True)))
        self._next = u + 1

    def _summed(self, u: int, reduced) -> dict[int, torch.Tensor]:
        """The sums a finished reduction of unit ``u`` holds, by parameter index."""
        return {self.units[u][0]: reduced}

    def _synchronize(self) -> dict[int, torch.Tensor]:
        while self._next < len(self.units):  # units some gradient never arrived for, in the fixed order
            self._launch(self._next)
        summed = {}
        for u, reduced, work in self._in_flight:
            work.wait()  # on a GPU: the current stream now waits for the collective
            summed.update(self._summed(u, reduced))
        self._reset()
        return summed
