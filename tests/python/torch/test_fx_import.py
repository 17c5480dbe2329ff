"""symmflow.torch graph import: FX (AOT autograd ATen) graphs -> symmflow IR text, compiled with
the `symmflow` command; what torch 2.13 hands over for in-place collectives; the docs table."""

from __future__ import annotations

import operator
import os

import re

import pytest
import torch
import torch.distributed._functional_collectives as funcol
from torch.fx.experimental.proxy_tensor import make_fx

from conftest import ROOT, compile_ok, structure
from fx_models import aot_graphs, c10d, call, fx_graph, tp_mlp, whole_world
from symmflow.torch import _opmap
from symmflow.torch._fx_import import OutputSource, UnsupportedGraph, import_graph


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
    assert str(e.value) == ("_c10d_functional.all_reduce.default at node all_reduce: "
                            "symm_mem::one_shot_all_reduce: unknown reduce_op 'product' (valid: "
                            "sum, avg, max, min)")


def test_unsupported_node_error_names_node_and_op(catalogue):
    def build(g):
        x = g.placeholder("x")
        y = call(g, torch.ops.aten.sin.default, x)
        return call(g, torch.ops.aten.i0.default, y)

    with pytest.raises(UnsupportedGraph) as e:
        import_graph(fx_graph(build), [torch.empty(4)], world_size=1, rank=0,
                     catalogue=catalogue)
    assert str(e.value) == "aten.i0.default at node i0 is not in symmflow's catalogue"
    assert (e.value.node, e.value.op) == ("i0", "aten.i0.default")


def test_literals_non_finite_floats_import_and_other_dtypes_are_refused(catalogue, cli):
    def build(g):
        x = g.placeholder("x")
        y = call(g, torch.ops.aten.mul.Scalar, x, float("-inf"))
        return (call(g, torch.ops.aten.add.Scalar, y, float("nan")),)

    ig = import_graph(fx_graph(build), [torch.empty(4)], world_size=1, rank=0,
                      catalogue=catalogue, name="nonfinite")
    assert ig.text == ("graph nonfinite(x: f32[4]) {\n"
                       "  mul = aten::mul.Scalar(x, -inf)\n"
                       "  add = aten::add.Scalar(mul, nan)\n"
                       "  return add\n"
                       "}\n")
    compile_ok(cli, ig.text, 1)
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


