"""A data-parallel training step at scale, simulated from one GPU's pass times and a collective's measured cost.

Each device runs the same forward and backward (weak scaling: the batch per device is fixed), so its compute
does not change with the device count; what changes is the communication. The simulation replays one step:
the layers' forward, then their backward in reverse order, with every collective queued on one communication
channel (as NCCL runs them, in order, on one stream) that works while the GPU computes. Its assumptions:

* a layer's pass time is the measured pass time split in proportion to the layer's matmul FLOPs;
* a layer's gradients are ready when its backward ends; a bucket when its last gradient is;
* a ring collective over N devices takes N − 1 (all-gather, reduce-scatter) or 2(N − 1) (all-reduce) steps,
  each paying the link's latency, plus the bandwidth term of §8.1 at the slowest link of the ring;
* compute and communication do not slow each other down (no contention for memory bandwidth or SMs).

Strategies: ``naive`` (one blocking all-reduce per parameter after the backward), ``flat`` (one all-reduce of
all gradients), ``overlap`` (one all-reduce per parameter, started as its layer's backward ends), ``bucketed``
(gradients grouped in backward order into buckets of at most ``bucket_bytes``), ``fsdp`` (weights all-gathered
before each layer's forward and backward, at most two layers ahead, gradients reduce-scattered after each
layer's backward).
"""

from __future__ import annotations

from dataclasses import dataclass

from systems.flops import block_flops, head_flops
from systems.model import ModelConfig

STRATEGIES = ("naive", "flat", "overlap", "bucketed", "fsdp")


@dataclass(frozen=True)
class Link:
    """One level of the network: ``bandwidth`` bytes/s each device sends, ``latency`` seconds per ring step."""

    bandwidth: float
    latency: float

    def ring(self, steps: int, chunk: float) -> float:
        return steps * (self.latency + chunk / self.bandwidth)


@dataclass(frozen=True)
class Cluster:
    """Nodes of ``node_size`` devices joined by ``intra`` (NVLink), the nodes by ``inter`` (InfiniBand, one
    adapter per device). Up to a node, collectives are rings; beyond it, hierarchical (as NCCL's rings are laid
    out over nodes): a ring inside each node, then rings across nodes between the devices of equal local rank,
    each carrying 1/node_size of the data over its own adapter."""

    intra: Link
    inter: Link
    node_size: int = 8
    call_overhead: float = 0.0  # seconds every collective pays once, whatever N

    @classmethod
    def from_two_device_fit(cls, overhead: float, bandwidth: float, inter_bandwidth: float, latency: str,
                            node_size: int = 8) -> "Cluster":
        """From ``t = o + S/w`` fitted to an all-reduce on two devices of a node. Two devices cannot tell whether
        o is paid once per call or per ring step, so ``latency`` picks: ``"call"`` (o once per collective, at
        any N: optimistic) or ``"step"`` (o/2 per ring step, the fit's two steps, across nodes too: pessimistic,
        as it grows with N)."""
        if latency == "call":
            return cls(Link(bandwidth, 0.0), Link(inter_bandwidth, 0.0), node_size, overhead)
        if latency == "step":
            return cls(Link(bandwidth, overhead / 2), Link(inter_bandwidth, overhead / 2), node_size)
        raise ValueError(f'latency must be "call" or "step", got {latency!r}')

    def _split(self, n: int) -> tuple[int, int]:
        if n <= self.node_size:
            return n, 1
        if n % self.node_size:
            raise ValueError(f"{n} devices do not fill whole nodes of {self.node_size}")
        return self.node_size, n // self.node_size

    def all_gather(self, size: float, n: int) -> float:
        """Every device ends with all ``size`` bytes, from 1/n each: across nodes first, then inside each node."""
        k, m = self._split(n)
        return self.call_overhead + self.inter.ring(m - 1, size / n) + self.intra.ring(k - 1, size / k)

    def reduce_scatter(self, size: float, n: int) -> float:
        return self.all_gather(size, n)  # the same steps with the data flowing the other way

    def all_reduce(self, size: float, n: int) -> float:
        """A reduce-scatter and an all-gather inside the node around an all-reduce of 1/k of the data across."""
        k, m = self._split(n)
        return self.call_overhead + 2 * self.intra.ring(k - 1, size / k) + 2 * self.inter.ring(m - 1, size / k / m)


@dataclass(frozen=True)
class Layer:
    name: str
    forward_s: float
    backward_s: float
    params: tuple[int, ...]  # the parameter tensors' element counts, in the order their gradients complete


