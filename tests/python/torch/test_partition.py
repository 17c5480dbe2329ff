"""symmflow.torch capability-based partitioning: symmflow partitions hold exactly what the importer
translates, boundaries name the unsupported node, and the split module computes what the
unsplit graph does, element by element (each partition run eagerly)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

from conftest import compile_ok
from fx_models import (BLOCK_OPS, MASK_OPS, without_ops, DecoderBlock, aot_graphs, assert_close_to_eager, assert_same,
                       block_inputs, c10d, call, fx_graph, mlp_inputs, mlp_with, run_split,
                       whole_world, with_ops)
import symmflow
from symmflow.torch import _backend, _opmap
from symmflow.torch._fx_import import import_graph
from symmflow.torch._partition import partition


def test_unsupported_op_in_the_middle_gives_two_boundaries(world, catalogue, cli):
    fn = mlp_with(world, lambda h: torch.special.i0(h) / 4.0)
    inputs = mlp_inputs()
    out, results = run_split(fn, catalogue, *inputs)
    assert_same(out, fn(*inputs))
    r, = results
    assert [(p.name, p.supported) for p in r.partitions] == [
        ("symmflow_0", True), ("torch_0", False), ("symmflow_1", True)]
    assert r.partitions[1].reason == \
        "aten.i0.default at node i0 is not in symmflow's catalogue"
    assert r.boundaries == [
        "boundary 1: aten.i0.default at node i0 is not in symmflow's catalogue "
        "(symmflow_0 -> torch_0)",
        "boundary 2: aten.i0.default at node i0 is not in symmflow's catalogue "
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

    fn = mlp_with(world, lambda h: torch.special.i0(h) / 4.0)
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
        # unequal splits: symm_mem::all_to_all takes equal ones only (Note [equal splits])
        a = call(g, c10d.all_to_all_single.default, x, [3, 5], [3, 5], "0")
        w = call(g, c10d.wait_tensor.default, a)
        return (call(g, torch.ops.aten.sin.default, w),)

    gm = fx_graph(build)
    r = partition(gm, catalogue, example_inputs=[torch.randn(8, 4)])
    assert [(p.name, p.supported) for p in r.partitions] == [("torch_0", False),
                                                             ("symmflow_0", True)]
    assert [n.name for n in r.partitions[0].submodule.graph.nodes
            if n.op == "call_function"] == ["all_to_all_single", "wait_tensor"]


def test_collective_of_a_dtype_symmflow_lacks_stays_in_pytorch_with_its_wait(catalogue):
    def build(g):
        x = g.placeholder("x")
        y = call(g, torch.ops.aten.mul.Scalar, x, 2)
        a = call(g, c10d.all_reduce.default, y, "sum", "0")
        w = call(g, c10d.wait_tensor.default, a)
        return (call(g, torch.ops.aten.mul.Scalar, w, 3),)

    gm = fx_graph(build)
    r = partition(gm, catalogue, example_inputs=[torch.ones(8, dtype=torch.int8)],
                  device="cpu")
    assert [(p.name, p.supported) for p in r.partitions] == [
        ("symmflow_0", True), ("torch_0", False), ("symmflow_1", True)]
    assert [n.name for n in r.partitions[1].submodule.graph.nodes
            if n.op == "call_function"] == ["all_reduce", "wait_tensor"]
    assert r.partitions[1].reason == (
        "_c10d_functional.all_reduce.default at node all_reduce: symm_mem::one_shot_all_reduce: "
        "dtype i8 has no cpu reduction (f32, bf16, f16, f64, i32, i64)")


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
    gathers = [n for p in r.partitions if p.supported for n in p.submodule.graph.nodes
               if "all_gather" in str(n.target)]
    assert len(gathers) == 2
    assert [(p.name, p.supported) for p in r.partitions] == [("symmflow_0", True)]


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
    # symmflow has every op of the decomposed mask, and -inf is an IR literal (Note [non-finite
    # literals] in src/ir/lexer.cpp): the whole block is one partition.
    out, (r,) = run_split(block, catalogue, *inputs)
    with torch.no_grad():
        assert_close_to_eager(out, block(*inputs))
    assert r.boundaries == [], r.boundaries
    assert [(p.name, p.supported) for p in r.partitions] == [("symmflow_0", True)]
    # Without the mask ops (a build whose catalogue lacks them), the mask falls back; the rest
    # runs in symmflow, every boundary named.
    lacking = without_ops(catalogue, MASK_OPS)
    out, (r,) = run_split(block, lacking, *inputs)
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
    assert ", None, 0.0, True" in ig.text and "enable_gqa=True)" in ig.text
    assert ig.text.count("symm_mem::one_shot_all_reduce(") == 2
    out, (r,) = run_split(block, grown, *inputs)
    with torch.no_grad():
        assert_close_to_eager(out, block(*inputs))
    assert [(p.name, p.supported) for p in r.partitions] == [("symmflow_0", True)]
    assert r.boundaries == []


def test_decoder_block_with_an_unsupported_op_gives_two_boundaries(world, catalogue,
                                                                   symmflow_ops):
    block = DecoderBlock(world, sdpa="symmflow", extra=lambda x: x + torch.special.i0(x) / 64.0)
    inputs = block_inputs()
    out, (r,) = run_split(block, with_ops(catalogue, BLOCK_OPS), *inputs)
    with torch.no_grad():
        assert_close_to_eager(out, block(*inputs))
    assert [(p.name, p.supported) for p in r.partitions] == [
        ("symmflow_0", True), ("torch_0", False), ("symmflow_1", True)]
    assert r.boundaries == [
        "boundary 1: aten.i0.default at node i0 is not in symmflow's catalogue "
        "(symmflow_0 -> torch_0)",
        "boundary 2: aten.i0.default at node i0 is not in symmflow's catalogue "
        "(torch_0 -> symmflow_1)"]


def test_the_decomposed_decoder_block_imports_and_compiles_whole(world, catalogue, cli):
    compiled = []

    def compile_partition(sub, example_inputs):
        ig = import_graph(sub, example_inputs, world_size=2, rank=0,
                          group_resolver=whole_world(2), catalogue=catalogue,
                          name=f"part{len(compiled)}")
        compile_ok(cli, ig.text, 2)
        compiled.append(ig)
        return sub

    block = DecoderBlock(world)
    inputs = block_inputs()
    out, (r,) = run_split(block, catalogue, *inputs, compile_partition=compile_partition)
    assert len(compiled) == sum(p.supported for p in r.partitions) == 1
    assert sum(ig.text.count("symm_mem::one_shot_all_reduce(") for ig in compiled) == 2
    with torch.no_grad():
        assert_close_to_eager(out, block(*inputs))


def test_a_partition_of_views_alone_stays_in_pytorch(catalogue):
    def build(g):
        x = g.placeholder("x")
        a = call(g, torch.ops.aten.i0.default, x)
        v = call(g, torch.ops.aten.view.default, a, [4, 4])
        return (call(g, torch.ops.aten.i0.default, v),)

    r = partition(fx_graph(build), catalogue, example_inputs=[torch.randn(16)])
    assert [(p.name, p.supported) for p in r.partitions] == [("torch_0", False)]
    assert r.boundaries == []


def test_an_op_without_a_kernel_for_the_device_stays_in_pytorch(world, catalogue):
    """Note [kernels per device]: in a GPU graph, an op the registry has only for the CPU is left
    to PyTorch with the reason, instead of failing the compile when the session is built."""
    try:  # the builder for cuda asks the cuda kernels: load them (no GPU needed)
        symmflow.compile("graph g(x: f32[2]) {\n  return x\n}\n", device="cuda")
    except symmflow.Error as e:
        pytest.skip(f"built without the cuda backend: {e}")
    fn = mlp_with(world, lambda h: torch.sigmoid(h) * 2.0)
    (gm, _), = aot_graphs(fn, *mlp_inputs())
    ops = [dict(o) for o in catalogue.ops.values()]
    for o in ops:
        o["backends"] = ["cpu"] if o["name"] == "aten::sigmoid" else ["cpu", "cuda"]
    cpu_only_sigmoid = _opmap.Catalogue.from_list(ops)
    on_gpu = partition(gm, cpu_only_sigmoid, device="cuda:0")
    assert [(p.name, p.supported) for p in on_gpu.partitions] == [
        ("symmflow_0", True), ("torch_0", False), ("symmflow_1", True)]
    assert on_gpu.partitions[1].reason == (
        "aten.sigmoid.default at node sigmoid: aten::sigmoid has no cuda kernel "
        "(backends: cpu)")
    assert all("has no cuda kernel" in b for b in on_gpu.boundaries), on_gpu.boundaries
    # The same graph on the CPU, or with no device given, is one partition.
    for device in ("cpu", None):
        whole = partition(gm, cpu_only_sigmoid, device=device)
        assert [p.supported for p in whole.partitions] == [True], device
    inputs = mlp_inputs()
    assert_same(on_gpu.split_gm(*inputs), gm(*inputs))


# --- Note [one-partition call] (_backend._direct_call) -------------------------------------------
def _split_of(gm, catalogue, inputs):
    """The split module with each symmflow partition run by its FX submodule."""
    return partition(gm, catalogue, example_inputs=inputs,
                     compile_partition=lambda sub, example_inputs: sub).split_gm


def test_a_one_partition_graph_is_called_directly(catalogue):
    def build(g):  # outputs reordered, one twice, one as the partition's single value
        x, y = g.placeholder("x"), g.placeholder("y")
        a = call(g, torch.ops.aten.mul.Tensor, x, y)
        b = call(g, torch.ops.aten.sin.default, y)
        return (b, a, b)

    inputs = [torch.randn(5, 7), torch.randn(5, 7)]
    split = _split_of(fx_graph(build), catalogue, inputs)
    direct = _backend._direct_call(split)
    assert direct is not None, split.graph
    got, want = direct(*inputs), split(*inputs)
    assert type(got) is type(want) and len(got) == 3
    for g, w in zip(got, want):
        assert_same(g, w)
    assert got[0] is got[2]

    def single(g):
        x = g.placeholder("x")
        return call(g, torch.ops.aten.cos.default, x)

    split = _split_of(fx_graph(single), catalogue, inputs[:1])
    direct = _backend._direct_call(split)
    assert direct is not None, split.graph
    assert_same(direct(inputs[0]), split(inputs[0]))


def test_a_graph_of_several_partitions_or_returning_an_input_keeps_its_module(catalogue):
    def two(g):
        x = g.placeholder("x")
        a = call(g, torch.ops.aten.sin.default, x)
        b = call(g, torch.ops.aten.i0.default, a)
        return (call(g, torch.ops.aten.cos.default, b),)

    def passthrough(g):
        x = g.placeholder("x")
        return (call(g, torch.ops.aten.sin.default, x), x)

    x = torch.randn(4, 3)
    for build in (two, passthrough):
        split = _split_of(fx_graph(build), catalogue, [x])
        assert _backend._direct_call(split) is None, split.graph
