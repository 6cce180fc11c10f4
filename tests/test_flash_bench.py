"""The FlashAttention sweep's post-processing: ratios against the anchors and the slower-shape regimes."""

import pandas as pd

from systems.bench import flash


def sweep_rows(times: dict[str, dict[int, float]], d: int = 64, mode: str = "fwd_bwd") -> list[dict]:
    return [{"dtype": "bf16", "d": d, "n_q": n, "n_k": n, "causal": True, "impl": impl, "mode": mode, "ms": ms}
            for impl, by_n in times.items() for n, ms in by_n.items()]


def test_slower_shapes_separates_fixed_cost_from_kernel_time():
    ours = {128: 1.0, 1024: 1.2, 4096: 1.4, 16384: 4.0, 65536: 9.0}
    anchor = {128: 0.2, 1024: 0.3, 4096: 2.0, 16384: 2.0, 65536: 10.0}
    runs = pd.DataFrame(sweep_rows({"triton": ours, "sdpa_flash": anchor})
                        + sweep_rows({"triton": {128: 1.0, 2048: 3.0}, "sdpa_flash": {128: 0.1, 2048: 0.2}}, d=128))
    slow = flash.slower_shapes(flash.ratios(runs))
    got = {(r.d, r.n_q): r.regime for r in slow.itertuples()}
    # 4096 and 65536 (d=64) are faster than the anchor; 128 is below min_n
    assert got == {(64, 1024): "fixed cost", (64, 16384): "kernel", (128, 2048): "kernel"}


def test_slower_shapes_without_the_anchor_is_empty():
    runs = pd.DataFrame(sweep_rows({"triton": {128: 1.0, 2048: 5.0}, "naive": {128: 2.0, 2048: 1.0}}))
    assert flash.slower_shapes(flash.ratios(runs)).empty
