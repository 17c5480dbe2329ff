"""symmflow.torch graph import and partitioning: FX (AOT autograd ATen) graphs -> symmflow IR text,
compiled with the `symmflow` command; capability-based partitioning checked by running the split
module eagerly against the original, element by element."""

from __future__ import annotations

import operator
import os

import pytest
import torch
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch.fx.experimental.proxy_tensor import make_fx

from conftest import ROOT, compile_ok, structure
from symmflow.torch import _opmap
from symmflow.torch._fx_import import OutputSource, UnsupportedGraph, import_graph
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


def split_backend(catalogue, results):
    """A backend that partitions each graph and runs every partition eagerly; each call also
    runs the unsplit graph and checks the split one's outputs equal it element by element."""
    def fw(gm, example_inputs):
        r = partition(gm, catalogue, compile_partition=lambda sub, ex: sub,
                      example_inputs=example_inputs)
        results.append(r)

        def run(*args):
            got = r.split_gm(*args)
            assert_same(got, gm(*args))
            return got
        return run

    return aot_autograd(fw_compiler=fw, decompositions=core_aten_decompositions())


def run_split(fn, catalogue, *inputs):
    results: list = []
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(fn, backend=split_backend(catalogue, results), fullgraph=True)(*inputs)
    return out, results


# --- the ops a Llama-style block needs that the catalogue is getting (issue 17, item 6) ------
BLOCK_OPS = ["aten::permute", "aten::pow.Tensor_Scalar", "aten::rsqrt", "aten::unsqueeze",
             "aten::expand", "aten::scaled_dot_product_attention", "aten::embedding"]


def with_ops(catalogue, names):
    ops = list(catalogue.ops.values()) + [
        {"name": n, "schema": "", "backends": ["cpu"], "tags": []} for n in names]
    return _opmap.Catalogue.from_list(ops)


@pytest.fixture(scope="module")
def symmflow_ops():
    """torch.ops.symmflow ops as symmflow.torch will register them (defined here when absent)."""
    lib = torch.library.Library("symmflow", "FRAGMENT")
    if not hasattr(torch.ops.symmflow, "scaled_dot_product_attention"):
        lib.define("scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, "
                   "Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, "
                   "float? scale=None, bool enable_gqa=False) -> Tensor")

        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                 enable_gqa=False):
            return F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal,
                                                  scale=scale, enable_gqa=enable_gqa).contiguous()

        lib.impl("scaled_dot_product_attention", sdpa, "CompositeExplicitAutograd")
        torch.library.register_fake("symmflow::scaled_dot_product_attention",
                                    lambda q, *a, **k: q.new_empty(q.shape), lib=lib)
    if not hasattr(torch.ops.symmflow, "two_shot_all_reduce_"):
        lib.define("two_shot_all_reduce_(Tensor(a!) input, str reduce_op, str group_name) -> ()")
        lib.impl("two_shot_all_reduce_", lambda x, op, g: None, "CompositeExplicitAutograd")
        torch.library.register_fake("symmflow::two_shot_all_reduce_", lambda x, op, g: None,
                                    lib=lib)
    yield torch.ops.symmflow


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


# --- import: text and the CLI -----------------------------------------------------------------
def test_mlp_imports_as_the_tp_mlp_example_and_compiles(world, catalogue, cli):
    x = torch.empty(16, 4096, dtype=torch.bfloat16)
    ws = [torch.empty(4096, 4096, dtype=torch.bfloat16) for _ in range(8)]
    gm = make_fx(tp_mlp(world), tracing_mode="fake")(x, *ws)
    ig = import_graph(gm, [x, *ws], world_size=4, rank=1, group_resolver=whole_world(4),
                      catalogue=catalogue, name="tp_mlp")
    with open(os.path.join(ROOT, "examples", "tp_mlp.sf")) as f:
        example = f.read()
    assert structure(ig.text) == structure(example)
    assert ig.groups == {world: "g0"}
    assert ig.outputs == [OutputSource("ir", 0)] and ig.notes == []
    plan = compile_ok(cli, ig.text, 4)
    assert "pool symm[g0]" in plan


