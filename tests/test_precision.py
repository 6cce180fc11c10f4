"""Mixed-precision experiments of §1.1.5 against independent NumPy arithmetic."""

import numpy as np
import pytest
import torch

from systems import precision


def numpy_sum(acc, val, n=1000):
    s = acc(0)
    x = val(0.01)
    for _ in range(n):
        s = acc(s + acc(x))  # NumPy adds in the wider type, then we round to the accumulator's
    return float(s)


def test_accumulation_loops_match_numpy():
    table = precision.accumulation_table()
    expected = [numpy_sum(np.float32, np.float32), numpy_sum(np.float16, np.float16),
                numpy_sum(np.float32, np.float16), numpy_sum(np.float32, np.float16)]
    assert table.result.tolist() == pytest.approx(expected, rel=0, abs=1e-6)
    assert table.abs_error.tolist() == pytest.approx([abs(e - 10) for e in expected], abs=1e-6)


def test_accumulation_errors_are_ordered_as_expected():
    err = precision.accumulation_table().abs_error.tolist()
    # fp32 throughout is best; an fp16 accumulator is worst; an fp16 addend costs its own rounding error
    assert err[0] < err[2] == err[3] < err[1]
    assert err[1] > 0.01


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_dtype_table_on_cpu(dtype):
    table = precision.autocast_dtypes(dtype, "cpu").set_index("quantity").dtype
    low = str(dtype).removeprefix("torch.")
    assert table["model parameters (inside autocast)"] == "float32"
    assert table["fc1 output"] == low
    assert table["logits (fc2 output)"] == low
    assert table["loss"] == "float32"
    assert table["gradients"] == "float32"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA autocast keeps LayerNorm in fp32")
def test_autocast_layernorm_is_fp32_on_cuda():
    table = precision.autocast_dtypes(torch.float16, "cuda").set_index("quantity").dtype
    assert table["LayerNorm output"] == "float32"
