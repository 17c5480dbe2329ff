"""symm_mem::all_to_all from PyTorch (Note [equal splits] in _fx_import.py, Note [equal
all-to-all] in src/ops/symm_mem/defs.cpp).

Import: `_c10d_functional.all_to_all_single` with equal (or no) split sizes becomes
symm_mem::all_to_all (golden IR text), its input produced in symmetric memory with no copy;
unequal and symbolic splits are left to PyTorch with the lists in the reason. Under torchrun
(a2a_worker.py, gloo, 2 and 4 processes): a Shard(0) -> Shard(1) move by all_to_all_single
followed by compute compiles into one symmflow partition with no boundary and no copy and equals
the unsharded computation; unequal splits run in PyTorch, named. DTensor's own redistribute on a
CPU mesh is an expected failure (Note [DTensor shard to shard on a CPU mesh]).
The GPU run of the same worker skips without a GPU.
"""
from __future__ import annotations

import json
import operator
import os

import pytest
import torch

from conftest import compile_ok
from fx_models import c10d, call, fx_graph, whole_world
from test_torchrun import check_all_ok, launch
from symmflow.torch._fx_import import UnsupportedGraph, import_graph
from symmflow.torch._support import unsupported_reason
from symmflow.torch._partition import partition

A2A_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "a2a_worker.py")


def a2a_graph(out_splits, in_splits):
    def build(g):
        x = g.placeholder("x")
        y = call(g, torch.ops.aten.mul.Tensor, x, x)
        a = call(g, c10d.all_to_all_single.default, y, out_splits, in_splits, "7")
        w = call(g, c10d.wait_tensor.default, a)
        return (call(g, torch.ops.aten.sin.default, w),)
    return fx_graph(build)


@pytest.mark.parametrize("splits", [[4, 4], None], ids=["equal", "none"])
def test_equal_splits_map_to_all_to_all(catalogue, cli, splits):
    ig = import_graph(a2a_graph(splits, splits), [torch.empty(8, 3)], world_size=2, rank=0,
                      group_resolver=whole_world(2), catalogue=catalogue, name="a2a")
    assert ig.text == (
        "group g0\n"
        "graph a2a(x: f32[8, 3]) {\n"
        "  mul = aten::mul.Tensor(x, x)\n"
        '  all_to_all_single = symm_mem::all_to_all(mul, "g0")\n'
        "  sin = aten::sin(all_to_all_single)\n"
        "  return sin\n"
        "}\n")
    explain = compile_ok(cli, ig.text, 2, "explain")
    assert "compiler-added copies: 0" in explain, explain
    assert "symm_mem::all_to_all" in explain, explain


@pytest.mark.parametrize("out_splits,in_splits,reason", [
    ([3, 5], [3, 5], "output_split_sizes [3, 5] do not split dim 0 (8 rows) into equal blocks; "
                     "symm_mem::all_to_all takes equal splits only (Note [equal splits])"),
    ([4, 4], [2, 6], "input_split_sizes [2, 6] do not split dim 0 (8 rows) into equal blocks; "
                     "symm_mem::all_to_all takes equal splits only (Note [equal splits])"),
    ([2, 2], [2, 2], "output_split_sizes [2, 2] do not split dim 0 (8 rows) into equal blocks; "
                     "symm_mem::all_to_all takes equal splits only (Note [equal splits])"),
])
def test_unequal_splits_stay_in_pytorch_named(catalogue, out_splits, in_splits, reason):
    gm = a2a_graph(out_splits, in_splits)
    r = partition(gm, catalogue, example_inputs=[torch.randn(8, 3)])
    assert [(p.name, p.supported) for p in r.partitions] == [
        ("symmflow_0", True), ("torch_0", False), ("symmflow_1", True)]
    assert [n.name for n in r.partitions[1].submodule.graph.nodes
            if n.op == "call_function"] == ["all_to_all_single", "wait_tensor"]
    assert r.partitions[1].reason == (
        "_c10d_functional.all_to_all_single.default at node all_to_all_single: " + reason)


def test_dim0_the_group_does_not_divide_is_refused_by_the_shape_function(catalogue):
    with pytest.raises(UnsupportedGraph) as e:
        import_graph(a2a_graph(None, None), [torch.empty(5, 3)], world_size=2, rank=0,
                     group_resolver=whole_world(2), catalogue=catalogue)
    assert "symm_mem::all_to_all: dim 0 of argument 'input' (f32[5, 3]) is not divisible by " \
        "the group size 2" in str(e.value), str(e.value)