def test_mlp_through_aot_autograd_with_parameters(world, catalogue, cli):
    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.randn(64, 64) / 8) for _ in range(8)])

        def forward(self, x):
            for w in self.ws:
                x = funcol.all_reduce(x @ w, "sum", world)
            return x

    m = MLP()
    (gm, ex), = aot_graphs(m, torch.randn(16, 64))
    ig = import_graph(gm, ex, world_size=2, rank=0, group_resolver=whole_world(2),
                      catalogue=catalogue)
    body = [l for l in ig.text.splitlines() if " = " in l]
    assert [l.split(" = ")[1].split("(")[0] for l in body] == \
        ["aten::mm", "symm_mem::one_shot_all_reduce"] * 8
    assert len(ig.input_names) == 9
    explain = compile_ok(cli, ig.text, 2, "explain")
    assert "compiler-added copies: 0" in explain
    assert "collectives: 8" in explain


def call(g, target, *args, name=None, **kwargs):
    """g.call_function named `name`, else after the op ("all_reduce", not "all_reduce_default")."""
    return g.call_function(target, args, kwargs, name=name or target._schema.name.split("::")[1])


def fx_graph(build):
    """A GraphModule built by hand: build(graph) returns the output."""
    g = torch.fx.Graph()
    out = build(g)
    g.output(out)
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_gather_and_scatter_map_to_low_contention_ops(catalogue, cli):
    def build(g):
        x = g.placeholder("x")
        ag = call(g, c10d.all_gather_into_tensor.default, x, 2, "7")
        agw = call(g, c10d.wait_tensor.default, ag)
        rs = call(g, c10d.reduce_scatter_tensor.default, agw, "sum", 2, "7")
        rsw = call(g, c10d.wait_tensor.default, rs)
        return (agw, rsw)

    ig = import_graph(fx_graph(build), [torch.empty(8, 16)], world_size=2, rank=0,
                      group_resolver=whole_world(2), catalogue=catalogue, name="gs")
    assert ig.text == (
        "group g0\n"
        "graph gs(x: f32[8, 16]) {\n"
        '  all_gather_into_tensor = symm_mem::_low_contention_all_gather(x, "g0")\n'
        "  reduce_scatter_tensor = symm_mem::_low_contention_reduce_scatter("
        'all_gather_into_tensor, "sum", "g0")\n'
        "  return all_gather_into_tensor, reduce_scatter_tensor\n"
        "}\n")
    assert ig.groups == {"7": "g0"}
    compile_ok(cli, ig.text, 2)


def test_group_size_must_match_the_resolved_group(catalogue):
    def build(g):
        x = g.placeholder("x")
        return call(g, c10d.all_gather_into_tensor.default, x, 4, "7")

    with pytest.raises(UnsupportedGraph) as e:
        import_graph(fx_graph(build), [torch.empty(8)], world_size=2, rank=0,
                     group_resolver=whole_world(2), catalogue=catalogue)
    assert str(e.value) == ("_c10d_functional.all_gather_into_tensor.default at node "
                            "all_gather_into_tensor: group size 4 differs from the size 2 of "
                            "c10d group '7'")


def all_reduce_graph(group_name="3", op="sum"):
    def build(g):
        x = g.placeholder("x")
        r = call(g, c10d.all_reduce.default, x, op, group_name)
        w = call(g, c10d.wait_tensor.default, r)
        return (call(g, torch.ops.aten.mul.Tensor, w, 2.0),)
    return fx_graph(build)


def test_resolver_partition_becomes_explicit_group(catalogue, cli):
    ig = import_graph(all_reduce_graph(), [torch.empty(4, 8)], world_size=4, rank=2,
                      group_resolver=lambda name: [[0, 2], [1, 3]], catalogue=catalogue,
                      name="dp")
    assert ig.text == (
        "group g0 = {0, 2}, {1, 3}\n"
        "graph dp(x: f32[4, 8]) {\n"
        '  all_reduce = symm_mem::one_shot_all_reduce(x, "sum", "g0")\n'
        "  mul = aten::mul.Scalar(all_reduce, 2.0)\n"
        "  return mul\n"
        "}\n")
    compile_ok(cli, ig.text, 4)


