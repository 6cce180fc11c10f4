"""Profile readers on synthetic inputs: nsys SQLite reports, nsys stats CSVs, CUDA memory snapshots."""

import json
import sqlite3

import matplotlib
import pandas as pd
import pytest
import torch

from systems import device
from systems.profiling import memory, nsys, target

matplotlib.use("Agg")

US = 1_000  # ns


def two_step_report(tmp_path):
    """measured > forward > attention_softmax, and a backward; kernels start 3 µs after their launch."""
    ranges = [
        {"name": "cfg:small/128/train", "start": 0, "end": 1000 * US},
        {"name": "warmup", "start": 1 * US, "end": 99 * US},
        {"name": "forward", "start": 2 * US, "end": 50 * US},
        {"name": "measured", "start": 100 * US, "end": 900 * US},
        {"name": "forward", "start": 110 * US, "end": 200 * US},
        {"name": "attention", "start": 120 * US, "end": 180 * US},
        {"name": "attention_softmax", "start": 130 * US, "end": 140 * US},
        {"name": "backward", "start": 300 * US, "end": 400 * US},
    ]
    kernels = [
        ("ampere_sgemm_128x64_tn", 10 * US, 5),     # warmup forward
        ("ampere_sgemm_128x64_tn", 115 * US, 20),   # measured forward, outside attention
        ("cunn_SoftMaxForward<float>", 135 * US, 4),  # measured forward, attention_softmax
        ("ampere_sgemm_128x64_tn", 150 * US, 10),   # measured forward, attention
        # launched at 199 µs inside forward, runs after the range ended on the CPU: still forward
        ("void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>", 199 * US, 7),
        ("sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x32", 310 * US, 40),  # backward
        ("cunn_SoftMaxBackward<float>", 320 * US, 6),  # backward
    ]
    rows = [{"name": n, "launch": t, "start": t + 3 * US, "end": t + 3 * US + d * US} for n, t, d in kernels]
    return nsys.load_trace(nsys.write_sqlite(tmp_path / "rep.sqlite", rows, ranges))


def test_load_trace_reads_kernels_and_ranges(tmp_path):
    trace = two_step_report(tmp_path)
    assert len(trace.kernels) == 7 and len(trace.ranges) == 8
    assert set(trace.ranges.name) >= {"measured", "forward", "attention_softmax", "cfg:small/128/train"}
    assert trace.kernels.duration_ns.sum() == (5 + 20 + 4 + 10 + 7 + 40 + 6) * US
    assert (trace.kernels.start - trace.kernels.launch == 3 * US).all()


def test_kernels_are_attributed_by_launch_to_the_innermost_range_of_each_level(tmp_path):
    trace = two_step_report(tmp_path)
    k = nsys.label_kernels(trace.kernels, trace.ranges)
    assert (k.config == "cfg:small/128/train").all()
    assert list(k.stage) == ["warmup"] + ["measured"] * 6
    assert list(k.phase) == ["forward"] * 5 + ["backward"] * 2
    assert list(k.op.fillna("-")) == ["-", "-", "attention_softmax", "-", "-", "-", "-"]
    assert list(k.block.fillna("-")) == ["-", "-", "attention", "attention", "-", "-", "-"]
    fwd = k[(k.stage == "measured") & (k.phase == "forward")]
    assert fwd.duration_ns.sum() == (20 + 4 + 10 + 7) * US


def test_kernel_summary_totals_counts_and_shares(tmp_path):
    k = nsys.label_kernels(*vars(two_step_report(tmp_path)).values())
    s = nsys.kernel_summary(k[k.stage == "measured"]).set_index("name")
    assert s.loc["ampere_sgemm_128x64_tn", "total_ms"] == pytest.approx(0.030)
    assert s.loc["ampere_sgemm_128x64_tn", "count"] == 2
    assert s.share.sum() == pytest.approx(1.0)
    assert s.index[0].startswith("sm90_xmma_gemm")  # sorted by time
    by_cat = nsys.kernel_summary(k[k.stage == "measured"], by="category", per=2).set_index("category")
    assert by_cat.loc["matmul", "total_ms"] == pytest.approx((20 + 10 + 40) / 1e3 / 2)
    assert by_cat.loc["softmax", "count"] == 1  # two softmax kernels over two passes


