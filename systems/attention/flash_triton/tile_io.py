"""How the kernels (:mod:`.kernels`, :mod:`.backward_kernels`) address, load and store their tiles: pointers and masks,
or tensor descriptors the Hopper copy engine loads; and a head dim held as two column blocks, each tensor's tail
beside it (``TAIL_D``; without one, the functions hand back the main block, which the kernels then never read).
"""

import triton
import triton.language as tl


@triton.jit
def tile(base, rows, cols, stride_row, stride_col):
    """Pointers to the (len(rows), len(cols)) tile of a row-major-ish matrix at ``base``."""
    return base + rows[:, None] * stride_row + cols[None, :] * stride_col


@triton.jit
def load(ptrs, rows, cols, n_rows, HEAD_DIM: tl.constexpr, CHECK_ROWS: tl.constexpr, CHECK_COLS: tl.constexpr):
    """A tile load masked only on the dimensions that can run past the tensor (zero padded)."""
    if CHECK_ROWS:
        if CHECK_COLS:
            x = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (cols[None, :] < HEAD_DIM), other=0.0)
        else:
            x = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
    else:
        if CHECK_COLS:
            x = tl.load(ptrs, mask=cols[None, :] < HEAD_DIM, other=0.0)
        else:
            x = tl.load(ptrs)
    return x


@triton.jit
def store(ptrs, x, rows, cols, n_rows, HEAD_DIM: tl.constexpr):
    tl.store(ptrs, x.to(ptrs.dtype.element_ty), mask=(rows[:, None] < n_rows) & (cols[None, :] < HEAD_DIM))


@triton.jit
def rows_source(base, n_rows, stride_row, HEAD_DIM: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
                TMA: tl.constexpr):
    """What a loop streams (BLOCK_ROWS, BLOCK_D) tiles from: a tensor descriptor over the (n_rows, HEAD_DIM)
    matrix at ``base`` with TMA (the host checked its layout), else the base pointer itself."""
    if TMA:
        src = tl.make_tensor_descriptor(base, [n_rows, HEAD_DIM], [stride_row, 1], [BLOCK_ROWS, BLOCK_D])
    else:
        src = base
    return src


@triton.jit
def stream(src, row0, rows, cols, stride_row, stride_col, n_rows, HEAD_DIM: tl.constexpr, CHECK_ROWS: tl.constexpr,
           CHECK_COLS: tl.constexpr, TMA: tl.constexpr):
    """The tile of ``rows`` (starting at row0) from :func:`rows_source`'s source. Through a descriptor the copy
    engine loads it and zero-fills past the rows and the head dim; no addresses or masks are computed."""
    if TMA:
        x = src.load([row0, 0])
    else:
        x = load(tile(src, rows, cols, stride_row, stride_col), rows, cols, n_rows, HEAD_DIM, CHECK_ROWS, CHECK_COLS)
    return x


@triton.jit
def tail_cols(offs_d, BLOCK_D: tl.constexpr, TAIL_D: tl.constexpr):
    """The head-dim columns of the tail block, BLOCK_D onwards (``offs_d`` itself without a tail)."""
    if TAIL_D:
        cols = BLOCK_D + tl.arange(0, TAIL_D)
    else:
        cols = offs_d
    return cols


@triton.jit
def tail_source(base, src, n_rows, stride_row, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr, TAIL_D: tl.constexpr,
                TMA: tl.constexpr):
    """Like :func:`rows_source` for the tail block: a descriptor over its TAIL_D columns with TMA, else the base pointer
    (the tail's column offsets address it); ``src``, the main block's source, without a tail."""
    if TAIL_D and TMA:
        tail = tl.make_tensor_descriptor(base + BLOCK_D, [n_rows, TAIL_D], [stride_row, 1], [BLOCK_ROWS, TAIL_D])
    elif TAIL_D:
        tail = base
    else:
        tail = src
    return tail


@triton.jit
def load_pair(base, rows, offs_d, offs_t, stride_row, stride_col, n_rows, HEAD_DIM: tl.constexpr,
              TAIL_D: tl.constexpr, CHECK_COLS: tl.constexpr):
    """A resident tile and its tail (the tile again without one), rows checked against ``n_rows``."""
    x = load(tile(base, rows, offs_d, stride_row, stride_col), rows, offs_d, n_rows, HEAD_DIM, True, CHECK_COLS)
    if TAIL_D:
        x_t = load(tile(base, rows, offs_t, stride_row, stride_col), rows, offs_t, n_rows, HEAD_DIM, True, False)
    else:
        x_t = x
    return x, x_t


@triton.jit
def stream_tail(src, x, row0, rows, cols, stride_row, stride_col, n_rows, HEAD_DIM: tl.constexpr,
                TAIL_D: tl.constexpr, CHECK_ROWS: tl.constexpr, TMA: tl.constexpr):
    """The tail of a streamed tile ``x`` (``x`` itself without a tail)."""
    if TAIL_D:
        x_t = stream(src, row0, rows, cols, stride_row, stride_col, n_rows, HEAD_DIM, CHECK_ROWS, False, TMA)
    else:
        x_t = x
    return x_t


@triton.jit
def store_pair(base, x, x_t, rows, offs_d, offs_t, stride_row, stride_col, n_rows, HEAD_DIM: tl.constexpr,
               TAIL_D: tl.constexpr):
    store(tile(base, rows, offs_d, stride_row, stride_col), x, rows, offs_d, n_rows, HEAD_DIM)
    if TAIL_D:
        store(tile(base, rows, offs_t, stride_row, stride_col), x_t, rows, offs_t, n_rows, HEAD_DIM)


@triton.jit
def sources(base, n_rows, stride_row, HEAD_DIM: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
            TAIL_D: tl.constexpr, TMA: tl.constexpr):
    """What a loop streams a matrix's tiles and their tails from (:func:`rows_source`, :func:`tail_source`)."""
    src = rows_source(base, n_rows, stride_row, HEAD_DIM, BLOCK_ROWS, BLOCK_D, TMA)
    return src, tail_source(base, src, n_rows, stride_row, BLOCK_ROWS, BLOCK_D, TAIL_D, TMA)


@triton.jit
def zeros_pair(ROWS: tl.constexpr, BLOCK_D: tl.constexpr, TAIL_D: tl.constexpr):
    """An fp32 accumulator and its tail's (the accumulator again without a tail)."""
    x = tl.zeros((ROWS, BLOCK_D), dtype=tl.float32)
    if TAIL_D:
        x_t = tl.zeros((ROWS, TAIL_D), dtype=tl.float32)
    else:
        x_t = x
    return x, x_t