@pytest.mark.parametrize("resolved", [[[0, 1, 2, 3]], [0, 1, 2, 3]])
def test_resolver_whole_world_is_a_plain_group(catalogue, resolved):
    ig = import_graph(all_reduce_graph(), [torch.empty(4, 8)], world_size=4, rank=0,
                      group_resolver=lambda name: resolved, catalogue=catalogue)
    assert ig.text.splitlines()[0] == "group g0"


@pytest.mark.parametrize("resolved,message", [
    ([[0, 2]], "c10d group '3' resolves to [[0, 2]], which leave out this rank 1"),
    ([[0, 1], [1, 2]], "c10d group '3' resolves to [[0, 1], [1, 2]], which are not distinct "
                       "ranks of the world of 4"),
    ([[0, 1, 2], [3]], "c10d group '3' resolves to subgroups of different sizes "
                       "[[0, 1, 2], [3]]"),
    ([[0, 4]], "c10d group '3' resolves to [[0, 4]], which are not distinct ranks of the world "
               "of 4"),
])
def test_resolver_errors(catalogue, resolved, message):
    with pytest.raises(UnsupportedGraph) as e:
        import_graph(all_reduce_graph(), [torch.empty(4, 8)], world_size=4, rank=1,
                     group_resolver=lambda name: resolved, catalogue=catalogue)
    assert str(e.value) == \
        f"_c10d_functional.all_reduce.default at node all_reduce: {message}"


def test_reduce_op_outside_the_catalogue_is_refused(catalogue):
    with pytest.raises(UnsupportedGraph) as e:
        import_graph(all_reduce_graph(op="product"), [torch.empty(4)], world_size=1, rank=0,
                     group_resolver=whole_world(1), catalogue=catalogue)
    assert str(e.value) == ("_c10d_functional.all_reduce.default at node all_reduce: reduce op "
                            "'product' is not one of sum, avg, max, min")


def test_unsupported_node_error_names_node_and_op(catalogue):
    def build(g):
        x = g.placeholder("x")
        y = call(g, torch.ops.aten.sin.default, x)
        return call(g, torch.ops.aten.cumsum.default, y, 0)

    with pytest.raises(UnsupportedGraph) as e:
        import_graph(fx_graph(build), [torch.empty(4)], world_size=1, rank=0,
                     catalogue=catalogue)
    assert str(e.value) == "aten.cumsum.default at node cumsum is not in symmflow's catalogue"
    assert (e.value.node, e.value.op) == ("cumsum", "aten.cumsum.default")


def test_literals_non_finite_float_and_dtype_refused(catalogue):
    def build(g):
        x = g.placeholder("x")
        return call(g, torch.ops.aten.mul.Scalar, x, float("-inf"))

    with pytest.raises(UnsupportedGraph) as e:
        import_graph(fx_graph(build), [torch.empty(4)], world_size=1, rank=0,
                     catalogue=catalogue)
    assert str(e.value) == "aten.mul.Scalar at node mul: the float -inf has no IR literal"
    with pytest.raises(UnsupportedGraph) as e:
        import_graph(fx_graph(lambda g: g.placeholder("x")), [torch.empty(4, dtype=torch.cfloat)],
                     world_size=1, rank=0, catalogue=catalogue)
    assert str(e.value) == ("input x: dtype torch.complex64 is not one of symmflow's dtypes "
                            "(bf16, bool, f16, f32, f64, i32, i64, i8, u32)")