def test_splits_of_another_length_than_the_group_are_refused(catalogue):
    with pytest.raises(UnsupportedGraph) as e:
        import_graph(a2a_graph([2, 2, 2, 2], [2, 2, 2, 2]), [torch.empty(8, 3)], world_size=2,
                     rank=0, group_resolver=whole_world(2), catalogue=catalogue)
    assert str(e.value) == ("_c10d_functional.all_to_all_single.default at node "
                            "all_to_all_single: output_split_sizes [2, 2, 2, 2] has 4 entries "
                            "for a group of 2 ranks")


def test_symbolic_splits_stay_in_pytorch_named(catalogue):
    """Split sizes computed in the graph (sym_size of a tensor) are not static."""
    def build(g):
        x = g.placeholder("x")
        n = call(g, torch.ops.aten.sym_size.int, x, 0)
        half = g.call_function(operator.floordiv, (n, 2), name="half")
        a = call(g, c10d.all_to_all_single.default, x, [half, half], [4, 4], "7")
        return (call(g, c10d.wait_tensor.default, a),)

    gm = fx_graph(build)
    for node in gm.graph.nodes:  # what dynamo's tracing records: a SymInt for the sizes
        if node.name in ("sym_size", "half"):
            node.meta["val"] = 8 if node.name == "sym_size" else 4
    x = next(n for n in gm.graph.nodes if n.op == "placeholder")
    x.meta["val"] = torch.empty(8, 3)
    a2a = next(n for n in gm.graph.nodes if n.name == "all_to_all_single")
    assert unsupported_reason(a2a, catalogue) == (
        "_c10d_functional.all_to_all_single.default at node all_to_all_single: "
        "output_split_sizes [half, half] are not static ints (symbolic splits stay in PyTorch)")


@pytest.mark.parametrize("nproc", [2, 4])
def test_shard0_to_shard1_compiles_into_one_partition_and_equals_eager(nproc):
    rc, results, out = launch(nproc, "funcol,splits", "f32,bf16", worker=A2A_WORKER)
    check_all_ok(nproc, results, out, 4)
    assert rc == 0, out[-4000:]
    for r in results:
        assert r["shape"] == r["want_shape"] == [3 * nproc, 5], r
        assert r["partitions"] == 1, r
        assert r["partition_kinds"] == ["symmflow"], r
        assert r["boundaries"] == [], r
        assert r["copies_added"] == 0, r
        assert r["symm_inputs_produced"] is True, r
        assert r["symm_ops"] == ["symm_mem::all_to_all"], r


# Note [DTensor shard to shard on a CPU mesh]: torch 2.13's DTensor moves Shard(i) -> Shard(j) on
# a CPU mesh by all_gather_single and a chunk indexed by the mesh rank (shard_dim_alltoall in
# torch/distributed/tensor/_collective_utils.py: "Gloo does not support alltoall"), so every rank's
# graph slices at its own offset. The rank agreement compares what peers see (Note [rank
# agreement] in src/exec/agreement.cpp: collectives and symmetric buffers, not what local steps
# read), so those per-rank plans run: one partition, equal to eager. On a CUDA mesh it calls
# torch.ops._dtensor.shard_dim_alltoall, one op that symmflow does not map yet.
def test_dtensor_redistribute_shard0_to_shard1_on_a_cpu_mesh():
    rc, results, out = launch(2, "dtensor", "f32", worker=A2A_WORKER)
    check_all_ok(2, results, out, 1)
    for r in results:
        assert r["partitions"] == 1 and r["boundaries"] == [], r


def test_unequal_splits_run_in_pytorch_and_equal_eager():
    rc, results, out = launch(2, "uneven", "f32", worker=A2A_WORKER)
    check_all_ok(2, results, out, 1)
    for r in results:
        assert r["partition_kinds"] == ["symmflow", "torch", "symmflow"], r
        assert len(r["boundaries"]) == 2, r
        assert "at node all_to_all_single: output_split_sizes [" in r["boundaries"][0], r
        assert "do not split dim 0 (" in r["boundaries"][0], r


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 1,
                    reason="needs a GPU")
def test_shard0_to_shard1_on_gpus():
    """The same worker on GPUs (ranks share them round robin): symm_mem::all_to_all's cuda kernel
    inside a compiled partition."""
    rc, results, out = launch(2, "funcol,splits", "f32,bf16", worker=A2A_WORKER,
                              env={"SYMMFLOW_TEST_DEVICE": "cuda"})
    check_all_ok(2, results, out, 4)
    for r in results:
        assert r["device"].startswith("cuda"), r
        assert r["partitions"] == 1 and r["boundaries"] == [], json.dumps(r)
        assert r["symm_ops"] == ["symm_mem::all_to_all"], r
