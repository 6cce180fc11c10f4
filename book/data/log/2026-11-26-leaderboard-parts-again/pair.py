# flash_hopper's pairing (Hopper forward + Triton backward) against flash_triton at the 2026 leaderboard's attention,
# interleaved: whole call, and the backward alone from each forward's outputs.
import torch, triton.testing as tt
from systems.attention import get_attention
from systems.attention.flash_cpp.hopper import forward_hopper_cuda
from systems.attention.flash_triton import flash_forward_triton
import systems.attention.flash_triton.host as host
shape = tuple(int(x) for x in __import__("sys").argv[1].split("x"))
q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in "qkv")
do = torch.randn_like(q)
tri, hop = get_attention("flash_triton"), get_attention("flash_hopper")
torch.autograd.grad(hop(q, k, v, True), (q, k, v), do); torch.autograd.grad(tri(q, k, v, True), (q, k, v), do)
def whole(f): return lambda: torch.autograd.grad(f(q, k, v, True), (q, k, v), do)
o_t, L_t = flash_forward_triton(q.detach(), k.detach(), v.detach(), True)
o_h, L_h = forward_hopper_cuda(q.detach(), k.detach(), v.detach(), True)
print("strides O triton", o_t.stride(), "hopper", o_h.stride(), "L", L_t.stride(), L_h.stride(),
      "max |dO-dO|", (o_t.float() - o_h.float()).abs().max().item(), "max |dL|", (L_t - L_h).abs().max().item())
bwd = lambda *a: torch.ops.systems_flash.triton_backward(*a)
qd, kd, vd = q.detach(), k.detach(), v.detach()
cases = {"flash_triton fwd+bwd": whole(tri), "flash_hopper fwd+bwd": whole(hop),
         "triton bwd from triton fwd": lambda: bwd(qd, kd, vd, o_t, do, L_t, True),
         "triton bwd from hopper fwd": lambda: bwd(qd, kd, vd, o_h, do, L_h, True),
         "hopper fwd": lambda: forward_hopper_cuda(qd, kd, vd, True), "triton fwd": lambda: flash_forward_triton(qd, kd, vd, True)}
res = {c: [] for c in cases}
for r in range(3):
    for c, f in cases.items():
        res[c].append(tt.do_bench(f, warmup=50, rep=300, return_mode="median"))
for c, t in res.items():
    print(f"{c:30s} " + " ".join(f"{x:8.2f}" for x in t))