def test_literals_render_in_ir_syntax(world, catalogue, cli):
    def fn(x):
        y = (x + 1e-05).to(torch.bfloat16).float()
        z = torch.zeros(4, 8, dtype=torch.float32)
        s = torch.sum(y * 2, dim=[1], keepdim=True)
        return torch.cat([y, z], dim=0)[1:3] - s.mean([0], keepdim=False)

    x = torch.randn(4, 8)
    (gm, ex), = aot_graphs(fn, x)
    ig = import_graph(gm, ex, world_size=1, rank=0, catalogue=catalogue, name="lit")
    assert ig.text == """graph lit(arg0_1: f32[4, 8]) {
  add = aten::add.Scalar(arg0_1, 1e-05)
  _to_copy = aten::_to_copy(add, dtype=bf16)
  _to_copy_1 = aten::_to_copy(_to_copy, dtype=f32)
  full = aten::full([4, 8], 0, dtype=f32)
  mul = aten::mul.Scalar(_to_copy_1, 2)
  sum_1 = aten::sum.dim_IntList(mul, [1], True)
  cat = aten::cat([_to_copy_1, full])
  slice_1 = aten::slice.Tensor(cat, 0, 1, 3)
  mean = aten::mean.dim(sum_1, [0])
  sub = aten::sub.Tensor(slice_1, mean)
  return sub
}
"""
    compile_ok(cli, ig.text, 1)


# --- in-place collectives: what torch 2.13 hands over ----------------------------------------
def test_dist_all_reduce_in_place_arrives_functionalized(world, catalogue, cli):
    import torch.distributed as dist

    def fn(x, w):
        h = x @ w
        dist.all_reduce(h)
        return h + 1

    (gm, ex), = aot_graphs(fn, torch.randn(8, 4), torch.randn(4, 4))
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert targets == ["aten.mm.default", "_c10d_functional.all_reduce.default",
                       "_c10d_functional.wait_tensor.default", "aten.copy.default",
                       "aten.add.Tensor"]
    ig = import_graph(gm, ex, world_size=2, rank=0, group_resolver=whole_world(2),
                      catalogue=catalogue, name="ar")
    assert ig.text == (
        "group g0\n"
        "graph ar(arg0_1: f32[8, 4], arg1_1: f32[4, 4]) {\n"
        "  mm = aten::mm(arg0_1, arg1_1)\n"
        '  all_reduce = symm_mem::one_shot_all_reduce(mm, "sum", "g0")\n'
        "  add = aten::add.Scalar(all_reduce, 1)\n"
        "  return add\n"
        "}\n")
    explain = compile_ok(cli, ig.text, 2, "explain")
    assert "compiler-added copies: 0" in explain


def test_c10d_all_reduce_in_place_is_refused_by_aot_autograd(world):
    def fn(x, w):
        h = x @ w
        c10d.all_reduce_(h, "sum", world)
        return c10d.wait_tensor(h) + 1

    with pytest.raises(Exception, match="Found a custom \\(non-ATen\\) operator whose output has "
                                         "alias annotations: _c10d_functional::all_reduce_"):
        aot_graphs(fn, torch.randn(8, 4), torch.randn(4, 4))


def test_unfunctionalized_in_place_all_reduces_stay_in_place(catalogue, cli):
    def build(g):
        x = g.placeholder("x")
        h = call(g, torch.ops.aten.mul.Scalar, x, 2.0)
        r = call(g, c10d.all_reduce_.default, h, "sum", "0")
        w = call(g, c10d.wait_tensor.default, r)
        h2 = call(g, torch.ops.aten.sin.default, w)
        call(g, torch.ops.symm_mem.two_shot_all_reduce_.default, h2, "avg", "0")
        return (call(g, torch.ops.aten.add.Tensor, h2, h),)

    ig = import_graph(fx_graph(build), [torch.empty(32, 64)], world_size=2, rank=0,
                      group_resolver=whole_world(2), catalogue=catalogue, name="inplace")
    assert ig.text == (
        "group g0\n"
        "graph inplace(x: f32[32, 64]) {\n"
        "  mul = aten::mul.Scalar(x, 2.0)\n"
        '  symm_mem::two_shot_all_reduce_(mul, "sum", "g0")\n'
        "  sin = aten::sin(mul)\n"
        '  symm_mem::two_shot_all_reduce_(sin, "avg", "g0")\n'
        "  add = aten::add.Tensor(sin, mul)\n"
        "  return add\n"
        "}\n")
    compile_ok(cli, ig.text, 2)


