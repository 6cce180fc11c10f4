set -u
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
D=book/data/log/2026-12-03-floor-environment
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader > $OUT/r/machine.txt; cat $OUT/r/machine.txt
t0=$(date +%s)
timeout -s KILL 240 python3 $D/steps_busy.py small:1024 small:2048 > $OUT/r/steps_busy_after.jsonl 2> $OUT/r/steps_busy_after.err; echo busy rc=$? $(( $(date +%s) - t0 )) s
grep -v '"own"' $OUT/r/steps_busy_after.jsonl
timeout -s KILL 200 python3 -m pytest -o addopts="" -p no:cacheprovider tests/test_flash_bench.py -k "step_kernel_time or fresh_process" -v > $OUT/r/pytest.log 2>&1; echo pytest rc=$? $(( $(date +%s) - t0 )) s; tail -n 8 $OUT/r/pytest.log
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
