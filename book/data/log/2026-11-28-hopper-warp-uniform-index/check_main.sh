#!/usr/bin/env bash
# On the GPU machine, on the repository's tree with the persistent backward in place: build, the backward-choice
# sweep at head dim 64 (sweep_bwd64.py of the 2026-11-28 d64 records, copied to .gpu/), the per-kernel profile
# (probe_overhead.py), then the Hopper GPU tests; everything under $OUT in one tar.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
t0=$(date +%s)
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; from systems.attention.flash_triton.host import unavailable as host; print("build:", unavailable(torch.device("cuda")), host())' > $OUT/r/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/build.log)"
for rnd in 0 1; do
  timeout 90 python3 .gpu/sweep_bwd64.py $rnd >> $OUT/r/sweep.jsonl 2>> $OUT/r/sweep.err
  echo "sweep round $rnd rc=$? after $(( $(date +%s) - t0 )) s"
done
timeout 100 python3 .gpu/probe_overhead.py > $OUT/r/probe.jsonl 2>> $OUT/r/probe.err
echo "probe rc=$? after $(( $(date +%s) - t0 )) s"
timeout $(( 560 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -q -p no:cacheprovider > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