def test_unfunctionalized_aten_in_place_ops_alias_their_argument(catalogue, cli):
    def build(g):
        x = g.placeholder("x")
        y = g.placeholder("y")
        a = call(g, torch.ops.aten.add_.Tensor, y, x)
        return (call(g, torch.ops.aten.mul.Tensor, a, x),)

    ig = import_graph(fx_graph(build), [torch.empty(4), torch.empty(4)], world_size=1, rank=0,
                      catalogue=catalogue, name="inplace_input")
    assert ig.text == ("graph inplace_input(x: f32[4], y: f32[4]) {\n"
                       "  aten::add_.Tensor(y, x)\n"
                       "  mul = aten::mul.Tensor(y, x)\n"
                       "  return mul\n"
                       "}\n")
    compile_ok(cli, ig.text, 1)


def test_symm_mem_one_shot_on_a_graph_input(world, catalogue, cli):
    fn = lambda x: torch.ops.symm_mem.one_shot_all_reduce(x, "sum", world)  # noqa: E731
    (gm, ex), = aot_graphs(fn, torch.randn(32, 64), run=False)
    ig = import_graph(gm, ex, world_size=2, rank=0, group_resolver=whole_world(2),
                      catalogue=catalogue, name="input_allreduce")
    with open(os.path.join(ROOT, "examples", "input_allreduce.sf")) as f:
        assert structure(ig.text) == structure(f.read())
    assert "compiler-added copies: 1" in compile_ok(cli, ig.text, 2, "explain")


def test_symmflow_in_place_op_arrives_auto_functionalized(world, catalogue, cli, symmflow_ops):
    def fn(x):
        y = x * 2.0
        symmflow_ops.two_shot_all_reduce_(y, "sum", world)
        return y + 1.0

    (gm, ex), = aot_graphs(fn, torch.randn(32, 64))
    hops = [n for n in gm.graph.nodes if n.op == "call_function" and
            getattr(n.target, "__name__", "") == "auto_functionalized_v2"]
    assert len(hops) == 1 and hops[0].kwargs["_all_bases"][0].name == "mul"
    ig = import_graph(gm, ex, world_size=2, rank=0, group_resolver=whole_world(2),
                      catalogue=catalogue, name="inplace_allreduce")
    assert ig.text == (
        "group g0\n"
        "graph inplace_allreduce(arg0_1: f32[32, 64]) {\n"
        "  mul = aten::mul.Scalar(arg0_1, 2.0)\n"
        "  auto_functionalized_v2_input = functional<symm_mem::two_shot_all_reduce_>"
        '(mul, "sum", "g0")\n'
        "  add = aten::add.Scalar(auto_functionalized_v2_input, 1.0)\n"
        "  return add\n"
        "}\n")
    explain = compile_ok(cli, ig.text, 2, "explain")
    assert "compiler-added copies: 0" in explain


def test_symmflow_in_place_op_on_a_graph_input(world, catalogue, cli, symmflow_ops):
    def fn(x):
        symmflow_ops.two_shot_all_reduce_(x, "sum", world)
        return x * 2.0

    (gm, ex), = aot_graphs(fn, torch.randn(32, 64))
    ig = import_graph(gm, ex, world_size=2, rank=0, group_resolver=whole_world(2),
                      catalogue=catalogue, name="inplace_input")
    # AOT autograd returns the input's new value first; its runtime wrapper writes it back.
    assert ig.return_names == ["auto_functionalized_v2_input", "mul"]
    assert ig.outputs == [OutputSource("ir", 0), OutputSource("ir", 1)]
    compile_ok(cli, ig.text, 2)