def test_range_times_project_ranges_onto_the_gpu(tmp_path):
    trace = two_step_report(tmp_path)
    r = nsys.label_ranges(nsys.range_times(trace.kernels, trace.ranges))
    fwd = r[(r.name == "forward") & (r.stage == "measured")].iloc[0]
    assert fwd.cpu_ms == pytest.approx(0.090)
    assert fwd.kernels == 4
    # first kernel starts at 118 µs, last (launched at 199) ends at 199 + 3 + 7 = 209 µs
    assert fwd.gpu_ms == pytest.approx(0.091)
    assert fwd.kernel_ms == pytest.approx(0.041)
    assert r.set_index("name").loc["attention_softmax", "op"] == "attention_softmax"


@pytest.mark.parametrize("name,category", [
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1", "matmul"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "matmul"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4>(Params)", "matmul"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>", "softmax"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>", "softmax"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>",
     "reduction"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", "elementwise"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 5, 64, 64>", "elementwise"),
    ("void at::native::multi_tensor_apply_kernel<at::native::TensorListMetadata<4>, FusedAdamMathFunctor>",
     "optimizer"),
    ("void at::native::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>", "elementwise"),
    ("void embedding_backward_feature_kernel<float, float, long>", "other"),
])
def test_classify(name, category):
    assert nsys.classify(name) == category


def test_read_stats_csv_normalises_columns(tmp_path):
    path = tmp_path / "x_cuda_gpu_kern_sum.csv"
    path.write_text('Time (%),Total Time (ns),Instances,Avg (ns),Name\n'
                    '75.0,3000,3,1000.0,"ampere_sgemm_128x64_tn"\n25.0,1000,1,1000.0,"cunn_SoftMaxForward"\n')
    df = nsys.read_stats_csv(path)
    assert list(df.columns) == ["time_pct", "total_time_ns", "instances", "avg_ns", "name"]
    assert df.total_time_ns.sum() == 4000


def test_find_nsys_reports_how_to_fix_a_missing_binary(monkeypatch, tmp_path):
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(nsys.NsysNotFound, match="NSYS"):
        nsys.find_nsys()
    fake = tmp_path / "nsys"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert nsys.find_nsys() == str(fake)
    (tmp_path / "host-linux-x64").mkdir()
    (tmp_path / "host-linux-x64" / "QdstrmImporter").write_text("")
    monkeypatch.delenv("QDSTRM_IMPORTER", raising=False)
    bin_dir = tmp_path / "target-linux-x64"
    bin_dir.mkdir()
    assert nsys.find_qdstrm_importer(str(bin_dir / "nsys")).endswith("host-linux-x64/QdstrmImporter")


def test_target_cli_writes_status_rows(tmp_path):
    out = tmp_path / "status.json"
    code = target.main(["--size", "tiny", "--context-length", "8", "--mode", "train", "--warmup", "1", "--steps", "1",
                        "--json", str(out)])
    assert code == 0
    rows = json.loads(out.read_text())["results"]
    assert rows[0]["config"] == "cfg:tiny/8/train" and rows[0]["status"] == "ok"


# --- memory snapshots ----------------------------------------------------------------------------------------

PKG = memory.PACKAGE_DIR
MODEL_FRAME = {"filename": f"{PKG}/model.py", "line": 105, "name": "forward"}
TORCH_FRAME = {"filename": "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", "line": 125,
               "name": "forward"}
OPTIM_FRAME = {"filename": "/venv/lib/python3.12/site-packages/torch/optim/adamw.py", "line": 300, "name": "step"}
E2E_FRAME = {"filename": f"{PKG}/bench/e2e.py", "line": 99, "name": "_timed"}


