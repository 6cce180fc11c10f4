set -u
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/.gpu/ext SYSTEMS_GIT_COMMIT=$(cat .gpu/commit)
mkdir -p $OUT/r
t0=$(date +%s)
timeout -s KILL 420 python3 -m pytest -o addopts="" -p no:cacheprovider -m gpu tests/test_flash_fastest.py tests/test_flash_hopper_cuda.py tests/test_fused.py tests/test_offload.py --durations=5 > $OUT/r/pytest_gpu.log 2>&1; echo "gpu tests rc=$? $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest_gpu.log)"
timeout -s KILL 120 python3 -m pytest -o addopts="" -p no:cacheprovider tests/test_flash_bench.py > $OUT/r/pytest_bench.log 2>&1; echo "bench tests rc=$? $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest_bench.log)"
tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
