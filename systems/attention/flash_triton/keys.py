"""Shape keys: what the tiles and the backward's pass count are chosen by, and the values every launch derives from
the shapes (head-dim block, length buckets, head groups, whether tiles are full).

Under ``torch.compile`` with dynamic shapes the sizes are symbolic. A key must still be a plain value (a dictionary
key), and the kernels are compiled for one head dim; so the head dim is fixed with a guard (``int()``), while the
lengths and batch × heads are read by :func:`hint`, the value they had in the traced example, without a guard:
only choices that stay correct for any value read them (tiles, buckets, head groups), and the one that would not
(whether the last tile is full, :func:`even`) treats a symbolic length as possibly ragged.
"""

from __future__ import annotations

import warnings

import torch
import triton

from systems.attention.flash_triton.tiles import FlashConfig, head_group

TUNE_KEY = ("Q_BUCKET", "K_BUCKET", "HEAD_DIM", "TAIL_D", "CAUSAL", "SKIP_MASKED", "SPLIT_DIAGONAL", "UNMASKED_FIRST",
            "TMA", "ATOMIC_DQ")


def hint(n) -> int:
    """A size as a plain int: a symbolic one by the value it had in the example the compiler traced, read without
    adding a guard."""
    if isinstance(n, int):
        return n
    from torch.fx.experimental import symbolic_shapes

    if hasattr(symbolic_shapes, "optimization_hint"):  # torch >= 2.13
        return symbolic_shapes.optimization_hint(n, fallback=4096)
    with warnings.catch_warnings():  # torch 2.11 reads it the same way under an older name it warns about
        warnings.simplefilter("ignore", FutureWarning)
        return symbolic_shapes.hint_int(n, fallback=4096)


def bucket(n) -> int:
    # Past a few thousand rows the grid fills the GPU and the best tiles stop changing with length.
    return min(triton.next_power_of_2(hint(n)), 4096)


def even(length, tile: int) -> bool:
    """Whether every tile along ``length`` is full (the kernels then skip the bounds checks of the last one). A
    symbolic length may be any value at run time: its tiles are checked."""
    return isinstance(length, int) and length % tile == 0


def block_d(d: int) -> int:
    """The head-dim block: the next power of two (at least 16), padded with zeros past d."""
    return max(16, triton.next_power_of_2(int(d)))


def head_dim_blocks(d: int, split: bool = True) -> tuple[int, int]:
    """The head dim's column blocks (BLOCK_D, TAIL_D), widths a tile may have (powers of two). With ``split``, a
    d that is the sum of two powers of two, the smaller at least 16 (the least width of a tensor-core product's
    operand), is two blocks: 80 = 64 + 16, 96 = 64 + 32, 48 = 32 + 16, every product then taken in two parts
    over exactly d columns. Otherwise one block padded with zeros past d, TAIL_D = 0 (80 is padded to 128: 60 %
    more work in every product)."""
    d = int(d)
    padded = block_d(d)
    tail = d - padded // 2
    if split and padded != d and tail >= 16 and tail == triton.next_power_of_2(tail):
        return padded // 2, tail
    return padded, 0


def row_width(d: int, split: bool = True) -> int:
    """The columns a program computes per row: d where it splits, else its padded block."""
    return sum(head_dim_blocks(d, split))


def meta(q: torch.Tensor, k: torch.Tensor, is_causal: bool, cfg: FlashConfig) -> dict:
    """The launch arguments every kernel takes from the shapes and switches (lengths as they are: symbolic ones stay
    symbolic run-time arguments)."""
    _, H, n_q, d = q.shape
    d = int(d)
    main, tail = head_dim_blocks(d, cfg.split_head_dim)
    return dict(H=H, N_QUERIES=n_q, N_KEYS=k.shape[2], Q_BUCKET=bucket(n_q), K_BUCKET=bucket(k.shape[2]),
                HEAD_DIM=d, BLOCK_D=main, TAIL_D=tail, CAUSAL=is_causal,
                SKIP_MASKED=cfg.skip_masked_tiles, SPLIT_DIAGONAL=cfg.split_diagonal)


def tune_key(kind: str, dtype: torch.dtype, meta_: dict) -> tuple:
    """The shape key the tiles are chosen for (plain values)."""
    return (kind, dtype, *(meta_[k] for k in TUNE_KEY if k in meta_))


def pass_key(q: torch.Tensor, k: torch.Tensor, is_causal: bool, cfg: FlashConfig) -> tuple:
    """The key the backward's pass count is chosen for: the tiles' key and batch × heads' bucket (which of one pass
    or two wins depends on the grid as well as the lengths)."""
    B, H, n_q, d = q.shape
    return (q.dtype, int(d), is_causal, bucket(n_q), bucket(k.shape[2]), triton.next_power_of_2(hint(B * H)), cfg)


def heads_per_group(cfg: FlashConfig, streamed: torch.Tensor, batch_heads) -> int:
    """``cfg.head_group``, else as many heads as keep ``streamed``'s rows (and a second tensor's) in L2."""
    if cfg.head_group is not None:
        return min(cfg.head_group, hint(batch_heads))
    return head_group(hint(streamed.shape[2]), row_width(streamed.shape[3], cfg.split_head_dim),
                      streamed.element_size(), hint(batch_heads))
