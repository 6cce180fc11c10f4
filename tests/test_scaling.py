"""The parallelism cost model (systems.scaling.parallel) and the step simulation (systems.scaling.simulate)
against values worked out by hand here, and the closed-form device limits against a search over the costs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from systems.model import preset
from systems.scaling.parallel import (
    FFN, NETWORKS, Network, TorusMesh, best_mesh, data_parallel, devices_to_fit, fsdp, fsdp_tp, half_sharded_memory,
    largest_devices, memory_per_device, tensor_parallel,
)
from systems.scaling.simulate import STRATEGIES, Cluster, Layer, Link, model_layers, simulate_step

TOY = Network("toy", flops=100.0, bandwidth=10.0, source="by hand")
SMALL = FFN(batch=8, d_model=4, d_ff=16)  # weights 3·4·16·2 = 384 bytes; a (B, D) activation 8·4·2 = 64 bytes


def test_costs_of_each_strategy_by_hand():
    dp = data_parallel(SMALL, 4, TOY)
    assert (dp.forward_flops, dp.backward_flops) == (6 * 8 * 4 * 16 / 4, 12 * 8 * 4 * 16 / 4)  # 768, 1536
    assert dp.forward_comm_s == 0 and dp.backward_comm_s == pytest.approx(2 * 3 / 4 * 384 / 10)  # 57.6 s
    assert dp.backward_compute_s == pytest.approx(15.36) and dp.backward_bound == "communication"
    f = fsdp(SMALL, 4, TOY)
    assert f.forward_comm_s == pytest.approx(28.8) and f.backward_comm_s == pytest.approx(57.6)
    tp = tensor_parallel(SMALL, 4, TOY)
    assert tp.forward_comm_s == tp.backward_comm_s == pytest.approx(1.5 * 64 / 10)  # 9.6 s
    both = fsdp_tp(SMALL, 2, 2, TOY)
    gather = 1 / 2 * (384 / 2) / 10  # each TP slice (192 bytes) gathered over 2 FSDP ranks: 9.6 s
    reduce = 2 * 1 / 2 * (4 * 4 * 2) / 10  # y of the half batch (4, 4) all-reduced over 2 TP ranks: 3.2 s
    assert both.forward_comm_s == pytest.approx(max(gather, reduce))
    assert both.backward_comm_s == pytest.approx(max(2 * gather, reduce))
    assert fsdp_tp(SMALL, 2, 2, TOY, overlap=False).forward_comm_s == pytest.approx(gather + reduce)
    assert both.forward_flops == pytest.approx(6 * 8 * 4 * 16 / 4)


def searched_limit(costs, pass_: str) -> int:
    """The largest n whose ``pass_`` is compute-bound, trying n = 1, 2, ... (the costs are monotone in n)."""
    n = 1
    while getattr(costs(n + 1), f"{pass_}_bound") == "compute":
        n += 1
    return n


@pytest.mark.parametrize("ffn", [FFN(batch=512, d_model=1024, d_ff=4096), FFN(batch=3001, d_model=64, d_ff=701)])
@pytest.mark.parametrize("net", [TOY, Network("fast link", 1e15, 4e11, "made up")], ids=["toy", "fast"])
def test_closed_form_limits_match_a_search_over_the_costs(ffn, net):
    for strategy, costs in (("DP", data_parallel), ("FSDP", fsdp), ("TP", tensor_parallel)):
        for pass_ in ("forward", "backward"):
            limit = largest_devices(strategy, ffn, net, pass_)
            if math.isinf(limit):
                assert costs(ffn, 10**6, net).forward_comm_s == 0
                continue
            assert searched_limit(lambda n: costs(ffn, n, net), pass_) == math.floor(limit), (strategy, pass_)
    # FSDP × TP overlapped: the axes' conditions are independent, so the best integer mesh is their product
    a, b = best_mesh(ffn, TOY)
    assert fsdp_tp(ffn, math.floor(a), math.floor(b), TOY).forward_bound == "compute"
    assert fsdp_tp(ffn, math.floor(a) + 1, math.floor(b), TOY).forward_bound == "communication"
    assert fsdp_tp(ffn, math.floor(a), math.floor(b) + 1, TOY).forward_bound == "communication"
    assert largest_devices("FSDP × TP", ffn, TOY) == pytest.approx(a * b)


def test_no_overlap_optimum_matches_a_numerical_search():
    ffn, net = FFN(batch=65536, d_model=2048, d_ff=8192), NETWORKS["H100 node (NVLink)"]  # optimum near (18, 3.4)

    def slack(a, b):  # compute time minus communication time of the forward, real-valued a and b
        c = fsdp_tp(ffn, a, b, net, overlap=False)
        return c.forward_compute_s - c.forward_comm_s

    best = 0.0
    for a in np.linspace(1, 200, 4000):
        lo, hi = 1.0, 1e6  # the largest b with non-negative slack: slack falls as b grows
        if slack(a, lo) < 0:
            continue
        for _ in range(80):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if slack(a, mid) >= 0 else (lo, mid)
        best = max(best, a * lo)
    assert best == pytest.approx(largest_devices("FSDP × TP (no overlap)", ffn, net), rel=1e-3)
    a, b = best_mesh(ffn, net, overlap=False)
    assert slack(a, b) == pytest.approx(0, abs=1e-12)
    # and the shared network costs a factor of about four against overlapped axes
    ratio = largest_devices("FSDP × TP", ffn, net) / largest_devices("FSDP × TP (no overlap)", ffn, net)
    assert 3 < ratio < 4.5


def test_no_overlap_mesh_keeps_both_axes_at_least_one_device():
    for ffn in (FFN(batch=256, d_model=2048, d_ff=8192), FFN(batch=2**24, d_model=64, d_ff=64)):
        net = NETWORKS["H100 nodes (InfiniBand)"]
        a, b = best_mesh(ffn, net, overlap=False)
        assert min(a, b) == 1
        c = fsdp_tp(ffn, a, b, net, overlap=False)
        assert c.forward_comm_s == pytest.approx(c.forward_compute_s)  # the whole budget is used
        # and sharing the network never beats overlapping the axes
        assert largest_devices("FSDP × TP (no overlap)", ffn, net) <= largest_devices("FSDP × TP", ffn, net)


def test_unknown_pass_is_refused():
    with pytest.raises(ValueError, match="no closed form"):
        largest_devices("FSDP × TP", SMALL, TOY, "backward")


def test_the_2025_problem_xxl_on_tpu_v5p():
    d, f, blocks = 16384, 53248, 126
    params = blocks * 2 * d * f
    assert params == 219_848_638_464
    state = memory_per_device(params, "DP", 1)
    assert state["weights"] + state["gradients"] + state["optimizer"] == 16 * params == 3_517_578_215_424
    crit = TorusMesh(x=16, y=4, m_x=2, m_y=1).critical_batch(NETWORKS["TPU v5p (ICI)"], f)
    alpha = 4.6e14 / (2 * 9e10)  # 2555.6 FLOPs per byte
    assert crit["global_batch"] == pytest.approx(16 * alpha / 2)  # 20,444 tokens
    assert crit["per_device_batch"] == pytest.approx(16 * alpha / 2 / 64)  # 319.4
    assert crit["largest_tp"] == pytest.approx(f / alpha) and crit["tp_ok"]


def test_memory_per_device_by_hand():
    p = 1000
    assert memory_per_device(p, "DP", 4, 500)["total"] == 16_000 + 500
    assert memory_per_device(p, "ZeRO-1", 4)["total"] == 4000 + 4000 + 8000 / 4
    assert memory_per_device(p, "FSDP", 4, 500)["total"] == 16_000 / 4 + 500
    both = memory_per_device(p, "FSDP × TP", 8, 800, tp=2)
    assert both["activations"] == 400 and both["total"] == 16_000 / 8 + 400
    with pytest.raises(ValueError, match="divisible"):
        memory_per_device(p, "FSDP × TP", 6, tp=4)
    with pytest.raises(ValueError, match="strategy"):
        memory_per_device(p, "PP", 4)


def test_half_sharded_memory_and_devices_to_fit():
    assert half_sharded_memory(100, 20, 5) == (100 + 10) / 5 + 10
    n = devices_to_fit(100, 20, 30)  # (110)/(30 - 10) = 5.5 devices: 6
    assert n == 6 and half_sharded_memory(100, 20, 6) <= 30 < half_sharded_memory(100, 20, 5)
    with pytest.raises(ValueError, match="alone exceeds"):
        devices_to_fit(100, 80, 30)


# ---- the step simulation --------------------------------------------------------------------------------

FREE = Link(bandwidth=1e30, latency=0.0)


def test_ring_collectives_by_hand():
    one_node = Cluster(Link(bandwidth=10.0, latency=0.5), FREE, node_size=8)
    assert one_node.all_reduce(80, 4) == pytest.approx(2 * 3 * (0.5 + 20 / 10))  # 2(N-1) steps of S/N
    assert one_node.all_gather(80, 4) == pytest.approx(3 * (0.5 + 2))
    two_nodes = Cluster(Link(10.0, 0.5), Link(1.0, 2.0), node_size=4)
    # 8 devices: inside the node 4-rings over S/4 chunks, across the 2 nodes rings over S/8 chunks
    assert two_nodes.all_reduce(80, 8) == pytest.approx(2 * 3 * (0.5 + 20 / 10) + 2 * 1 * (2.0 + 10 / 1))
    assert two_nodes.all_gather(80, 8) == pytest.approx(1 * (2.0 + 10 / 1) + 3 * (0.5 + 20 / 10))
    with pytest.raises(ValueError, match="whole nodes"):
        two_nodes.all_reduce(80, 6)
    # from a two-device fit: both readings of o reproduce o + S/w on two devices, and part ways beyond
    per_call, per_step = (Cluster.from_two_device_fit(3e-5, 2e11, 5e10, latency) for latency in ("call", "step"))
    for c in (per_call, per_step):
        assert c.all_reduce(1e9, 2) == pytest.approx(3e-5 + 1e9 / 2e11)
    assert per_call.all_reduce(0, 16) == pytest.approx(3e-5)
    assert per_step.all_reduce(0, 16) == pytest.approx((2 * 7 + 2 * 1) * 3e-5 / 2)
    assert per_call.all_gather(0, 64) == pytest.approx(3e-5) and per_step.all_gather(0, 64) == pytest.approx(14 * 1.5e-5)
    with pytest.raises(ValueError, match="latency"):
        Cluster.from_two_device_fit(3e-5, 2e11, 5e10, "hop")


LAYERS = [Layer("a", 1.0, 2.0, (10, 30)), Layer("b", 1.0, 2.0, (20,))]  # 60 elements, backward b then a


def test_step_simulation_by_hand():
    net = Cluster(Link(bandwidth=4.0, latency=0.0), FREE)  # all-reduce on 2 devices: S / 4 seconds
    compute = 6.0
    naive = simulate_step(LAYERS, 2, net, "naive", grad_bytes=1)
    assert naive["step"] == pytest.approx(compute + 60 / 4) and naive["exposed"] == pytest.approx(15)
    assert simulate_step(LAYERS, 2, net, "flat", grad_bytes=1)["step"] == pytest.approx(compute + 15)
    # overlapped: b's gradient (20 → 5 s) starts at 4 s (after b's backward) and runs past a's backward; a's
    # two (30 → 7.5 s, 10 → 2.5 s) are ready at 6 s and follow it: 4 + 5 + 7.5 + 2.5 = 19 s
    assert simulate_step(LAYERS, 2, net, "overlap", grad_bytes=1)["step"] == pytest.approx(19)
    # buckets of 40 bytes: [20] is closed when 30 arrives (ready at 4 s), then [30, 10] at 6 s: 4 + 5 + 10
    assert simulate_step(LAYERS, 2, net, "bucketed", grad_bytes=1, bucket_bytes=40)["step"] == pytest.approx(19)
    # one device, or free communication: the step is its compute
    for strategy in STRATEGIES:
        assert simulate_step(LAYERS, 1, net, strategy)["step"] == compute
        assert simulate_step(LAYERS, 8, Cluster(FREE, FREE), strategy)["step"] == pytest.approx(compute)


def test_fsdp_simulation_by_hand():
    net = Cluster(Link(bandwidth=4.0, latency=0.0), FREE)  # on 2 devices a gather of S bytes takes S/8 s
    r = simulate_step(LAYERS, 2, net, "fsdp", grad_bytes=1, gather_bytes=1)
    # forward: gathers of a (40 → 5 s) and b (20 → 2.5 s) issued at 0; a runs 5..6, b 7.5..8.5
    # backward: gathers of b (2.5 s) and a (5 s) queued at 8.5: b ready 11, runs 11..13; its reduce-scatter
    # (2.5 s) waits for a's gather, 16..18.5; a runs 16..18, its reduce-scatter (5 s) 18.5..23.5
    assert r["step"] == pytest.approx(23.5) and r["compute"] == 6


def test_model_layers_share_out_the_measured_time():
    cfg = preset("small", context_length=256)
    layers = model_layers(cfg, forward_s=0.3, backward_s=0.6)
    assert len(layers) == cfg.num_layers + 2
    assert sum(x.forward_s for x in layers) == pytest.approx(0.3)
    assert sum(x.backward_s for x in layers) == pytest.approx(0.6)
    from systems.model import parameter_count
    assert sum(sum(x.params) for x in layers) == parameter_count(cfg)


def test_more_overlap_never_hurts_at_scale():
    cfg = preset("xl", context_length=512)
    layers = model_layers(cfg, 0.24, 0.45)
    net = Cluster(Link(3e11, 1e-5), Link(5e10, 1e-5))
    for n in (2, 8, 64, 512):
        steps = {s: simulate_step(layers, n, net, s)["step"] for s in ("naive", "flat", "bucketed")}
        assert steps["bucketed"] <= steps["flat"] <= steps["naive"]


# ---- the 2026 leaderboard's step planned for two GPUs ---------------------------------------------------------

def test_the_leaderboard_plan_holds_what_fsdp_holds():
    from systems.scaling.leaderboard import block_parameters, memory_per_gpu, root_parameters

    cfg = preset("leaderboard-2026")
    # independent arithmetic: 2·V·d + d outside the blocks, 34 blocks of 4d² + 3·d·d_ff + 2d
    assert root_parameters(cfg) == 2 * 151_936 * 4096 + 4096
    assert block_parameters(cfg) == 4 * 4096**2 + 3 * 4096 * 11_008 + 2 * 4096
    fused = memory_per_gpu(cfg, 2, 2, recompute=True, fused_loss=True, block_bytes=6 * 2**30)
    assert fused["state"] / 2**30 == pytest.approx(16 * 8.13e9 / 2 / 2**30, rel=2e-3)  # ≈ 60.6 GiB
    assert fused["boundaries"] == 2 * 32_768 * 4096 * 34 and fused["loss"] == 2**30
    assert fused["total"] == pytest.approx(sum(v for k, v in fused.items() if k != "total"))
    unfused = memory_per_gpu(cfg, 2, 2, recompute=False, fused_loss=False, block_bytes=6 * 2**30)
    assert unfused["loss"] == 10 * 32_768 * 151_936 and unfused["blocks"] == 34 * 6 * 2**30
    with pytest.raises(ValueError, match="does not split"):
        memory_per_gpu(cfg, 2, 3, recompute=True, fused_loss=True, block_bytes=0)
    from systems.fused import cross_entropy
    from systems.scaling import leaderboard

    assert leaderboard.CHUNK_BYTES == cross_entropy.CHUNK_BYTES  # the plan's chunk is the kernel's


def test_the_leaderboard_step_predicted_from_its_parts():
    from systems.model import parameter_count
    from systems.scaling.leaderboard import MeasuredParts, predicted_step

    cfg = preset("tiny", num_layers=3)
    parts = MeasuredParts(block_ms=30.0, forward_share=0.25, head_ms=12.0, adamw_ms_per_param=1e-6)
    free = Cluster(Link(1e30, 0.0), Link(1e30, 0.0))  # communication that costs nothing
    one = predicted_step(cfg, 1, parts, free)
    assert one["compute"] == pytest.approx(3 * 0.030 + 0.012) and one["exposed"] == pytest.approx(0.0)
    assert one["step"] == pytest.approx(one["compute"] + 1e-9 * parameter_count(cfg))
    slow = Cluster(Link(1e6, 1e-3), Link(1e6, 1e-3))  # a slow link: the gathers show
    two = predicted_step(cfg, 2, parts, slow)
    assert two["exposed"] > 0 and two["optimizer"] == pytest.approx(one["optimizer"] / 2)