# --- outputs ----------------------------------------------------------------------------------
def test_outputs_that_are_views_of_inputs_are_left_to_python(world, catalogue, cli):
    def fn(x):
        return funcol.all_reduce(x * 2.0, "sum", world), x, x.t(), x[1:]

    x = torch.randn(8, 4)
    (gm, ex), = aot_graphs(fn, x)
    # AOT autograd drops the output that is an input (its wrapper returns it), keeps the views.
    ig = import_graph(gm, ex, world_size=1, rank=0, group_resolver=whole_world(1),
                      catalogue=catalogue)
    assert ig.return_names == ["all_reduce"]
    assert "permute" not in ig.text  # aten::permute is not needed: Python makes the view
    assert ig.outputs == [OutputSource("ir", 0), OutputSource("python", 0),
                          OutputSource("python", 1)]
    assert ig.notes == ["output 1 (permute) is a view of a graph input: left to Python",
                        "output 2 (slice_1) is a view of a graph input: left to Python"]
    compile_ok(cli, ig.text, 1)
    result = torch.full((8, 4), 7.0)
    out = ig.assemble_outputs([x], [result])
    assert out[0] is result
    assert torch.equal(out[1], x.t()) and out[1].data_ptr() == x.data_ptr()
    assert torch.equal(out[2], x[1:]) and out[2].untyped_storage().data_ptr() == x.data_ptr()


def test_outputs_repeated_inputs_and_none(catalogue, cli):
    def build(g):
        x = g.placeholder("x")
        y = call(g, torch.ops.aten.sin.default, x)
        return (y, x, y, None)

    x = torch.randn(4)
    ig = import_graph(fx_graph(build), [x], world_size=1, rank=0, catalogue=catalogue)
    assert ig.return_names == ["sin"]
    assert ig.outputs == [OutputSource("ir", 0), OutputSource("input", 0),
                          OutputSource("ir", 0), OutputSource("none")]
    assert ig.notes == ["output 1 is input x: left to Python"]
    y = torch.sin(x)
    assert ig.assemble_outputs([x], [y]) == (y, x, y, None)
    compile_ok(cli, ig.text, 1)


# --- partitioning -----------------------------------------------------------------------------
def mlp_with(world, middle):
    def fn(x, w0, w1):
        h = funcol.all_reduce(torch.mm(x, w0), "sum", world)
        h = middle(h)
        return funcol.all_reduce(torch.mm(h, w1), "sum", world)
    return fn


def mlp_inputs():
    torch.manual_seed(1)
    return torch.randn(16, 64), torch.randn(64, 64) / 8, torch.randn(64, 64) / 8


def test_unsupported_op_in_the_middle_gives_two_boundaries(world, catalogue, cli):
    fn = mlp_with(world, lambda h: torch.cumsum(h, 0) / 4.0)
    inputs = mlp_inputs()
    out, results = run_split(fn, catalogue, *inputs)
    assert_same(out, fn(*inputs))
    r, = results
    assert [(p.name, p.supported) for p in r.partitions] == [
        ("symmflow_0", True), ("torch_0", False), ("symmflow_1", True)]
    assert r.partitions[1].reason == \
        "aten.cumsum.default at node cumsum is not in symmflow's catalogue"
    assert r.boundaries == [
        "boundary 1: aten.cumsum.default at node cumsum is not in symmflow's catalogue "
        "(symmflow_0 -> torch_0)",
        "boundary 2: aten.cumsum.default at node cumsum is not in symmflow's catalogue "
        "(torch_0 -> symmflow_1)"]
    assert [(s is r.partitions[i].submodule, ok) for i, (s, ok, _) in enumerate(r)] == \
        [(True, True), (True, False), (True, True)]


def test_partitions_import_and_compile(world, catalogue, cli):
    """Every partition the support check accepts imports and compiles (the check is the
    importer's own translation)."""
    compiled = []

    def compile_partition(sub, example_inputs):
        ig = import_graph(sub, example_inputs, world_size=2, rank=1,
                          group_resolver=whole_world(2), catalogue=catalogue)
        compile_ok(cli, ig.text, 2)
        compiled.append(ig)
        return sub

    fn = mlp_with(world, lambda h: torch.cumsum(h, 0) / 4.0)
    (gm, ex), = aot_graphs(fn, *mlp_inputs())
    r = partition(gm, catalogue, compile_partition=compile_partition)
    assert len(compiled) == 2
    assert "symm_mem::one_shot_all_reduce" in compiled[0].text
    assert "aten::div.Scalar" in compiled[1].text
    inputs = mlp_inputs()
    assert_same(r.split_gm(*inputs), gm(*inputs))


