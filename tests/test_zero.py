"""ZeRO-1 (systems.zero): sharded AdamW equals unsharded AdamW; state memory; checkpoints across world sizes.

Every rank trains the same toy model on the same batches (no data parallelism is needed to test the
optimizer), so the unsharded optimizer in this process is the exact reference. The multi-process runs
are two gloo launches (2 and 3 ranks) that play every scenario, shared by the tests below.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from systems.dist import launch
from systems.zero import ShardedOptimizer, _check_device, get_sharded_optimizer, state_bytes, state_bytes_per_rank

STEPS = 10
VOCAB = 24


class Toy(nn.Module):
    """Embedding tied to the output head, linears of several sizes, a norm and a frozen parameter."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 12)
        self.up = nn.Linear(12, 20)
        self.down = nn.Linear(20, 12)
        self.norm = nn.LayerNorm(12)
        self.frozen = nn.Parameter(torch.randn(12), requires_grad=False)

    def forward(self, x):
        h = self.emb(x) + self.frozen
        h = h + self.down(F.gelu(self.up(h)))
        return self.norm(h) @ self.emb.weight.T  # tied head: one tensor reached twice


class Huge(nn.Module):
    """One big parameter next to many small ones."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 64)
        self.small = nn.ModuleList(nn.Linear(64, 2, bias=False) for _ in range(12))

    def forward(self, x):
        h = self.emb(x)  # (B, T, 64)
        gate = sum(m(h) for m in self.small).sum(-1, keepdim=True)  # (B, T, 1)
        return (gate * h) @ self.emb.weight.T


class Even(nn.Module):
    """Six equal square layers: optimizer state divides exactly by 2 and 3 ranks."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.layers = nn.ModuleList(nn.Linear(16, 16, bias=False) for _ in range(6))

    def forward(self, x):
        h = self.emb(x)
        for layer in self.layers:
            h = h + torch.tanh(layer(h))
        return h @ self.emb.weight.T