def synthetic_snapshot():
    """Weights (pre-existing, live at the end) 1000 B; a pre-existing buffer of 300 B freed in the trace;
    a forward that allocates 100 and 50; a backward that frees the 100 and allocates 200; an optimizer
    temporary of 10."""
    ev = lambda action, addr, size, frames: {"action": action, "addr": addr, "size": size, "frames": frames}  # noqa: E731
    fwd = [TORCH_FRAME, MODEL_FRAME, E2E_FRAME]
    trace = [
        ev("alloc", 0xA, 100, fwd),
        ev("alloc", 0xB, 50, [MODEL_FRAME, E2E_FRAME]),
        ev("free_requested", 0xA, 100, []),
        ev("free_completed", 0xA, 100, []),
        ev("alloc", 0xC, 200, []),
        ev("free_completed", 0xF, 300, []),  # allocated before recording: part of the baseline
        ev("segment_alloc", 0x100, 4096, []),  # segment events are not allocations
        ev("alloc", 0xD, 10, [OPTIM_FRAME, E2E_FRAME]),
        ev("free_completed", 0xD, 10, [OPTIM_FRAME, E2E_FRAME]),
    ]
    segments = [
        {"device": 0, "address": 0x1000, "total_size": 2048, "blocks": [
            {"size": 512, "requested_size": 500, "state": "active_allocated", "frames": []},
            {"size": 512, "requested_size": 512, "state": "inactive", "frames": []},
            {"size": 1024, "requested_size": 500, "state": "active_allocated", "frames": []},
        ]},
        # 0xB and 0xC are live at the end and were allocated in the trace: not baseline
        {"device": 0, "address": 0xB, "total_size": 50, "blocks": [
            {"size": 50, "requested_size": 50, "state": "active_allocated", "frames": []}]},
        {"device": 0, "address": 0xC, "total_size": 200, "blocks": [
            {"size": 200, "requested_size": 200, "state": "active_allocated", "frames": []}]},
    ]
    return {"segments": segments, "device_traces": [trace]}


def test_active_memory_timeline_matches_memory_viz():
    tl = memory.active_memory_timeline(synthetic_snapshot())
    baseline = 1000 + 300
    assert list(tl.allocated_bytes) == [baseline, baseline + 100, baseline + 150, baseline + 50, baseline + 250,
                                        baseline - 50, baseline - 40, baseline - 50]
    assert list(tl.phase) == ["before", "forward", "forward", "backward", "backward", "backward", "optimizer",
                              "optimizer"]
    spans = memory.phase_spans(tl)
    assert list(spans.phase) == ["forward", "backward", "optimizer"]
    assert list(spans.first_event) == [1, 3, 6]


def test_event_phase_reads_the_stack():
    assert memory.event_phase([]) == "backward"
    assert memory.event_phase([TORCH_FRAME, MODEL_FRAME]) == "forward"
    assert memory.event_phase([OPTIM_FRAME, E2E_FRAME]) == "optimizer"
    assert memory.event_phase([{"filename": "/x/torch/nn/modules/module.py", "line": 1, "name": "zero_grad"}]) \
        == "zero_grad"
    assert memory.event_phase([{"filename": "/x/torch/_tensor.py", "line": 1, "name": "backward"}]) == "backward"


def test_largest_allocations_name_the_project_line():
    snap = synthetic_snapshot()
    snap["device_traces"][0].append({"action": "alloc", "addr": 0xE, "size": 200, "frames": []})
    top = memory.largest_allocations(snap, n=3)
    assert list(top.size_mib * memory.MIB) == [200, 100, 50]
    assert top["count"].tolist() == [2, 1, 1]
    assert top.location[1] == "systems/model.py:105 (forward)"  # the model line, not torch's linear.py
    assert top.location[0].startswith("no Python frame")


def test_code_location_falls_back_to_the_first_non_torch_frame():
    user = {"filename": "/home/u/train.py", "line": 7, "name": "main"}
    assert memory.code_location([TORCH_FRAME, user]) == "/home/u/train.py:7 (main)"


def test_plot_timeline_draws_phases():
    ax = memory.plot_timeline(memory.active_memory_timeline(synthetic_snapshot()), title="t")
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {"forward", "backward", "optimizer"}


