# The Hopper forward's timeline (tree t: clock64 stamps per block, per query tile the block takes, per warpgroup),
# one run per shape after warm-up; medians in SM cycles. Consumer events: 0 entry, 1 Q arrived, 2 S(0) in,
# 3 first tile done, 4 loop done, 5 last P V in, 6 O stored; producer: 0 named, 1 Q copy issued, 2 copies issued.
import ctypes, glob, json, os, sys
import numpy as np, torch, triton
from systems.attention.flash_cpp.hopper import unavailable
from systems.attention.peers import sdpa_cudnn
assert unavailable(torch.device("cuda")) is None
lib = ctypes.CDLL(glob.glob(os.environ["TORCH_EXTENSIONS_DIR"] + "/**/systems_flash_hopper*.so", recursive=True)[0])
TL = np.zeros((132, 64, 4, 8), dtype=np.int64)
def copy():
    assert lib.hopper_timeline_copy(ctypes.c_void_p(TL.ctypes.data), ctypes.c_longlong(TL.nbytes)) == 0
op = torch.ops.systems_flash.hopper_attention_forward
SHAPES = [(8, 32, 1024, 128, False), (8, 32, 1024, 128, True), (2, 32, 4096, 128, True), (1, 32, 8192, 128, False),
          (8, 32, 1024, 64, False), (8, 32, 1024, 64, True)]
for B, H, n, d, causal in SHAPES:
    q, k, v = (torch.randn(B, n, H, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    for _ in range(3):
        op(q, k, v, causal)
    ms = triton.testing.do_bench(lambda: op(q, k, v, causal), rep=100)
    cudnn = triton.testing.do_bench(lambda: sdpa_cudnn(q, k, v, causal), rep=100)
    copy()
    op(q, k, v, causal)
    copy()
    T = TL.copy()
    rows = []
    C = 3 if (d == 64 and (not causal or n >= 2048)) else 2
    for b in range(132):
        for j in range(64):
            for g in range(1, C + 1):
                e = T[b, j, g]
                if e[7] == 0:
                    continue
                nt = int(e[7])
                nxt = T[b, j + 1, g, 0] - e[6] if j + 1 < 64 and T[b, j + 1, g, 7] else None
                rows.append(dict(b=b, j=j, g=g, n=nt, q_wait=e[1] - e[0], first=e[3] - e[1], s0=e[2] - e[1],
                                 loop=(e[4] - e[3]) / max(nt - 1, 1), last=e[5] - e[4], epi=e[6] - e[5],
                                 total=e[6] - e[0], gap=nxt,
                                 q_issue_to_arrive=(e[1] - T[b, j, 0, 1]) if j > 0 else None))
    block_span = [int(T[b, :, 1:, 6].max() - T[b, T[b, :, 1, 7] > 0, 1, 0].min()) for b in range(132)]
    def med(key, sel=lambda r: True):
        vals = [float(r[key]) for r in rows if r[key] is not None and sel(r)]
        return float(np.median(vals)) if vals else None
    out = dict(shape=f"{B}x{H}x{n}x{d}", causal=causal, ours_ms=ms, cudnn_ms=cudnn, consumers=C,
               tiles_per_block=float(np.mean([(T[b, :, 1, 7] > 0).sum() for b in range(132)])),
               block_span_cycles=float(np.median(block_span)), cycles_per_ms=float(np.median(block_span)) / ms)
    for key in ["q_wait", "s0", "first", "loop", "last", "epi", "total", "gap", "q_issue_to_arrive"]:
        out[key] = med(key)
        out[key + "_full"] = med(key, lambda r: r["n"] == max(x["n"] for x in rows))  # the longest tiles
    print(json.dumps(out), flush=True)
