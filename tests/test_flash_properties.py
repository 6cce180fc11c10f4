"""Property-based tests of both FlashAttention functions against the float64 oracle (Hypothesis).

Hypothesis draws the shape (3-D or 4-D, Nq and Nk independent, head dims the kernels accept), the memory
layout of every input (any order of the dimensions in memory, padded rows), the dtype (fp32, fp16; bf16 only
on a GPU: the interpreter refuses it) and causal or not, then compares O, L, dQ, dK and dV element-wise with
the float64 formula. A failure is shrunk to the smallest case that still fails and printed.
"""

from __future__ import annotations

import pytest
import torch
from flash_common import DEVICE, DTYPES, TOL, check_against_reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systems.attention.flash_pytorch import FlashAttentionPytorch
from systems.attention.flash_triton import FlashAttentionTriton

IMPLEMENTATIONS = {"pytorch": FlashAttentionPytorch.apply, "triton": FlashAttentionTriton.apply}
# The interpreter runs every Triton program instance in Python: fewer, smaller cases than for PyTorch.
EXAMPLES = {"pytorch": 200, "triton": 40} if DEVICE.type == "cpu" else {"pytorch": 200, "triton": 200}
MAX_SEQ = 40 if DEVICE.type == "cpu" else 300


@st.composite
def laid_out(draw, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A tensor of logical ``shape`` stored in a drawn order of dimensions, its rows maybe padded."""
    order = draw(st.permutations(range(len(shape))))
    pad = draw(st.sampled_from([0, 0, 3, 8]))
    stored = [shape[i] for i in order]
    stored[-1] += pad  # the innermost stored dim gets slack: every stride differs from the packed one
    x = torch.randn(stored, generator=torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1))))
    x = x[..., : shape[order[-1]]].permute(*[order.index(i) for i in range(len(shape))])
    assert tuple(x.shape) == shape
    return x.to(device=DEVICE, dtype=dtype).requires_grad_()


@st.composite
def attention_cases(draw):
    lead = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))  # (B,) or (B, H)
    n_q, n_k = draw(st.integers(1, MAX_SEQ)), draw(st.integers(1, MAX_SEQ))
    d = draw(st.sampled_from([16, 32, 64]))
    dtype = draw(st.sampled_from(DTYPES))
    q = draw(laid_out(lead + (n_q, d), dtype))
    k, v = (draw(laid_out(lead + (n_k, d), dtype)) for _ in "kv")
    return q, k, v, draw(st.booleans())


def property_test(name: str):
    @pytest.mark.parametrize("name", [name])
    @settings(max_examples=EXAMPLES[name], deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(case=attention_cases())
    def test(name, case):
        q, k, v, is_causal = case
        tol = TOL[q.dtype] if not (DEVICE.type == "cuda" and name == "triton") else max(TOL[q.dtype], 1e-2)
        check_against_reference(IMPLEMENTATIONS[name], q, k, v, is_causal, tol)

    return test


test_flash_pytorch_matches_float64 = property_test("pytorch")
test_flash_triton_matches_float64 = property_test("triton")
