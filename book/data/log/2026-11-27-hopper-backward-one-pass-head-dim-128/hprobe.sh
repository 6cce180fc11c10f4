#!/usr/bin/env bash
# Build, GPU tests of flash_cuda and flash_hopper, then ncu of the Hopper one-pass backward against cuDNN's.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/build.log)"
timeout 300 python3 -m pytest -m gpu tests/test_flash_cuda.py tests/test_flash_hopper_cuda.py -q -p no:cacheprovider > $OUT/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/pytest.log)"
STALLS=$(for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected selected dispatch_stall lg_throttle no_instruction membar sleeping; do printf ",smsp__average_warps_issue_stalled_%s_per_issue_active.ratio" $r; done)
for shape in 1x16x16384x64 4x16x2048x64; do
timeout 150 ncu --kernel-name regex:"hopper_bwd_dkdv|bprop|dq_from|preprocess" \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section SchedulerStats --section LaunchStats \
  --metrics sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,lts__t_bytes.sum,dram__bytes_read.sum$STALLS \
  python3 .gpu/hprobe.py $shape > $OUT/ncu_$shape.txt 2>&1
echo "ncu $shape rc=$? after $(( $(date +%s) - t0 )) s"
done
ncu --query-metrics 2>/dev/null | grep -i "gmma\|shared\|tensor" > $OUT/metrics.txt
