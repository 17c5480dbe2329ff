"""Models, graphs and backends shared by the symmflow.torch import and partition tests."""

from __future__ import annotations

import torch
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd

from symmflow.torch import _opmap
from symmflow.torch._partition import partition

c10d = torch.ops._c10d_functional


def whole_world(n: int):
    return lambda name: [list(range(n))]


def aot_graphs(fn, *inputs, run=True):
    """The forward graphs (and their example inputs) AOT autograd hands a backend, inference.
    run=False: the compiled function returns zeros of the outputs' shapes (for ops without a
    CPU kernel in torch)."""
    captured = []

    def fw(gm, example_inputs):
        captured.append((gm, list(example_inputs)))
        if run:
            return gm.forward
        vals = [n.meta["val"] for n in gm.graph.find_nodes(op="output")[0].args[0]]
        return lambda *args: tuple(torch.zeros(v.shape, dtype=v.dtype) for v in vals)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=fw, decompositions=core_aten_decompositions())
    with torch.no_grad():
        torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    return captured


def eager_partition(sub, example_inputs):
    return sub


def split_backend(catalogue, results, compile_partition=eager_partition):
    """A backend that partitions each graph and runs every partition eagerly; each call also
    runs the unsplit graph and checks the split one's outputs equal it element by element."""
    def fw(gm, example_inputs):
        r = partition(gm, catalogue, compile_partition=compile_partition,
                      example_inputs=example_inputs)
        results.append(r)

        def run(*args):
            got = r.split_gm(*args)
            assert_same(got, gm(*args))
            return got
        return run

    return aot_autograd(fw_compiler=fw, decompositions=core_aten_decompositions())


def run_split(fn, catalogue, *inputs, compile_partition=eager_partition):
    results: list = []
    torch._dynamo.reset()
    backend = split_backend(catalogue, results, compile_partition)
    with torch.no_grad():
        out = torch.compile(fn, backend=backend, fullgraph=True)(*inputs)
    return out, results


# --- the ops a Llama-style block needs that the catalogue is getting (issue 17, item 6) ------
BLOCK_OPS = ["aten::permute", "aten::pow.Tensor_Scalar", "aten::rsqrt", "aten::unsqueeze",
             "aten::expand", "aten::scaled_dot_product_attention", "aten::embedding"]


def without_ops(catalogue, names):
    """The catalogue less `names` (to test partitioning around ops symmflow lacks)."""
    return _opmap.Catalogue.from_list(o for n, o in catalogue.ops.items() if n not in set(names))


# The ops of the decomposed causal mask (AOT's masked softmax), CPU-only in symmflow.
MASK_OPS = ["aten::arange.start_step", "aten::le.Scalar", "aten::eq.Scalar", "aten::logical_and",
            "aten::logical_not", "aten::any.dim", "aten::where.self", "aten::full_like",
            "aten::scalar_tensor"]


def with_ops(catalogue, names):
    ops = list(catalogue.ops.values()) + [
        {"name": n, "schema": "", "backends": ["cpu"], "tags": []} for n in names]
    return _opmap.Catalogue.from_list(ops)


# --- models -----------------------------------------------------------------------------------
def tp_mlp(group):
    def mlp(x, w0, w1, w2, w3, w4, w5, w6, w7):
        for w in (w0, w1, w2, w3, w4, w5, w6, w7):
            x = funcol.all_reduce(torch.mm(x, w), "sum", group)
        return x
    return mlp


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(d) + 0.5)

    def forward(self, x):
        v = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(v + 1e-5) * self.weight


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class DecoderBlock(torch.nn.Module):
    """Llama-style: RMSNorm, q/k/v mm, rotary, causal GQA attention, row-parallel output +
    all-reduce, residual, RMSNorm, SwiGLU + all-reduce, residual. `sdpa` picks PyTorch's
    F.scaled_dot_product_attention or torch.ops.symmflow's; `extra` runs between the halves."""

    def __init__(self, group, sdpa="torch", extra=None, d=64, heads=4, kv_heads=2, ffn=128):
        super().__init__()
        self.group, self.sdpa, self.extra = group, sdpa, extra
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.q, self.k, self.v = lin(d, d), lin(d, kv_heads * self.hd), lin(d, kv_heads * self.hd)
        self.o, self.gate, self.up, self.down = lin(d, d), lin(d, ffn), lin(d, ffn), lin(ffn, d)

    def forward(self, x, cos, sin):
        t = x.shape[0]
        h = self.norm1(x)
        q = self.q(h).view(t, self.heads, self.hd).transpose(0, 1)
        k = self.k(h).view(t, self.kv_heads, self.hd).transpose(0, 1)
        v = self.v(h).view(t, self.kv_heads, self.hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.sdpa == "torch":
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            a = torch.ops.symmflow.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                enable_gqa=True)
        a = a.transpose(0, 1).reshape(t, -1)
        x = x + funcol.all_reduce(self.o(a), "sum", self.group)
        if self.extra is not None:
            x = self.extra(x)
        h = self.norm2(x)
        return x + funcol.all_reduce(self.down(F.silu(self.gate(h)) * self.up(h)), "sum",
                                     self.group)


def block_inputs():
    torch.manual_seed(0)
    return torch.randn(16, 64), torch.randn(16, 16), torch.randn(16, 16)


def assert_close_to_eager(got, want):
    """AOT autograd's decompositions (RMSNorm, attention) round differently from eager."""
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def assert_same(got, want):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g, w), (g - w).abs().max()


def call(g, target, *args, name=None, **kwargs):
    """g.call_function named `name`, else after the op ("all_reduce", not "all_reduce_default")."""
    return g.call_function(target, args, kwargs, name=name or target._schema.name.split("::")[1])


def fx_graph(build):
    """A GraphModule built by hand: build(graph) returns the output."""
    g = torch.fx.Graph()
    out = build(g)
    g.output(out)
    return torch.fx.GraphModule(torch.nn.Module(), g)


def mlp_with(world, middle):
    def fn(x, w0, w1):
        h = funcol.all_reduce(torch.mm(x, w0), "sum", world)
        h = middle(h)
        return funcol.all_reduce(torch.mm(h, w1), "sum", world)
    return fn


def mlp_inputs():
    torch.manual_seed(1)
    return torch.randn(16, 64), torch.randn(64, 64) / 8, torch.randn(64, 64) / 8