def test_alias_nodes_are_their_argument(catalogue, cli):
    """torch 2.11 traces funcol.all_reduce on a world of one as aten.alias (seen on the GPU
    machine): the alias is the same value, no statement, and the graph stays one partition."""
    def build(g):
        x = g.placeholder("x")
        w = g.placeholder("w")
        h = call(g, torch.ops.aten.mm.default, x, w)
        a = call(g, torch.ops.aten.alias.default, h)
        return (call(g, torch.ops.aten.mm.default, a, w),)

    ig = import_graph(fx_graph(build), [torch.empty(4, 8), torch.empty(8, 8)], world_size=1,
                      rank=0, catalogue=catalogue, name="alias")
    assert ig.text == ("graph alias(x: f32[4, 8], w: f32[8, 8]) {\n"
                       "  mm = aten::mm(x, w)\n"
                       "  mm_1 = aten::mm(mm, w)\n"
                       "  return mm_1\n"
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


def test_several_results_get_names_distinct_from_every_node(catalogue, cli, symmflow_ops):
    def build(g):
        x, r, w = g.placeholder("x"), g.placeholder("r"), g.placeholder("w")
        f = call(g, symmflow_ops.fused_all_reduce_add_rms_norm.default, x, r, w, 1e-05, "sum",
                 "0", name="f")
        out = g.call_function(operator.getitem, (f, 0), name="out")
        res = g.call_function(operator.getitem, (f, 1), name="res")
        return (call(g, torch.ops.aten.add.Tensor, out, res, name="f_0"),)

    ig = import_graph(fx_graph(build), [torch.empty(16, 64), torch.empty(16, 64),
                                        torch.empty(64)], world_size=2, rank=0,
                      group_resolver=whole_world(2), catalogue=catalogue, name="fused")
    assert ig.text == (
        "group g0\n"
        "graph fused(x: f32[16, 64], r: f32[16, 64], w: f32[64]) {\n"
        "  f_0, f_1 = symm_mem::fused_all_reduce_add_rms_norm(x, r, w, 1e-05, \"sum\", "
        "\"g0\")\n"
        "  f_0_1 = aten::add.Tensor(f_0, f_1)\n"
        "  return f_0_1\n"
        "}\n")
    compile_ok(cli, ig.text, 2)


def test_in_place_op_on_a_view_is_refused(world, catalogue, symmflow_ops):
    def fn(x):
        y = x * 2.0
        symmflow_ops.two_shot_all_reduce_(y[2:6], "sum", world)
        return y + 1.0

    (gm, ex), = aot_graphs(fn, torch.randn(8, 4))
    with pytest.raises(UnsupportedGraph) as e:
        import_graph(gm, ex, world_size=1, rank=0, group_resolver=whole_world(1),
                     catalogue=catalogue)
    assert str(e.value) == (
        "auto_functionalized_v2(symmflow.two_shot_all_reduce_.default) at node "
        "auto_functionalized_v2: argument 'input' is a view of its base (in-place ops on views "
        "are not supported)")
    assert e.value.op == "symmflow.two_shot_all_reduce_.default"


@pytest.mark.parametrize("case", ["cache", "middle", "two", "trailing", "accumulate"])
def test_index_put_with_none_entries_is_imported_and_equals_eager(world, case):
    """Note [index lists with None]: `cache[:, :, pos] = k` (index_put with None entries) compiles
    to one partition with index tensors alone, writing what PyTorch writes."""
    import symmflow.torch as sft

    torch._dynamo.reset()
    index_put = torch.ops.aten.index_put.default
    cache = torch.randn(2, 3, 8, 4)
    pos, pos1, rows = torch.tensor([5, 1]), torch.tensor([2, 0]), torch.tensor([[0], [2]])
    values = {"cache": (2, 3, 2, 4), "middle": (2, 2, 8, 4), "two": (2, 2, 2, 4),
              "trailing": (2, 2, 8, 4), "accumulate": (2, 3, 2, 4)}

    def f(c, v):
        if case == "cache":  # StaticCache's update: leading Nones, one index
            out = index_put(c, [None, None, pos], v)
        elif case == "middle":
            out = index_put(c, [None, pos1], v)
        elif case == "two":  # two index tensors broadcast to [2, 2] after a leading None
            out = index_put(c, [None, rows, pos], v)
        elif case == "trailing":  # a trailing None means an omitted index
            out = index_put(c, [None, pos1, None], v)
        else:
            out = index_put(c, [None, None, pos], v, True)
        return out * 2.0

    v = torch.randn(*values[case])
    want = f(cache, v)
    with torch.no_grad():
        got = torch.compile(f, backend="symmflow")(cache, v)
    torch.testing.assert_close(got, want)
    report = sft.last_report()
    assert report.partition_count == 1 and list(report.boundaries) == [], report.text()[:2000]


@pytest.mark.parametrize("case", ["cache", "read_before", "counter", "counter_sub", "mask"])
def test_kv_cache_mutated_in_the_graph_stays_the_callers_storage(world, case):
    """Note [the KV cache in place]: `cache[:, :, pos] = k` on a graph input writes the caller's
    tensor in place inside the plan (index_put_, no copy in or out); a counter's `add_` of a
    number, or `sub_` of a tensor, is added in the caller's tensor too (Note [counters in place]:
    it was an 8-byte writeback copy); a bool mask keeps the functional index_put and its writeback
    copy, and so does a cache whose old value is read after the write (here fused into the kernel
    that reads the new one). Every case equals eager's result and eager's mutation of the
    inputs."""
    import symmflow.torch as sft

    torch._dynamo.reset()
    pos = torch.tensor([5, 1])

    def f(cache, k, n):
        if case == "read_before":  # the old cache is read before the write
            y = cache * 3.0
            cache[:, :, pos] = k
            return y + cache
        if case == "counter":
            n.add_(2)
        if case == "counter_sub":
            n.sub_(torch.ones_like(n))
        if case == "mask":
            cache[cache > 1.0] = 0.0
        else:
            cache[:, :, pos] = k
        return (cache * 2.0).sum(-1), n * 1

    cache, k, n = torch.randn(2, 3, 8, 4), torch.randn(2, 3, 2, 4), torch.tensor([7])
    want_cache, want_n = cache.clone(), n.clone()
    want = f(want_cache, k, want_n)
    address = cache.data_ptr()
    with torch.no_grad():
        got = torch.compile(f, backend="symmflow")(cache, k, n)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(cache, want_cache, rtol=0, atol=0)
    torch.testing.assert_close(n, want_n, rtol=0, atol=0)
    assert cache.data_ptr() == address
    report = sft.last_report()
    assert report.partition_count == 1 and list(report.boundaries) == [], report.text()[:3000]
    (part,) = report.partitions
    copies = part.copies()
    if case == "mask":  # the functional index_put's result is copied into the caller's cache
        assert [c["kind"] for c in copies] == ["writeback"], copies
        assert copies[0]["bytes"] == cache.numel() * 4, copies
    elif case == "read_before":  # fused with the read of the old cache: the write must copy
        assert [c["kind"] for c in copies] == ["functional", "writeback"], copies
        assert "'cache' (argument 'self') is read after the write" in copies[0]["reason"], copies
    elif case.startswith("counter"):  # the counter and the cache, both in place
        assert copies == [] and report.copies_added() == 0, report.text()[:3000]
        assert re.search(r"\d+ aten::index_put_ ", part.explain_text), part.explain_text[:3000]
        op = "add_" if case == "counter" else "sub_"
        assert re.search(rf"\d+ aten::{op}\.Tensor ", part.explain_text), \
            part.explain_text[:3000]
    else:
        assert copies == [] and report.copies_added() == 0, report.text()[:3000]
        assert re.search(r"\d+ aten::index_put_ ", part.explain_text), part.explain_text[:3000]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_repeated_kv_heads_are_read_in_place_with_enable_gqa(world, dtype, monkeypatch):
    """Note [attention reads grouped heads in place]: transformers' repeat_kv before attention
    with a mask (6 query heads over 2 KV heads) becomes one attention with enable_gqa reading the
    cache where it lies: no expand's copy in the plan, eager's numbers, and bit for bit the numbers
    of the plan that keeps the copy (the pass skipped)."""
    import torch.nn.functional as F
    from transformers.models.llama.modeling_llama import repeat_kv

    import symmflow.torch as sft

    def f(q, kc, vc, mask):
        k, v = repeat_kv(kc, 3), repeat_kv(vc, 3)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask) * 2.0

    q, kc, vc = (torch.randn(2, h, s, 12, dtype=dtype) for h, s in ((6, 3), (2, 5), (2, 5)))
    mask = torch.rand(2, 1, 3, 5) > 0.3
    mask[..., 0] = True  # no row fully masked
    want = f(q, kc, vc, mask)
    steps, got = {}, {}
    for skip in ("", "raise_gqa"):
        monkeypatch.setenv("SYMMFLOW_SKIP_PASSES", skip)
        torch._dynamo.reset()
        with torch.no_grad():
            got[skip] = torch.compile(f, backend="symmflow")(q, kc, vc, mask)
        tol = 1e-5 if dtype == torch.float32 else 3e-2  # another kernel: rounds elsewhere
        torch.testing.assert_close(got[skip], want, rtol=tol, atol=tol)
        report = sft.last_report()
        assert report.partition_count == 1, report.text()[:2000]
        steps[skip] = report.partitions[0].explain_text
    torch.testing.assert_close(got[""], got["raise_gqa"], rtol=0, atol=0)  # bit for bit
    assert "aten::scaled_dot_product_attention" in steps[""], steps[""][:3000]
    assert "aten::clone" not in steps[""] and "aten::expand" not in steps[""], steps[""][:3000]
    assert "aten::clone" in steps["raise_gqa"], steps["raise_gqa"][:3000]


