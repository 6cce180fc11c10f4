"""How the kernels launch: tile candidates, the budgets that prune them, and the switches of :class:`FlashConfig`.

Each kernel has candidate tiles in order of preference. Untuned (``FlashConfig(autotune=False)``, and always in
Triton's interpreter) a kernel takes the first candidate that fits in shared memory and in registers; a test
compiles those defaults for sm_90 and checks with ptxas that, in the 16-bit dtypes, they spill no registers and
keep the wgmma products asynchronous. Autotuning times the candidates that fit in shared memory. The book's log
records which tiles tuning chose where.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Tiles:
    """One launch configuration: tile sizes (powers of two, at least 16) and Triton's warps and stages."""

    block_q: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 2


@dataclass(frozen=True)
class FlashConfig:
    """How the three kernels launch. ``None`` tiles: autotuned on a GPU, else the first candidate that fits.

    ``skip_masked_tiles`` and ``split_diagonal`` exist to measure the causal optimisations: off, the kernels walk
    over every tile and compare indices on all of them. ``unmasked_first`` False runs the dK/dV pass's diagonal
    tiles before the others, the order that makes the compiler serialise the two-pass kernel's products. ``tma``
    loads the tiles each kernel streams (K and V in the forward and the dQ pass, Q and dO in the dK/dV pass) with
    the Hopper copy engine through tensor descriptors, where the layout allows it (contiguous head dim, 16-byte
    aligned base and strides), instead of per-thread addresses and masks. ``atomic_dq`` computes dQ in the dK/dV
    pass, adding each key tile's share into an fp32 buffer (with ``tma``: bulk reductions by the copy engine, else
    atomic adds), instead of a second pass that recomputes P and dP: five matrix products per tile pair instead of
    seven, in exchange for the additions' memory traffic, and dQ's last bits then depend on the order in which the
    additions land. Left at ``None``, both are chosen per call: ``tma`` for the one-pass backward only,
    ``atomic_dq`` where one pass fits and, with autotuning, was the faster when the shape key was first met
    (:func:`~systems.attention.flash_triton.launch.one_pass_backward`). ``head_group``: how many heads' programs run
    interleaved (every head's longest causal tile before any head's next; groups one after another): more heads
    keep the end of the grid short, fewer keep the rows they stream in L2. ``None``: as many as fit a share of L2
    (:func:`head_group`); 1: one head after another. ``split_head_dim``: a head dim that is the sum of two powers of
    two, the smaller at least 16 (80 = 64 + 16, 96 = 64 + 32), is taken as two column blocks, every product over
    it or into it in two parts; off, it is padded with zeros to the next power of two (:func:`~.keys.head_dim_blocks`).
    """

    fwd: Tiles | None = None
    dkdv: Tiles | None = None
    dq: Tiles | None = None
    autotune: bool = True
    skip_masked_tiles: bool = True
    split_diagonal: bool = True
    unmasked_first: bool = True
    tma: bool | None = None
    atomic_dq: bool | None = None
    head_group: int | None = None
    split_head_dim: bool = True

    def encode(self) -> list[int]:
        """As a list of ints: the argument type a torch.library custom op can take."""
        ints = []
        for t in (self.fwd, self.dkdv, self.dq):
            ints += [0, 0, 0, 0] if t is None else [t.block_q, t.block_k, t.num_warps, t.num_stages]
        return ints + [_UNSET if (x := getattr(self, name)) is None else int(x) for name in _SWITCHES]

    @classmethod
    def decode(cls, ints) -> FlashConfig:
        return _decode(tuple(ints))


_SWITCHES = tuple(f.name for f in fields(FlashConfig))[3:]  # the booleans after the three kernels' tiles
_UNSET = -1  # a switch left to the per-call choice
_COUNTS = ("head_group",)  # the switches that are numbers, not booleans


@functools.lru_cache(maxsize=64)
def _decode(ints: tuple[int, ...]) -> FlashConfig:
    tiles = [None if ints[i] == 0 else Tiles(*ints[i : i + 4]) for i in (0, 4, 8)]
    return FlashConfig(*tiles, *(None if x == _UNSET else x if name in _COUNTS else bool(x)
                                 for name, x in zip(_SWITCHES, ints[12:])))