def test_residual_stream_size():
    # 2.7B: batch 4, context 128, d_model 2560, fp32 -> 4·128·2560·4 B = 5 MiB
    assert memory.residual_stream_mib(4, 128, 2560) == 5.0
    assert memory.residual_stream_mib(4, 512, 2560, bytes_per=2) == 10.0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_record_memory_is_a_noop_without_cuda(tmp_path):
    with pytest.warns(UserWarning, match="no CUDA"):
        with device.record_memory(tmp_path / "s.pickle"):
            pass
    assert not (tmp_path / "s.pickle").exists()


def test_largest_allocations_of_an_empty_trace():
    assert memory.largest_allocations({"segments": [], "device_traces": [[]]}).empty
    assert isinstance(memory.active_memory_timeline({"segments": [], "device_traces": [[]]}), pd.DataFrame)


def test_target_records_a_failing_configuration_as_a_row(tmp_path, monkeypatch):
    def fail(cfg):
        raise RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)")

    monkeypatch.setattr(target, "benchmark", fail)
    out = tmp_path / "status.json"
    assert target.main(["--size", "small", "--context-length", "8", "--mode", "forward", "--json", str(out)]) == 1
    row = json.loads(out.read_text())["results"][0]
    assert row["status"].startswith("error: CUDA error") and row["config"] == "cfg:small/8/forward"


def test_a_kernel_with_two_api_records_is_counted_once(tmp_path):
    import sqlite3

    two_step_report(tmp_path)
    with sqlite3.connect(tmp_path / "rep.sqlite") as db:  # a driver-API record sharing the correlation id
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT start + 500, end + 500, correlationId, nameId "
                   "FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    trace = nsys.load_trace(tmp_path / "rep.sqlite")
    assert len(trace.kernels) == 7
    assert (trace.kernels.start - trace.kernels.launch == 3 * US).all()


def block_trace(tmp_path):
    """A block's forward (two modules) and backward, by hand: which tensors are residuals and gradients is known.

    forward: q_proj's aten::linear allocates A (kept) inside aten::mm > aten::empty, and a temporary T freed at
    once; ffn's aten::mul allocates C (kept). backward: gradients E and F (alive after), a temporary G freed
    inside; A and C freed. The input I was allocated before the forward and outlives the trace.
    """
    from systems.profiling import block_memory as bm

    ranges = [
        {"name": bm.FORWARD, "start": 100, "end": 200},
        {"name": bm.MODULE + "attn.q_proj", "start": 110, "end": 140},
        {"name": "aten::linear, seq = 1, op_id = 7", "start": 112, "end": 138},
        {"name": "aten::mm, seq = 2", "start": 114, "end": 136},
        {"name": "aten::empty", "start": 115, "end": 117},
        {"name": bm.MODULE + "ffn", "start": 150, "end": 190},
        {"name": "aten::mul, seq = 3", "start": 155, "end": 165},
        {"name": bm.BACKWARD, "start": 300, "end": 400},
        {"name": "MmBackward0, seq = 2", "start": 310, "end": 330},
    ]
    A, T, C, E, F, G, I = 1 << 20, 3000, 5 << 10, 7 << 10, 11 << 10, 13 << 10, 17 << 10
    memory = [
        {"start": 50, "address": 9, "bytes": I, "free": False},
        {"start": 116, "address": 1, "bytes": A, "free": False},
        {"start": 130, "address": 2, "bytes": T, "free": False},
        {"start": 135, "address": 2, "bytes": T, "free": True},
        {"start": 160, "address": 3, "bytes": C, "free": False},
        {"start": 315, "address": 4, "bytes": E, "free": False},
        {"start": 320, "address": 5, "bytes": G, "free": False},
        {"start": 325, "address": 5, "bytes": G, "free": True},
        {"start": 330, "address": 3, "bytes": C, "free": True},
        {"start": 340, "address": 2, "bytes": F, "free": False},  # an address used again
        {"start": 350, "address": 1, "bytes": A, "free": True},
        {"start": 360, "address": 77, "bytes": 999, "free": True},  # allocated before the capture: ignored
    ]
    sqlite = nsys.write_sqlite(tmp_path / "block.sqlite", [], ranges, memory=memory)
    return nsys.load_memory_events(sqlite), nsys.load_trace(sqlite).ranges, dict(A=A, C=C, E=E, F=F, I=I)