def test_wait_on_a_collective_left_to_pytorch_stays_with_it(catalogue):
    def build(g):
        x = g.placeholder("x")
        a = call(g, c10d.all_to_all_single.default, x, [4, 4], [4, 4], "0")
        w = call(g, c10d.wait_tensor.default, a)
        return (call(g, torch.ops.aten.sin.default, w),)

    gm = fx_graph(build)
    r = partition(gm, catalogue, example_inputs=[torch.randn(8, 4)])
    assert [(p.name, p.supported) for p in r.partitions] == [("torch_0", False),
                                                             ("symmflow_0", True)]
    assert [n.name for n in r.partitions[0].submodule.graph.nodes
            if n.op == "call_function"] == ["all_to_all_single", "wait_tensor"]


def test_sequence_parallel_block_gathers_and_scatters(world, catalogue, cli):
    """The sequence-parallel form: all-gather before attention and MLP, reduce-scatter after."""
    class SPBlock(DecoderBlock):
        def forward(self, x, cos, sin):
            full = funcol.all_gather_single(x, 0, self.group)
            h = self.norm1(full)
            y = funcol.reduce_scatter_single(self.o(self.q(h)), "sum", 0, self.group)
            x = x + y
            h = self.norm2(funcol.all_gather_single(x, 0, self.group))
            return x + funcol.reduce_scatter_single(
                self.down(F.silu(self.gate(h)) * self.up(h)), "sum", 0, self.group)

    block = SPBlock(world)
    inputs = block_inputs()
    (gm, ex), = aot_graphs(block, *inputs)
    grown = with_ops(catalogue, BLOCK_OPS)
    ig = import_graph(gm, ex, world_size=1, rank=0, group_resolver=whole_world(1),
                      catalogue=grown)
    assert ig.text.count("symm_mem::_low_contention_all_gather(") == 2
    assert ig.text.count("symm_mem::_low_contention_reduce_scatter(") == 2
    out, (r,) = run_split(block, catalogue, *inputs)
    with torch.no_grad():
        assert_close_to_eager(out, block(*inputs))
    gathers = [p for p in r.partitions if p.supported and any(
        "all_gather" in str(n.target) for n in p.submodule.graph.nodes)]
    assert len(gathers) == 2


def test_partitioning_is_deterministic(world, catalogue):
    (gm, ex), = aot_graphs(DecoderBlock(world), *block_inputs())
    first = partition(gm, catalogue)
    for _ in range(2):
        again = partition(gm, catalogue)
        assert again.boundaries == first.boundaries
        assert [(p.name, p.supported, p.reason, p.submodule.code) for p in again.partitions] == \
            [(p.name, p.supported, p.reason, p.submodule.code) for p in first.partitions]


