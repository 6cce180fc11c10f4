"""Data-parallel wrappers (systems.ddp): every variant trains to the weights of single-process training.

The toy model and training loop are ``systems.ddp.check`` (frozen, tied, float64, never-used and
data-dependent parameters). Data parallel over shards of a batch must give, element by element, the
weights of one process training on the whole batch with AdamW. All multi-process scenarios run in one
gloo launch per world size (2 and 3 ranks) to keep the suite fast; ``launch``'s timeout turns a hang
into a failure.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from systems.ddp import WRAPPERS, cs336, get_wrapper
from systems.ddp.check import Toy, batch, loss_of, run_ranks, shard, train

# name -> (variant, options, accumulate)
SCENARIOS = {
    "naive": ("naive", {}, False),
    "flat": ("flat", {}, False),
    "overlap": ("overlap", {}, False),
    "bucketed_one": ("bucketed", {"bucket_size_mb": 1000}, False),  # one bucket per dtype
    "bucketed_two": ("bucketed", {"bucket_size_mb": 0.002}, False),  # ~2 KiB: a few buckets
    "bucketed_many": ("bucketed", {"bucket_size_mb": 1e-6}, False),  # one parameter per bucket
    "torch": ("torch", {"find_unused_parameters": True}, False),
    **{f"{v}_accumulate": (v, {"bucket_size_mb": 0.002}, True) for v in ("naive", "flat", "overlap", "bucketed")},
}


@pytest.fixture(scope="module")
def runs() -> dict:
    specs = {name: (v, acc, opt) for name, (v, opt, acc) in SCENARIOS.items()}
    return {world: run_ranks(world, specs) for world in (2, 3)}


@pytest.fixture(scope="module")
def reference() -> dict:
    return {acc: train(0, 1, None, accumulate=acc) for acc in (False, True)}


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_matches_single_process(runs, reference, world, name):
    ranks = runs[world]
    for r in ranks:
        assert_same(r[name]["start"], reference[False]["start"])  # rank 0's parameters and buffers everywhere
        assert_same(r[name]["final"], reference[SCENARIOS[name][2]]["final"])


@pytest.mark.distributed
def test_bucket_counts(runs):
    n_trainable = sum(p.requires_grad for p in Toy().parameters())
    counts = {name: runs[2][0][name]["units"] for name in ("bucketed_one", "bucketed_two", "bucketed_many")}
    assert counts["bucketed_one"] == 2  # float32 and float64 cannot share a flat buffer
    assert 2 < counts["bucketed_two"] < n_trainable
    assert counts["bucketed_many"] == n_trainable


def test_reference_uses_every_case():
    """The scenarios exercise what they claim: the branch is used on one shard, on none, and `unused` never."""
    model = Toy()
    for step, used in [(0, True), (2, False)]:
        model.zero_grad(set_to_none=True)
        x, y = batch(step)
        loss_of(model, shard(x, 1, 2), shard(y, 1, 2)).backward()
        assert (model.branch.weight.grad is not None) is False
        model.zero_grad(set_to_none=True)
        loss_of(model, shard(x, 0, 2), shard(y, 0, 2)).backward()
        assert (model.branch.weight.grad is not None) is used
    assert model.unused.weight.grad is None and model.gain64.grad.dtype == torch.float64


@pytest.mark.parametrize("variant", ["naive", "flat", "overlap", "bucketed"])
@pytest.mark.parametrize("accumulate", [False, True])
def test_world_size_one(reference, variant, accumulate):
    got = train(0, 1, variant, accumulate, {"bucket_size_mb": 0.002})
    assert_same(got["final"], reference[accumulate]["final"])


@pytest.mark.parametrize("variant", ["naive", "flat", "overlap", "bucketed"])
def test_forward_before_synchronisation_is_an_error(variant):
    model = get_wrapper(variant)(Toy())
    x, y = batch(0)
    loss_of(model, x, y).backward()
    with pytest.raises(RuntimeError, match="finish_gradient_synchronization"):
        model(x)
    model.finish_gradient_synchronization()
    model(x)  # fine again


@pytest.mark.parametrize("variant", ["naive", "flat", "overlap", "bucketed"])
def test_dropped_wrapper_frees_model_and_gradients(variant):
    # A benchmark builds one wrapped model after another in the same process; each must be gone, with its
    # gradients, once the last reference is: hooks on the parameters must not keep the wrapper alive.
    model = get_wrapper(variant)(Toy())
    x, y = batch(0)
    loss_of(model, x, y).backward()
    model.finish_gradient_synchronization()
    wrapper, module, grad = weakref.ref(model), weakref.ref(model.module), weakref.ref(model.params[0].grad)
    del model
    gc.collect()
    assert wrapper() is None and module() is None and grad() is None


@pytest.mark.parametrize("variant", ["overlap", "bucketed"])
def test_second_backward_before_synchronisation_is_an_error(variant):
    model = get_wrapper(variant)(Toy())
    x, y = batch(0)
    loss = loss_of(model, x, y)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second gradient"):
        loss.backward()


def test_registry_and_adapters():
    assert set(WRAPPERS) == {"naive", "flat", "overlap", "bucketed", "torch"}
    with pytest.raises(ValueError, match="unknown DDP variant"):
        get_wrapper("nope")
    assert type(cs336.get_ddp_individual_parameters(Toy())).__name__ == "OverlapDDP"
    import adapters  # both editions' names: the 2026 ones are the per-parameter wrapper renamed

    ddp26 = adapters.get_ddp(Toy())
    assert type(ddp26).__name__ == "OverlapDDP" and isinstance(ddp26.module, torch.nn.Module)
    loss_of(ddp26, *batch(0)).backward()
    adapters.ddp_on_after_backward(ddp26, None)
    assert len(ddp26.comm_ms) == 1
    ddp = cs336.get_ddp_bucketed(Toy(), bucket_size_mb=1e-6)
    assert len(ddp.units) == sum(p.requires_grad for p in ddp.parameters())
    x, y = batch(0)
    cs336.ddp_bucketed_on_train_batch_start(ddp, None)
    loss_of(ddp, x, y).backward()
    cs336.ddp_bucketed_on_after_backward(ddp, None)
    assert len(ddp.comm_ms) == 1


@pytest.mark.distributed
def test_allreduce_benchmark_smoke():
    from systems.bench.allreduce import benchmark

    df = benchmark("gloo", world_sizes=[2], sizes_mb=[0.01, 0.1], warmup=1, iters=2, timeout_s=60)
    assert list(df.columns) == ["backend", "device", "world_size", "size_mb", "status", "time_ms", "median_ms",
                                "fastest_rank_ms", "algbw_GBps", "busbw_GBps", "times_ms"]
    assert (df.status == "ok").all() and len(df) == 2
    assert (df.time_ms >= df.fastest_rank_ms).all() and (df.time_ms > 0).all()
    assert all(len(t) == 2 and len(t[0]) == 2 for t in df.times_ms)  # every rank's every call
    # busbw = algbw · 2(n-1)/n, which is algbw itself at two ranks
    assert df.busbw_GBps.tolist() == pytest.approx(df.algbw_GBps.tolist())
    df = benchmark("nccl", world_sizes=[64], sizes_mb=[1], timeout_s=10)
    assert df.status.tolist() == ["unavailable: needs 64 GPUs"]
    # a size no rank can hold (a petabyte) is a row that says so, and the sweep goes on to the next size
    df = benchmark("gloo", world_sizes=[2], sizes_mb=[2**30, 0.01], warmup=0, iters=1, timeout_s=60)
    assert df.status.tolist() == ["OOM", "ok"] and df.time_ms.isna().tolist() == [True, False]


def test_allreduce_findings_speak_only_of_what_ran():
    import pandas as pd

    from systems.chapters.allreduce import findings

    def row(backend, world, mb, status="ok", ms=None):
        return {"backend": backend, "world_size": world, "size_mb": mb, "status": status, "time_ms": ms,
                "busbw_GBps": None if ms is None else mb / ms}

    df = pd.DataFrame([row("gloo", 2, 1, ms=1.0), row("gloo", 2, 100, ms=50.0), row("gloo", 2, 1000, "OOM"),
                       row("nccl", 2, 1, ms=0.1), row("nccl", 2, 100, ms=0.5), row("nccl", 2, 1000, ms=4.0),
                       row("nccl", 4, 1, "unavailable: needs 4 GPUs"), row("nccl", 4, 100, "unavailable: needs 4 GPUs"),
                       row("nccl", 4, 1000, "unavailable: needs 4 GPUs")])
    out = findings(df)
    # the largest size is the largest that ran; gloo did not run it at 2 ranks, so only NCCL is compared there
    assert out["big_mb"] == 1000 and out["nccl_big_ms"] == 4.0 and "gloo_big_ms" not in out
    assert "nccl_speedup" not in out
    assert out["missing"] == "gloo × 2 at 1000 MiB: OOM; nccl × 4: unavailable: needs 4 GPUs"


def test_kernel_intervals_and_overlap():
    from systems.bench.ddp import intervals, overlap_ms

    def kernel(name, ts, dur, stream):
        return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"stream": stream}}

    trace = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 5000},  # CPU side: ignored on a GPU trace
        kernel("sm90_xmma_gemm", 1000, 2000, 7),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 2500, 2000, 21),  # 500 µs under the gemm
        kernel("elementwise_kernel", 4000, 1000, 7),  # another 500 µs under the all-reduce
    ]}
    df = intervals(trace)
    assert df.kind.tolist() == ["compute", "communication", "compute"]
    assert df.lane.tolist() == ["stream 7", "stream 21", "stream 7"]
    assert df.start_ms.tolist() == pytest.approx([0.0, 1.5, 3.0])
    assert overlap_ms(df) == pytest.approx(1.0)