def test_block_memory_finds_residuals_and_gradients_in_a_trace(tmp_path):
    from systems.profiling import block_memory as bm

    events, ranges, size = block_trace(tmp_path)
    life = bm.lifetimes(events, ranges)
    assert list(life.bytes) == [size["I"], size["A"], 3000, size["C"], size["E"], 13 << 10, size["F"]]
    first = life.iloc[1]
    assert (first.module, first.op) == ("attn.q_proj", "aten::linear")  # the outermost op, not aten::empty
    found = bm.block_memory(events, ranges, {"parameter_bytes": size["E"], "input_bytes": size["F"]})
    assert found["residual_bytes"] == size["A"] + size["C"]
    assert list(found["by_op"].op) == ["aten::linear", "aten::mul"]
    assert found["by_op"].share.sum() == pytest.approx(1.0)
    assert dict(zip(found["by_module"].module, found["by_module"].bytes)) == {"attn.q_proj": size["A"],
                                                                             "ffn": size["C"]}
    assert found["backward_change_bytes"] == size["E"] + size["F"] - size["A"] - size["C"]  # not the unknown free
    assert found["gradient_bytes_direct"] == found["gradient_bytes_expected"] == size["E"] + size["F"]
    assert found["gradient_tensors"] == 2
    assert found["forward_allocated_bytes"] == size["A"] + 3000 + size["C"]
    assert found["curve"].MiB.iloc[-1] * 2**20 == pytest.approx(found["backward_change_bytes"] + size["A"] + size["C"])


def test_block_memory_needs_its_ranges_and_the_memory_events(tmp_path):
    from systems.profiling import block_memory as bm

    events, ranges, _ = block_trace(tmp_path)
    with pytest.raises(ValueError, match="one 'block:backward' range, found 0"):
        bm.block_memory(events, ranges[ranges.name != bm.BACKWARD], {"parameter_bytes": 0, "input_bytes": 0})
    bare = nsys.write_sqlite(tmp_path / "bare.sqlite", [], [])
    with sqlite3.connect(bare) as db:
        db.execute("DROP TABLE CUDA_GPU_MEMORY_USAGE_EVENTS")
    with pytest.raises(ValueError, match="--cuda-memory-usage=true"):
        nsys.load_memory_events(bare)


def test_the_synthetic_block_trace_agrees_with_the_hooks(tmp_path):
    """The CPU stand-in carries the hook measurement into the trace format: the analysis must read it back."""
    from systems.memory.saved import block_residuals
    from systems.model import preset
    from systems.profiling import block_memory as bm

    cfg = preset("tiny", context_length=16, attention="sdpa")
    rec = bm.synthetic_record(cfg, 2, tmp_path)
    found = bm.block_memory(rec["events"], rec["ranges"], rec["info"])
    hooks = block_residuals(cfg, 2, device="cpu")
    assert found["residual_bytes"] == hooks.total_bytes - rec["info"]["input_bytes"]  # all but the block's input
    assert found["gradient_bytes_direct"] == found["gradient_bytes_handout"] == found["gradient_bytes_expected"]
    assert set(found["by_module"].module) <= set(hooks.by_module().module)


def test_the_block_memory_target_refuses_to_run_without_a_gpu(tmp_path, monkeypatch, capsys):
    from systems.profiling import block_memory as bm

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit:
        bm.main(["--json", str(tmp_path / "b.json")])
    assert exit.value.code == 2 and "needs a CUDA GPU" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bm.main(["--json", str(tmp_path / "b.json"), "--size", "huge"])
    assert "unknown model size 'huge'" in capsys.readouterr().err
