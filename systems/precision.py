"""Mixed precision, the small experiments of handout §1.1.5.

``accumulation_table()`` runs the handout's four ways of adding 0.01 a thousand times (fp32 or fp16
accumulator, fp32 or fp16 addend, with or without an explicit cast) and reports each result's error against
the exact 10. ``autocast_dtypes(...)`` runs the handout's ``ToyModel`` under ``torch.autocast`` and reports
the dtype of its parameters, activations, loss and gradients. Both run on the CPU (bf16 or fp16 autocast)
and on a GPU; the handout's question is about fp16 on CUDA.

    python -m systems.precision            # both tables, on the GPU if there is one
"""

from __future__ import annotations

import argparse

import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

# (accumulator dtype, addend dtype, cast the addend to the accumulator's dtype before adding)
ACCUMULATIONS = [
    (torch.float32, torch.float32, False),
    (torch.float16, torch.float16, False),
    (torch.float32, torch.float16, False),
    (torch.float32, torch.float16, True),
]


def accumulate(acc_dtype: torch.dtype, value_dtype: torch.dtype, cast: bool, n: int = 1000, value: float = 0.01
               ) -> torch.Tensor:
    """``s += value`` ``n`` times, with ``s`` in ``acc_dtype`` and ``value`` a fresh ``value_dtype`` tensor."""
    s = torch.tensor(0, dtype=acc_dtype)
    for _ in range(n):
        x = torch.tensor(value, dtype=value_dtype)
        s += x.type(acc_dtype) if cast else x  # without a cast, in-place add promotes x to s's dtype anyway
    return s


def accumulation_table(n: int = 1000, value: float = 0.01) -> pd.DataFrame:
    """The four accumulation loops of §1.1.5 with their results and their errors against ``n * value``."""
    exact = n * value
    rows = []
    for acc, val, cast in ACCUMULATIONS:
        result = accumulate(acc, val, cast, n, value).item()
        rows.append({
            "accumulator": str(acc).removeprefix("torch."),
            "addend": str(val).removeprefix("torch.") + (" cast to " + str(acc).removeprefix("torch.") if cast else ""),
            "result": result,
            "abs_error": abs(result - exact),
            "rel_error": abs(result - exact) / exact,
        })
    return pd.DataFrame(rows)


class ToyModel(nn.Module):
    """The handout's model: Linear (no bias) -> ReLU -> LayerNorm -> Linear (no bias)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 10, bias=False)
        self.ln = nn.LayerNorm(10)
        self.fc2 = nn.Linear(10, out_features, bias=False)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.fc1(x))
        x = self.ln(x)
        return self.fc2(x)


def autocast_dtypes(dtype: torch.dtype = torch.float16, device: str | torch.device = "cpu",
                    in_features: int = 16, out_features: int = 4, batch: int = 8, seed: int = 0) -> pd.DataFrame:
    """The dtype of each quantity §1.1.5(a) asks about, for ToyModel (fp32 parameters) under autocast."""
    device = torch.device(device)
    torch.manual_seed(seed)
    model = ToyModel(in_features, out_features).to(device)
    x = torch.randn(batch, in_features, device=device)
    y = torch.randint(0, out_features, (batch,), device=device)
    seen: dict[str, torch.dtype] = {}
    hooks = [getattr(model, m).register_forward_hook(lambda _m, _i, out, m=m: seen.__setitem__(m, out.dtype))
             for m in ("fc1", "ln")]
    with torch.autocast(device_type=device.type, dtype=dtype):
        params = {p.dtype for p in model.parameters()}
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    loss.backward()
    for h in hooks:
        h.remove()
    grads = {p.grad.dtype for p in model.parameters()}
    rows = [("model parameters (inside autocast)", params), ("fc1 output", {seen["fc1"]}),
            ("LayerNorm output", {seen["ln"]}), ("logits (fc2 output)", {logits.dtype}),
            ("loss", {loss.dtype}), ("gradients", grads)]
    return pd.DataFrame(
        [{"quantity": q, "dtype": ", ".join(sorted(str(d).removeprefix("torch.") for d in ds))} for q, ds in rows]
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    args = p.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(accumulation_table().to_string(index=False))
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    print(f"\nToyModel under {args.dtype} autocast on {device}:")
    print(autocast_dtypes(dtype, device).to_string(index=False))


if __name__ == "__main__":
    main()


# ---- what the measurements say (chapter 03) -------------------------------------------------------------