def test_verify_mode_checks_a_written_back_input_against_pytorchs_write(world, monkeypatch):
    """SYMMFLOW_TORCH_VERIFY=1 with inputs the program writes (a cache, a counter): PyTorch's run
    on copies of the inputs as they were gives the reference for the outputs and for the written
    inputs (the counter is not advanced twice); a written input that differs is named."""
    from symmflow.torch import _runner

    monkeypatch.setenv("SYMMFLOW_TORCH_VERIFY", "1")
    pos = torch.tensor([3])

    def f(cache, k, n):
        n.add_(1)
        cache[:, pos] = k
        return cache.sum(0) * n

    cache, k, n = torch.randn(2, 6), torch.randn(2, 1), torch.tensor([4])
    want_cache, want_n = cache.clone(), n.clone()
    want = f(want_cache, k, want_n)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(f, backend="symmflow")(cache, k, n)
    torch.testing.assert_close(got, want)
    assert torch.equal(cache, want_cache) and torch.equal(n, want_n)  # n is 5, not 6
    checked = _runner._check_close  # a written input that differs: simulated by adding 1
    monkeypatch.setattr(_runner, "_check_close",
                        lambda w, g, what: checked(w, g + 1 if "written back" in what else g, what))
    torch._dynamo.reset()
    with torch.no_grad(), pytest.raises(Exception) as e:
        torch.compile(f, backend="symmflow")(cache.clone(), k, n.clone())
    assert "SYMMFLOW_TORCH_VERIFY: input 0 of partition_0 as written back differs from " \
        "PyTorch's: max error " in str(e.value), str(e.value)