class Two(nn.Module):
    """Fewer parameters than ranks: someone owns nothing."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 8)
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return (self.emb(x) * self.scale) @ self.emb.weight.T


MODELS = {"toy": Toy, "huge": Huge, "even": Even, "two": Two}


def groups_of(model: nn.Module, grouped: bool) -> list:
    if not grouped:
        return list(model.parameters())
    first = [model.emb.weight, model.emb.weight]  # tied weight listed twice: must be deduplicated
    rest = [p for n, p in model.named_parameters() if not n.startswith("emb.")]
    return [
        {"params": first, "lr": 2e-2, "weight_decay": 0.1},
        {"params": rest, "lr": 5e-3, "weight_decay": 0.0, "betas": (0.8, 0.95)},
    ]


def play(spec: dict, sharded: bool) -> dict:
    """Train ``spec['model']`` from seed 0 for steps [start, stop); return weights, state dict and state bytes."""
    torch.manual_seed(0)
    model = MODELS[spec.get("model", "toy")]()
    groups = groups_of(model, spec.get("grouped", False))
    late = None
    if spec.get("late_group"):  # the second group arrives through add_param_group, after construction
        groups, late = groups[:1], groups[1]
    if sharded:
        opt = ShardedOptimizer(groups, torch.optim.AdamW, lr=1e-2, broadcast=spec.get("broadcast", "param"),
                               bucket_mb=spec.get("bucket_mb", 32.0))
    else:
        if spec.get("grouped"):  # the plain optimizer warns about the duplicate; give it the deduplicated list
            groups[0] = {**groups[0], "params": [model.emb.weight]}
        opt = torch.optim.AdamW(groups, lr=1e-2)
    if late is not None:
        opt.add_param_group(late)
    base_lrs = [g["lr"] for g in opt.param_groups]  # before loading: a checkpoint holds the decayed ones
    if spec.get("load") is not None:
        model.load_state_dict(spec["load"]["model"])
        opt.load_state_dict(spec["load"]["optimizer"])
    for step in range(spec.get("start", 0), spec["stop"]):
        g = torch.Generator().manual_seed(step)
        x = torch.randint(VOCAB, (4, 6), generator=g)
        y = torch.randint(VOCAB, (4, 6), generator=g)
        for group, lr in zip(opt.param_groups, base_lrs):
            group["lr"] = lr * 0.9**step  # a schedule writes to the wrapper's groups; the shards must follow
        if step == spec.get("unfreeze_at"):  # gradual unfreezing: a layer frozen at construction starts to train
            model.frozen.requires_grad_(True)
        if step == spec.get("freeze_at"):  # and a trained one stops
            model.up.weight.requires_grad_(False)
        opt.zero_grad()
        F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
        opt.step()
    out = {
        "weights": {n: p.detach().clone() for n, p in model.state_dict().items()},
        "optimizer": opt.state_dict(),
        "state_bytes": state_bytes_per_rank(opt),
    }
    if sharded:
        out["owned"] = [n for n, p in model.named_parameters() if opt.owner.get(p) == opt.rank]
    return out


def scenarios(rank: int, world_size: int, specs: dict) -> bytes:
    # Serialised: tensors returned through launch's queue would be shared by file descriptors that die
    # with this process before the parent reads them.
    buffer = io.BytesIO()
    torch.save({name: play(spec, sharded=True) for name, spec in specs.items()}, buffer)
    return buffer.getvalue()


def launch_scenarios(world: int, specs: dict) -> list[dict]:
    results = launch(scenarios, world, specs, backend="gloo", timeout_s=120)
    return [torch.load(io.BytesIO(r), weights_only=False) for r in results]


def reference(spec: dict) -> dict:
    return play(spec, sharded=False)


def assert_same_weights(got: dict, want: dict, atol: float = 1e-6) -> None:
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=atol, msg=name)


def assert_same_state_dict(got: dict, want: dict) -> None:
    assert got["param_groups"] == want["param_groups"]
    assert got["state"].keys() == want["state"].keys()
    for i, state in want["state"].items():
        assert got["state"][i].keys() == state.keys()
        for k, v in state.items():
            torch.testing.assert_close(got["state"][i][k].cpu(), v.cpu(), rtol=0, atol=1e-7)


HALF = {"model": "toy", "grouped": True, "stop": STEPS // 2}
SPECS = {
    "plain": {"model": "toy", "stop": STEPS},
    "grouped": {"model": "toy", "grouped": True, "stop": STEPS},
    "late_group_flat": {"model": "toy", "grouped": True, "late_group": True, "stop": STEPS,
                        "broadcast": "flat", "bucket_mb": 1e-3},  # ~1 KiB buckets: many of them
    "thaw": {"model": "toy", "stop": STEPS, "unfreeze_at": 3, "freeze_at": 6},
    "thaw_flat": {"model": "toy", "stop": STEPS, "unfreeze_at": 3, "freeze_at": 6, "broadcast": "flat",
                  "bucket_mb": 1e-3},
    "half": HALF,
    "huge": {"model": "huge", "stop": STEPS},
    "even": {"model": "even", "stop": 2},
    "two": {"model": "two", "stop": STEPS},
}


@pytest.fixture(scope="module")
def runs():
    """Every scenario at 2 and 3 ranks, then the half-way checkpoints resumed at other world sizes."""
    out = {w: launch_scenarios(w, SPECS) for w in (2, 3)}
    half_model = reference(HALF)["weights"]
    resume = {"model": "toy", "grouped": True, "start": STEPS // 2, "stop": STEPS}
    ckpt = {w: {"model": half_model, "optimizer": out[w][0]["half"]["optimizer"]} for w in (2, 3)}
    out["resumed"] = {  # checkpoint of world size N resumed at world size M
        (2, 3): launch_scenarios(3, {"r": {**resume, "load": ckpt[2]}})[0]["r"],
        (3, 1): play({**resume, "load": ckpt[3]}, sharded=True),
        (2, "plain AdamW"): reference({**resume, "load": copy.deepcopy(ckpt[2])}),  # plain AdamW aliases it
    }
    return out


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("name", ["plain", "grouped", "late_group_flat", "thaw", "thaw_flat", "huge", "two"])
def test_sharded_adamw_matches_unsharded(runs, world, name):
    want = reference(SPECS[name])
    for rank_result in runs[world]:  # every rank ends with the same, correct weights
        assert_same_weights(rank_result[name]["weights"], want["weights"])


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 3])
def test_consolidated_state_dict_is_the_unsharded_one(runs, world):
    want = reference(HALF)["optimizer"]
    for rank_result in runs[world]:
        assert_same_state_dict(rank_result["half"]["optimizer"], want)


@pytest.mark.distributed
@pytest.mark.parametrize("where", [(2, 3), (3, 1), (2, "plain AdamW")])
def test_checkpoint_resumes_at_another_world_size(runs, where):
    want = reference({"model": "toy", "grouped": True, "stop": STEPS})
    assert_same_weights(runs["resumed"][where]["weights"], want["weights"])
    assert_same_state_dict(runs["resumed"][where]["optimizer"], want["optimizer"])


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 3])
def test_state_memory_is_divided_by_world_size(runs, world):
    total = reference(SPECS["even"])["state_bytes"][0]
    per_rank = runs[world][0]["even"]["state_bytes"]
    assert len(per_rank) == world and sum(per_rank) == total
    # 7 equal matrices (embedding 24x16 is not equal, so allow one parameter's state of imbalance)
    largest = 2 * 4 * VOCAB * 16 + 4
    assert max(per_rank) <= total / world + largest
    assert max(per_rank) < 0.75 * total  # a real reduction, not a copy on every rank


@pytest.mark.distributed
def test_huge_parameter_gets_a_rank_of_its_own(runs):
    for world in (2, 3):
        owners = [r["huge"]["owned"] for r in runs[world]]
        assert owners[0] == ["emb.weight"]  # largest first onto rank 0, everything else elsewhere
        assert sorted(sum(owners, [])) == sorted(n for n, _ in Huge().named_parameters())


@pytest.mark.distributed
def test_more_ranks_than_parameters(runs):
    owners = [r["two"]["owned"] for r in runs[3]]
    assert sorted(len(o) for o in owners) == [0, 1, 1]
    assert runs[3][0]["two"]["state_bytes"][owners.index([])] == 0


def test_single_process_is_a_plain_optimizer():
    for spec in (SPECS["grouped"], SPECS["late_group_flat"], SPECS["thaw"]):
        got, want = play(spec, sharded=True), reference(spec)
        assert_same_weights(got["weights"], want["weights"], atol=0)
        assert_same_state_dict(got["optimizer"], want["optimizer"])
        assert got["state_bytes"] == want["state_bytes"]


def test_frozen_and_tied_parameters_are_handled():
    model = Toy()
    opt = get_sharded_optimizer([model.emb.weight, model.emb.weight, model.frozen, model.up.weight], torch.optim.AdamW)
    kept = opt.param_groups[0]["params"]
    assert len(kept) == 3 and all(a is b for a, b in zip(kept, [model.emb.weight, model.frozen, model.up.weight]))
    assert len(opt.owner) == 3  # the frozen one too, in case it is unfrozen later
    model(torch.zeros(1, 3, dtype=torch.long)).sum().backward()
    opt.step()  # but while frozen it has no state
    assert state_bytes(opt) == 2 * 4 * (model.emb.weight.numel() + model.up.weight.numel()) + 2 * 4


def test_misuse_is_reported():
    p = nn.Parameter(torch.zeros(3))
    with pytest.raises(TypeError, match="Optimizer subclass"):
        ShardedOptimizer([p], torch.optim.AdamW([nn.Parameter(torch.zeros(1))]))  # an instance, not a class
    with pytest.raises(TypeError, match="Optimizer subclass"):
        ShardedOptimizer([p], dict)
    with pytest.raises(TypeError, match="already a ShardedOptimizer"):
        ShardedOptimizer([p], ShardedOptimizer)
    with pytest.raises(ValueError, match="empty parameter list"):
        ShardedOptimizer([], torch.optim.AdamW)
    with pytest.raises(ValueError, match="broadcast"):
        ShardedOptimizer([p], torch.optim.AdamW, broadcast="scatter")
    with pytest.raises(ValueError, match="more than one parameter group"):
        ShardedOptimizer([{"params": [p]}, {"params": [p]}], torch.optim.AdamW)
    with pytest.raises(ValueError, match="nccl"):
        _check_device(p, "nccl")
    with pytest.raises(ValueError, match="meta"):
        ShardedOptimizer([nn.Parameter(torch.empty(2, device="meta"))], torch.optim.AdamW)
    with pytest.raises(ValueError, match="param groups"):
        ShardedOptimizer([p], torch.optim.AdamW).load_state_dict({"state": {}, "param_groups": []})