DEFAULT = FlashConfig()
DEFAULT_CODE = DEFAULT.encode()

# Candidates in order of preference. Forward and dQ hold a query tile and stream key tiles (long BLOCK_K loops),
# dK/dV the other way round.
CANDIDATES = {
    "fwd": (Tiles(64, 64, 4, 3), Tiles(128, 64, 8, 3), Tiles(128, 64, 4, 3), Tiles(128, 128, 8, 3),
            Tiles(128, 32, 4, 4), Tiles(64, 32, 4, 2)),
    "dkdv": (Tiles(64, 64, 4, 3), Tiles(32, 64, 4, 4), Tiles(64, 128, 8, 3), Tiles(32, 128, 4, 3),
             Tiles(32, 64, 4, 2)),
    "dq": (Tiles(64, 64, 4, 3), Tiles(128, 64, 8, 3), Tiles(128, 32, 4, 3), Tiles(64, 32, 4, 2)),
}
SMEM_BUDGET = 160 * 1024  # bytes; an H100 block may use 227 KB, the rest is left to the compiler's buffers
# fp32 values a thread may keep live (accumulators and one score tile) before ptxas spills registers to local
# memory; calibrated on the candidates above compiled for sm_90 (a test checks the defaults).
REGISTER_BUDGET = 144


def smem_bytes(kind: str, t: Tiles, block_d: int, elt: int) -> int:
    """Rough shared memory of one program: resident tiles plus the streamed ones times the pipeline depth."""
    resident, streamed = {"fwd": (t.block_q, 2 * t.block_k), "dq": (2 * t.block_q, 2 * t.block_k),
                          "dkdv": (2 * t.block_k, 2 * t.block_q)}[kind]
    return (resident + streamed * t.num_stages) * block_d * elt


def live_floats(kind: str, t: Tiles, block_d: int) -> float:
    """fp32 values per thread that stay live through the loop: the accumulators plus one score tile."""
    accumulators = {"fwd": t.block_q, "dq": t.block_q, "dkdv": 2 * t.block_k}[kind] * block_d
    return (accumulators + t.block_q * t.block_k) / (32 * t.num_warps)


def fitting(kind: str, candidates, block_d: int, elt: int) -> list[Tiles]:
    """The candidates that fit in shared memory (autotuning times these); the smallest if none does."""
    fits = [t for t in candidates if smem_bytes(kind, t, block_d, elt) <= SMEM_BUDGET]
    return fits or [min(candidates, key=lambda t: smem_bytes(kind, t, block_d, elt))]


# The share of L2 (50 MB on an H100) that one group of heads' streamed rows may take: the other programs' tiles,
# the outputs and the accumulators share the rest.
L2_SHARE = 16 * 2**20


def head_group(streamed_rows: int, block_d: int, elt: int, batch_heads: int) -> int:
    """Heads whose programs run interleaved (:class:`FlashConfig`): as many as fit their two streamed tensors in
    :data:`L2_SHARE`, at least one."""
    return max(1, min(batch_heads, L2_SHARE // (2 * streamed_rows * block_d * elt)))


@functools.cache
def default_tiles(kind: str, block_d: int, elt: int) -> Tiles:
    """The untuned tiles: the first candidate that fits in shared memory and in registers. ``block_d``: the columns
    a program computes (:func:`~.keys.row_width`). Registers are counted at the next power of two: a head dim split
    into two blocks holds both blocks' operand fragments, and at 80 and 96 columns ptxas spilled the dK/dV pass's
    64×64 tiles, whose count at the split width is within the budget."""
    fits = fitting(kind, CANDIDATES[kind], block_d, elt)
    padded = 1 << (block_d - 1).bit_length()
    in_registers = [t for t in fits if live_floats(kind, t, padded) <= REGISTER_BUDGET]
    return in_registers[0] if in_registers else min(fits, key=lambda t: live_floats(kind, t, padded))
