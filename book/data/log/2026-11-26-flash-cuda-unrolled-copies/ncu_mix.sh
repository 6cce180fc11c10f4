#!/usr/bin/env bash
# Instruction mix, stall reasons and pipe use of flash_cuda's kernels and FlashAttention-2's at the leaderboard shape.
set -u
export PYTHONPATH=$PWD
python3 -c 'from systems.attention.flash_cpp import _build_cuda; print("build:", _build_cuda())' 2>&1 | tail -1
STALLS=$(for r in barrier long_scoreboard short_scoreboard mio_throttle math_pipe_throttle wait not_selected selected dispatch_stall lg_throttle no_instruction branch_resolving membar drain imc_miss misc tex_throttle sleeping; do printf ",smsp__average_warps_issue_stalled_%s_per_issue_active.ratio" $r; done)
timeout 300 ncu --kernel-name regex:"${KERNELS:-flash_fwd_kernel|dkdv|dq_dk_dv}" \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis_Tables --section Occupancy \
  --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active$STALLS \
  --print-metric-instances details python3 .gpu/ncu_mix.py > $OUT/ncu_mix.txt 2>&1
echo "ncu rc=$?"; grep -c "flash" $OUT/ncu_mix.txt; tail -3 $OUT/ncu_mix.txt