@pytest.mark.parametrize("verify", ["0", "1"])
def test_an_int_that_changes_every_call_is_a_0_dim_input(world, monkeypatch, verify):
    """Note [ints that change every call]: an int argument dynamo made a SymInt (it changed
    between calls) is an i64[] input; the int arithmetic on it (add, sub, reversed sub, mul,
    max and min against a literal), a tensor op taking it and an int output stay in one
    partition, equal to eager's at every value; an int that sizes a tensor is left to PyTorch.
    Under SYMMFLOW_TORCH_VERIFY=1 too: PyTorch's run of the partition gets the int as an int
    (it was given the i64[] tensor, and torch.sym_max raised on it)."""
    import symmflow.torch as sft

    monkeypatch.setenv("SYMMFLOW_TORCH_VERIFY", verify)
    torch._dynamo.reset()

    def f(x, n):
        lo = max(n - 6, 0)  # torch.sym_max
        hi = min(3 * n, 20)  # torch.sym_min
        y = x * (10 - n) + torch.arange(4) * lo + hi
        return y, n + 1

    compiled = torch.compile(f, backend="symmflow")
    x = torch.arange(4.0)
    for n in (3, 5, 9, 2, 11):
        got, want = compiled(x, n), f(x, n)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        assert got[1] == want[1] and isinstance(got[1], int), (got, want)
    report = sft.last_report()
    assert report.partition_count == 1 and list(report.boundaries) == [], report.text()[:3000]
    assert ": i64[]" in report.partitions[0].ir_text, report.partitions[0].ir_text
    assert "aten::clamp(" in report.partitions[0].ir_text, report.partitions[0].ir_text

    torch._dynamo.reset()

    def g(x, n):
        return x[:n] * 2.0  # a dynamic shape

    compiled = torch.compile(g, backend="symmflow")
    x = torch.arange(8.0)
    for n in (3, 5, 6):
        torch.testing.assert_close(compiled(x, n), g(x, n))


def test_int_arithmetic_symmflow_cannot_take_is_left_to_pytorch_and_named(world):
    """Note [ints that change every call]: the max of two computed ints (no clamp form) is
    refused by name and runs in PyTorch, with eager's result."""
    import symmflow.torch as sft

    torch._dynamo.reset()

    def f(x, n, m):
        return x * max(n, m)

    compiled = torch.compile(f, backend="symmflow")
    x = torch.arange(4.0)
    for n, m in ((3, 5), (7, 2), (4, 9)):
        torch.testing.assert_close(compiled(x, n, m), f(x, n, m), rtol=0, atol=0)
    text = " ".join(sft.last_report().boundaries)
    assert "the max of two computed ints" in text, sft.last_report().text()[:2000]


def test_the_catalogue_knows_in_place_variants_from_either_source():
    """Note [counters in place] asks the registry for an op's in-place variant: the same answer
    from `_core.ops()` and from the `symmflow ops` listing the bridge falls back to."""
    import subprocess

    from symmflow.torch import _opmap

    direct = _opmap.load_catalogue()
    listing = subprocess.run([_opmap.find_cli(), "ops"], capture_output=True, text=True,
                             check=True).stdout
    parsed = _opmap.Catalogue.from_list(_opmap.parse_ops_listing(listing))
    for catalogue in (direct, parsed):
        assert catalogue.inplace_of("aten::add.Tensor") == "aten::add_.Tensor"
        assert catalogue.inplace_of("aten::sub.Tensor") == "aten::sub_.Tensor"
        assert catalogue.inplace_of("aten::mm") is None
        assert catalogue.inplace_of("no::such_op") is None
