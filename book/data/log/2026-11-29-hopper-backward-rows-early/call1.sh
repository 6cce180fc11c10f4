#!/usr/bin/env bash
# One H200, from the repository's root: main's tree (.gpu/m) built; Nsight Compute (full set) on one backward of
# flash_hopper's Hopper kernels and one of cuDNN's, not causal, 1x16x8192x64; then the Hopper GPU tests but the
# backward's oracle cases (main's backward is unchanged since they last passed).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv > $OUT/r/machine.txt
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)" >> $OUT/r/machine.txt
ncu --version | tail -1 >> $OUT/r/machine.txt
t0=$(date +%s)
cd .gpu/m && export TORCH_EXTENSIONS_DIR=/tmp/ext_m PYTHONPATH=/tmp/site:$PWD SYSTEMS_GIT_COMMIT=984c250
python3 -c 'import torch; from systems.attention.flash_cpp.hopper import unavailable; print("build:", unavailable(torch.device("cuda")))' > $OUT/r/build.log 2>&1
echo "built after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/build.log)"
timeout 240 ncu --set full --profile-from-start off -f -o /tmp/nc python3 ../ncu_nc.py > $OUT/r/ncu.log 2>&1
echo "ncu rc=$? after $(( $(date +%s) - t0 )) s"; tail -3 $OUT/r/ncu.log
ncu -i /tmp/nc.ncu-rep --page details > $OUT/r/ncu_details.txt 2>&1
ncu -i /tmp/nc.ncu-rep --page raw --csv > /tmp/ncu_raw.csv 2>>$OUT/r/ncu.log; gzip -c /tmp/ncu_raw.csv > $OUT/r/ncu_raw.csv.gz
ncu -i /tmp/nc.ncu-rep --page source --csv --print-source sass --kernel-name regex:dkdv > /tmp/src.csv 2>>$OUT/r/ncu.log
gzip -c /tmp/src.csv > $OUT/r/ncu_source_dkdv.csv.gz
ncu -i /tmp/nc.ncu-rep --page source --csv --print-source sass --kernel-name regex:bprop > /tmp/src2.csv 2>>$OUT/r/ncu.log
gzip -c /tmp/src2.csv > $OUT/r/ncu_source_cudnn.csv.gz
echo "ncu pages after $(( $(date +%s) - t0 )) s"
timeout $(( 560 - ($(date +%s) - t0) )) python3 -m pytest -m gpu tests/test_flash_hopper_cuda.py -v --durations=10 \
  -p no:cacheprovider -k "not backward_matches" > $OUT/r/pytest.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - t0 )) s: $(tail -n1 $OUT/r/pytest.log)"
cd ../.. && tar -C $OUT -czf $OUT/r.tgz r && rm -rf $OUT/r