def model_layers(cfg: ModelConfig, forward_s: float, backward_s: float) -> list[Layer]:
    """The embedding, the blocks and the output head of ``cfg`` (norms go with their block), the measured pass
    times shared out by matmul FLOPs per token (the embedding, a lookup, gets none; attention's T·d terms go to
    the blocks)."""
    d, f, v = cfg.d_model, cfg.d_ff, cfg.vocab_size
    block, head = block_flops(cfg), head_flops(cfg)
    total = cfg.num_layers * block + head
    shapes = (d, d * d, d * d, d * d, d * d, d, d * f, d * f, f * d)  # norm, q, k, v, out, norm, w1, w3, w2
    layers = [Layer("embedding", 0.0, 0.0, (v * d,))]
    layers += [Layer(f"block {i}", forward_s * block / total, backward_s * block / total, shapes)
               for i in range(cfg.num_layers)]
    layers.append(Layer("head", forward_s * head / total, backward_s * head / total, (d, d * v)))
    return layers


class _Channel:
    """Collectives in issue order on one stream: each starts when it is issued and the one before has ended."""

    def __init__(self) -> None:
        self.free = 0.0
        self.busy = 0.0

    def run(self, issued: float, seconds: float) -> float:
        start = max(issued, self.free)
        self.free = start + seconds
        self.busy += seconds
        return self.free


def simulate_step(layers: list[Layer], n: int, link: Cluster, strategy: str, grad_bytes: int = 4,
                  bucket_bytes: float = 25 * 2**20, gather_bytes: int = 2) -> dict[str, float]:
    """Seconds of one training step's forward and backward on each of ``n`` devices (the optimizer step is left
    out), with ``compute`` (the passes alone), ``communication`` (the channel's busy time) and ``exposed`` (what
    the step spends beyond its compute). ``grad_bytes`` per gradient element; ``gather_bytes`` per weight element
    that FSDP gathers (2: bf16 compute copies, cast before they are sent)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if n < 1:
        raise ValueError(f"need at least one device, got {n}")
    forward = sum(layer.forward_s for layer in layers)
    compute = forward + sum(layer.backward_s for layer in layers)
    channel = _Channel()
    if n == 1:
        end = compute
    elif strategy == "fsdp":
        end = _fsdp(layers, n, link, channel, grad_bytes, gather_bytes)
    elif strategy in ("naive", "flat"):
        sizes = [p * grad_bytes for layer in reversed(layers) for p in reversed(layer.params)]
        if strategy == "flat":
            sizes = [sum(sizes)]
        end = compute
        for size in sizes:  # blocking: one after the other, after the backward
            end = channel.run(end, link.all_reduce(size, n))
    else:
        end = _overlapped(layers, n, link, channel, forward, grad_bytes,
                          bucket_bytes if strategy == "bucketed" else 0.0)
    return {"step": end, "compute": compute, "communication": channel.busy, "exposed": end - compute}


def _overlapped(layers, n, link, channel, forward, grad_bytes, bucket_bytes) -> float:
    """Buckets of at most ``bucket_bytes`` (a parameter larger than that alone), filled in backward order and sent
    when the next gradient would overflow them; ``bucket_bytes`` 0 sends every parameter on its own."""
    now = done = bucket_ready = forward
    bucket = 0.0
    for layer in reversed(layers):
        now += layer.backward_s
        for p in reversed(layer.params):
            size = p * grad_bytes
            if bucket and bucket + size > bucket_bytes:
                done = channel.run(bucket_ready, link.all_reduce(bucket, n))
                bucket = 0.0
            bucket, bucket_ready = bucket + size, now
    if bucket:
        done = channel.run(bucket_ready, link.all_reduce(bucket, n))
    return max(now, done)


def _fsdp(layers, n, link, channel, grad_bytes, gather_bytes) -> float:
    # A layer's gather is issued when the layer two before it has finished (its gathered weights are freed then),
    # so gathers and compute interleave: at most two layers' weights are gathered at a time.
    now, done = 0.0, 0.0
    for phase, order in (("forward", layers), ("backward", list(reversed(layers)))):
        finished, ready = [], []
        for i, layer in enumerate(order):
            for j in range(len(ready), min(i + 2, len(order))):  # keep two gathers ahead of the compute
                issued = finished[j - 2] if j >= 2 else now
                ready.append(channel.run(issued, link.all_gather(sum(order[j].params) * gather_bytes, n)))
            now = max(now, ready[i]) + (layer.forward_s if phase == "forward" else layer.backward_s)
            finished.append(now)
            if phase == "backward":
                done = channel.run(now, link.reduce_scatter(sum(layer.params) * grad_bytes, n))
    return max(now, done)
