# build.sh: libnew.so from the working tree's backward, libold.so from main's committed one (git show)
set -e
D=$(cd "$(dirname "$0")" && pwd); R=$D/../..
mkdir -p $D/old && git -C $R show 2e50b02:systems/attention/flash_cpp/flash_hopper_backward.cu > $D/old/flash_hopper_backward.cu
F="-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xcompiler -fPIC -shared -I $R/systems/attention/flash_cpp"
nvcc $F $D/capi.cu $R/systems/attention/flash_cpp/flash_hopper_backward.cu -o $D/libnew.so &
nvcc $F $D/capi.cu $D/old/flash_hopper_backward.cu -o $D/libold.so &
wait
