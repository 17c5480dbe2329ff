"""Tensor-parallel models written in plain PyTorch, for symmflow's torch.compile backend.

Each model is what a user writes: nn.Modules whose communication is
`torch.distributed._functional_collectives` (or `torch.ops.symm_mem` / `torch.ops.symmflow` for the
symmetric-memory cases), sharded by the calling rank. Weights come from a seeded generator so that
every rank builds the same full matrices and keeps its own shard; `make_inputs` does the same for
activations. Used by examples/pytorch/run.py (the demo), tests/python/torch and tools/device.

- TPMLP: the 8-layer MLP of examples/tp_mlp.sf (row-parallel mm + all-reduce per layer).
- DecoderBlock: a Llama-style block, tensor parallel (column-parallel QKV and gate/up, row-parallel
  output and down + all-reduce) or, with sequence_parallel=True, with tokens sharded between the
  blocks (all-gather before QKV and the MLP, reduce-scatter after).
  unsupported_op=True adds a Bessel i0, an op symmflow lacks, before the MLP (two boundaries).
- InputAllReduce / InplaceAllReduce: a graph input fed straight to symm_mem.one_shot_all_reduce,
  and symm_mem.two_shot_all_reduce_ in place on an intermediate.
- Ring: the ring exchange of examples/halo_exchange.sf with torch.ops.symmflow.collective_permute.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn as nn
import torch.nn.functional as F


def _group_name(group) -> str:
    return (group or dist.group.WORLD).group_name


def seeded(shape, seed: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


class TPMLP(nn.Module):
    """h = all_reduce(x @ W_l[rows of this rank]) for 8 layers; x is replicated."""

    def __init__(self, hidden: int, layers: int = 8, dtype=torch.float32, group=None):
        super().__init__()
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        shard = hidden // world
        self.group = group or dist.group.WORLD
        self.weights = nn.ParameterList()
        for layer in range(layers):
            full = seeded((hidden, hidden), 100 + layer, torch.float32, hidden**-0.5)
            # Row-parallel: this rank multiplies its columns of x by its rows of W.
            self.weights.append(nn.Parameter(full[rank * shard:(rank + 1) * shard].to(dtype),
                                             requires_grad=False))
        self.shard = shard

    def forward(self, x):
        rank = dist.get_rank(self.group)
        for w in self.weights:
            h = x[:, rank * self.shard:(rank + 1) * self.shard] @ w
            x = funcol.all_reduce(h, "sum", self.group)
        return x


def rms_norm(x, weight, eps: float = 1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotary(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class DecoderBlock(nn.Module):
    """A Llama-style decoder block over `world` ranks of `group`.

    heads / kv_heads query and key-value heads in all (grouped: heads % kv_heads == 0), each rank
    owning heads/world and kv_heads/world of them; ffn the MLP width, ffn/world per rank.
    """

    def __init__(self, hidden=64, heads=8, kv_heads=4, ffn=128, dtype=torch.float32, group=None,
                 sequence_parallel=False, unsupported_op=False):
        super().__init__()
        self.unsupported_op = unsupported_op  # a Bessel i0 (not in symmflow) before the MLP
        rank, world = dist.get_rank(group), dist.get_world_size(group)
        assert heads % world == 0 and kv_heads % world == 0 and ffn % world == 0
        self.group, self.sp, self.world = group or dist.group.WORLD, sequence_parallel, world
        self.head_dim = hidden // heads
        self.heads, self.kv_heads = heads // world, kv_heads // world
        hd = self.head_dim

        def cols(seed, n_out, per_rank):
            full = seeded((hidden, n_out), seed, torch.float32, hidden**-0.5)
            # contiguous, as a DTensor shard is (a strided parameter costs an input copy a call)
            return nn.Parameter(
                full[:, rank * per_rank:(rank + 1) * per_rank].to(dtype).contiguous(), False)

        def rows(seed, n_in, per_rank):
            full = seeded((n_in, hidden), seed, torch.float32, n_in**-0.5)
            return nn.Parameter(full[rank * per_rank:(rank + 1) * per_rank].to(dtype), False)

        self.wq = cols(1, heads * hd, self.heads * hd)
        self.wk = cols(2, kv_heads * hd, self.kv_heads * hd)
        self.wv = cols(3, kv_heads * hd, self.kv_heads * hd)
        self.wo = rows(4, heads * hd, self.heads * hd)
        self.w1 = cols(5, ffn, ffn // world)
        self.w3 = cols(6, ffn, ffn // world)
        self.w2 = rows(7, ffn, ffn // world)
        self.norm1 = nn.Parameter(1 + seeded((hidden,), 8, torch.float32, 0.1).to(dtype), False)
        self.norm2 = nn.Parameter(1 + seeded((hidden,), 9, torch.float32, 0.1).to(dtype), False)

    def _gather(self, x):
        return funcol.all_gather_tensor(x, 0, self.group) if self.sp else x

    def _reduce(self, x):
        if self.sp:
            return funcol.reduce_scatter_tensor(x, "sum", 0, self.group)
        return funcol.all_reduce(x, "sum", self.group)

    def forward(self, x, cos, sin):
        h = self._gather(rms_norm(x, self.norm1))
        tokens, hd = h.shape[0], self.head_dim
        q = (h @ self.wq).view(tokens, self.heads, hd).transpose(0, 1)
        k = (h @ self.wk).view(tokens, self.kv_heads, hd).transpose(0, 1)
        v = (h @ self.wv).view(tokens, self.kv_heads, hd).transpose(0, 1)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self._reduce(a.transpose(0, 1).reshape(tokens, -1) @ self.wo)
        h = self._gather(rms_norm(x, self.norm2))
        if self.unsupported_op:
            h = h * torch.sigmoid(torch.special.i0(h) * 1e-3)
        return x + self._reduce((F.silu(h @ self.w1) * (h @ self.w3)) @ self.w2)


class InputAllReduce(nn.Module):
    """A graph input fed straight to symm_mem.one_shot_all_reduce, then scaled."""

    def __init__(self, group=None):
        super().__init__()
        self.group = group or dist.group.WORLD

    def forward(self, x):
        return torch.ops.symm_mem.one_shot_all_reduce(x, "sum", _group_name(self.group)) * 0.5


class InplaceAllReduce(nn.Module):
    """symm_mem.two_shot_all_reduce_ in place on an intermediate."""

    def __init__(self, group=None):
        super().__init__()
        self.group = group or dist.group.WORLD

    def forward(self, x):
        y = x * 2.0
        torch.ops.symm_mem.two_shot_all_reduce_(y, "sum", _group_name(self.group))
        return y + 1.0


class Ring(nn.Module):
    """examples/halo_exchange.sf: two shifts around the ring with local work between."""

    def __init__(self, group=None):
        super().__init__()
        self.group = group or dist.group.WORLD

    def forward(self, x):
        name = _group_name(self.group)
        t0 = x * 2.0 + 1.0
        a = torch.ops.symmflow.collective_permute(x, 1, name) + t0
        return torch.ops.symmflow.collective_permute(a, 1, name) + a * 1.000244140625


def make_inputs(case: str, dtype: torch.dtype, *, tokens=16, hidden=64, heads=8, rank=0, world=1):
    """The inputs of a case on `rank` (activations replicated unless sequence parallel)."""
    seed = 1000 + rank if case in ("input_allreduce", "inplace_allreduce", "ring") else 1000
    if case == "mlp":
        return (seeded((tokens, hidden), seed, dtype),)
    if case.startswith("decoder"):
        hd = hidden // heads
        x = seeded((tokens, hidden), seed, dtype)
        if case == "decoder_sp":
            x = x[rank * tokens // world:(rank + 1) * tokens // world].contiguous()
        angles = torch.arange(tokens)[:, None] * (10000 ** (-torch.arange(hd // 2) / (hd // 2)))
        angles = torch.cat((angles, angles), -1)
        return x, angles.cos().to(dtype), angles.sin().to(dtype)
    return (seeded((tokens, hidden), seed, dtype),)


def make_model(case: str, dtype: torch.dtype, *, hidden=64, heads=8, kv_heads=4, ffn=128,
               layers=8, group=None) -> nn.Module:
    if case == "mlp":
        return TPMLP(hidden, layers, dtype, group)
    if case in ("decoder", "decoder_sp", "decoder_unsupported"):
        return DecoderBlock(hidden, heads, kv_heads, ffn, dtype, group,
                            sequence_parallel=case == "decoder_sp",
                            unsupported_op=case == "decoder_unsupported")
    if case == "input_allreduce":
        return InputAllReduce(group)
    if case == "inplace_allreduce":
        return InplaceAllReduce(group)
    if case == "ring":
        return Ring(group)
    raise ValueError(f"unknown case '{case}'")