def test_decoder_block_with_torch_sdpa(world, catalogue):
    """AOT autograd decomposes F.scaled_dot_product_attention into a masked softmax; the
    partitioner keeps what symmflow lacks in PyTorch, names each boundary, and the split module
    computes the block exactly."""
    block = DecoderBlock(world)
    inputs = block_inputs()
    (gm, ex), = aot_graphs(block, *inputs)
    ops = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert {"aten.bmm.default", "aten._softmax.default", "aten.where.self",
            "aten.logical_and.default", "aten.arange.start_step", "aten.expand.default",
            "aten.scalar_tensor.default"} <= ops
    assert "aten._scaled_dot_product_flash_attention_for_cpu.default" not in ops
    out, (r,) = run_split(block, catalogue, *inputs)
    with torch.no_grad():
        assert_close_to_eager(out, block(*inputs))
    assert len(r.boundaries) >= 2
    for b in r.boundaries:
        assert "is not in symmflow's catalogue" in b or "has no IR literal" in b, b
    for p in r.partitions:
        for n in p.submodule.graph.nodes:
            if n.op == "call_function" and p.supported:
                assert _opmap.qualified_name(n.target) not in ("aten.permute.default",
                                                               "aten.rsqrt.default")
    # With the ops the catalogue is getting, the decomposed causal mask (arange, comparisons,
    # logical ops, where, scalar_tensor(-inf)) still falls back; the rest runs in symmflow.
    grown = with_ops(catalogue, BLOCK_OPS)
    out, (r,) = run_split(block, grown, *inputs)
    with torch.no_grad():
        assert_close_to_eager(out, block(*inputs))
    why = "is not in symmflow's catalogue"
    assert r.boundaries == [
        f"boundary 1: aten.arange.start_step at node arange {why} (torch_0 -> symmflow_0)",
        f"boundary 2: aten.le.Scalar at node le {why} (symmflow_0 -> torch_1)",
        f"boundary 3: aten.where.self at node where {why} (torch_1 -> symmflow_1)",
        f"boundary 4: aten.eq.Scalar at node eq {why} (symmflow_1 -> torch_2)",
        f"boundary 5: aten.where.self at node where_1 {why} (torch_2 -> symmflow_2)"]
    assert [n.name for n in r.partitions[2].submodule.graph.nodes
            if n.op == "call_function"] == ["le", "logical_and", "scalar_tensor",
                                            "scalar_tensor_1", "where"]


def test_decoder_block_with_symmflow_sdpa_is_one_partition(world, catalogue, symmflow_ops):
    block = DecoderBlock(world, sdpa="symmflow")
    inputs = block_inputs()
    (gm, ex), = aot_graphs(block, *inputs)
    grown = with_ops(catalogue, BLOCK_OPS)
    ig = import_graph(gm, ex, world_size=4, rank=0, group_resolver=whole_world(4),
                      catalogue=grown, name="decoder_block")
    assert "aten::scaled_dot_product_attention(" in ig.text
    assert "None, 0.0, True, enable_gqa=True)" in ig.text
    assert ig.text.count("symm_mem::one_shot_all_reduce(") == 2
    out, (r,) = run_split(block, grown, *inputs)
    with torch.no_grad():
        assert_close_to_eager(out, block(*inputs))
    assert [(p.name, p.supported) for p in r.partitions] == [("symmflow_0", True)]
    assert r.boundaries == []


def test_decoder_block_with_an_unsupported_op_gives_two_boundaries(world, catalogue,
                                                                   symmflow_ops):
    block = DecoderBlock(world, sdpa="symmflow", extra=lambda x: x + torch.cumsum(x, 0) / 64.0)
    inputs = block_inputs()
    out, (r,) = run_split(block, with_ops(catalogue, BLOCK_OPS), *inputs)
    with torch.no_grad():
        assert_close_to_eager(out, block(*inputs))
    assert [(p.name, p.supported) for p in r.partitions] == [
        ("symmflow_0", True), ("torch_0", False), ("symmflow_1", True)]
    assert r.boundaries == [
        "boundary 1: aten.cumsum.default at node cumsum is not in symmflow's catalogue "
        "(symmflow_0 -> torch_0)",
        "boundary 2: aten.cumsum.default at node cumsum is not in symmflow's catalogue "
        "(torch_0 -> symmflow_1)"]


# --- the catalogue and the docs table ---------------------------------------------------------
def test_catalogue_from_the_ops_listing(catalogue):
    mm = catalogue.ops["aten::mm"]
    assert mm["schema"] == "aten::mm(Tensor self, Tensor mat2) -> Tensor"
    assert mm["backends"] == ["cpu"]
    assert catalogue.ops["symm_mem::one_shot_all_reduce"]["tags"] == ["collective"]
    assert catalogue.has("aten::add.Tensor") and not catalogue.has("aten::add")


def test_docs_table_is_current():
    with open(os.path.join(ROOT, "docs", "pytorch_ops_table.md"), encoding="utf-8") as f:
        assert f.read() == _opmap.render_table_markdown(), \
            "regenerate: PYTHONPATH=python python3 -m symmflow.torch._opmap --write " \
            "docs/pytorch_ops_table.md"
