"""Note [folding input-independent values] (python/symmflow/torch/_fold.py): position ids and
causal masks built from arange are evaluated once into constants; random ops, graph outputs and
values past MAX_BYTES are not; results equal eager (one process; a world of one)."""
from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F

import symmflow.torch as sft
from symmflow.torch import _backend, _fold


def step_counts():
    return collections.Counter(s["name"] for p in sft.last_report().partitions
                               for s in p.explain.get("steps", []))


class MaskedAttention(torch.nn.Module):
    """A transformers-like attention: positions and a sliding-window causal mask from arange, each
    call (a window: the plain causal mask would run is_causal instead, Note [causal masks
    recognised])."""

    def __init__(self, dim=16):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.register_buffer("inv_freq", torch.rand(dim // 2), persistent=False)

    def forward(self, x):
        n = x.shape[1]
        pos = torch.arange(n) + 0
        mask = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - 4)
        angles = pos[:, None].float() * self.inv_freq[None, :]
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q * torch.cat([angles.cos(), angles.sin()], dim=-1)
        out = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None],
                                             attn_mask=mask[None, None].expand(1, 1, n, n))
        return out.reshape(x.shape)


def test_positions_and_mask_fold_into_constants_and_match_eager(world, monkeypatch):
    torch._dynamo.reset()
    direct = []
    original = _backend._direct_call
    monkeypatch.setattr(_backend, "_direct_call",
                        lambda split_gm: direct.append(original(split_gm)) or direct[-1])
    torch.manual_seed(0)
    model, x = MaskedAttention(), torch.randn(2, 12, 16)
    with torch.no_grad():
        want = model(x)
        compiled = torch.compile(model, backend="symmflow")
        got, again = compiled(x), compiled(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(again, want, rtol=1e-5, atol=1e-5)
    report = sft.last_report()
    assert report.folded_nodes >= 5, report.text()
    assert 1 <= report.folded_constants < report.folded_nodes, report.text()
    assert "input-independent node(s) evaluated once" in report.text()
    counts = step_counts()
    for op in ("aten::arange.start_step", "aten::arange", "aten::le.Tensor", "aten::ge.Tensor",
               "aten::gt.Tensor", "aten::bitwise_and.Tensor", "aten::add.Scalar", "aten::_to_copy"):
        assert counts[op] == 0, (op, counts)
    # Not folded: what reads the input, and the product with inv_freq (a buffer: a graph input).
    assert counts["aten::scaled_dot_product_attention"] == 1, counts
    # The one-partition direct call passes the constants (Note [one-partition call]).
    assert report.kinds == ["symmflow"], report.text()
    assert len(direct) == 1 and direct[0] is not None


def fold(fn, *inputs):
    """fn traced to ATen by make_fx, folded; (graph module, nodes removed, constants made)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(fn)(*inputs)
    evaluated, made = _fold.fold_input_independent(gm)
    return gm, evaluated, made


def call_targets(gm):
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_random_ops_outputs_and_large_values_stay():
    x = torch.randn(4)

    def random_mask(x):
        return x * (torch.rand(4) > 0.5)

    gm, evaluated, made = fold(random_mask, x)
    assert made == 0 and any("rand" in t for t in call_targets(gm)), call_targets(gm)

    def positions_out(x):  # an output that depends on no input stays computed each call
        return x + 1, torch.arange(4) * 2

    gm, removed, made = fold(positions_out, x)
    assert removed == 0 and made == 0, (removed, made)
    first, second = gm(x)[1], gm(x)[1]
    assert first.data_ptr() != second.data_ptr()
    torch.testing.assert_close(first, torch.arange(4) * 2)

    def big(x):
        n = int((_fold.MAX_BYTES // 4) ** 0.5) + 1  # an f32 n x n square past MAX_BYTES
        return x.sum() + torch.ones(n, n).sum()

    gm, evaluated, made = fold(big, x)
    assert made == 0 and "aten.ones.default" in call_targets(gm), call_targets(gm)
    torch.testing.assert_close(gm(x), big(x))


def test_a_folded_chain_keeps_its_last_node_only_contiguous():
    x = torch.randn(3, 5, 5)

    def masked(x):
        pos = torch.arange(5)
        mask = (pos[None, :] <= pos[:, None]).expand(3, 5, 5)
        return x.masked_fill(mask, 0.0)

    gm, removed, made = fold(masked, x)
    assert removed >= 4 and made == 1, (removed, made, call_targets(gm))
    constants = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    assert len(constants) == 1 and constants[0].is_contiguous()
    assert call_targets(gm) == ["aten.masked_fill.Scalar"], call_targets(gm)
    torch.testing.assert_close(gm(x), masked(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_folded_graph_through_the_backend_with_dtypes(world, dtype):
    torch._dynamo.reset()

    def f(x):
        pos = torch.arange(x.shape[-1], dtype=torch.float32)
        return x * pos.to(x.dtype) + (pos * 0.5).cos().to(x.dtype)

    x = torch.randn(3, 7, dtype=dtype)
    with torch.no_grad():
        got = torch.compile(f, backend="symmflow")(x)
    torch.testing.assert_close(got, f(x))
    assert sft.last_report().folded_constants >= 1


def test_values_written_in_place_stay_computed_each_call():
    x = torch.randn(4)

    def counter(x):  # a KV-cache-like update of an input-independent buffer
        c = torch.arange(4.0)
        c.add_(1.0)
        return x + c

    gm, removed, made = fold(counter, x)
    assert made == 0 and any("arange" in t for t in call_targets(gm)), call_targets(gm)
    for _ in range(3):  # a folded arange would be incremented once more on every call
        torch.testing.assert_close(gm(x), counter(x))


def test_an_op_that_raises_when_evaluated_runs_each_call_instead():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    c = graph.get_attr("c")
    bad = graph.call_function(torch.ops.aten.view.default, (c, [3]))  # 4 elements into 3
    graph.output(graph.call_function(torch.ops.aten.add.Tensor, (x, bad)))
    root = torch.nn.Module()
    root.register_buffer("c", torch.arange(4.0))
    gm = torch.fx.GraphModule(root, graph)
    removed, made = _fold.fold_input_independent(gm)
    assert (removed, made) == (0, 0)
    with pytest.raises(RuntimeError):
        gm(torch.randn(3))  # as it would have without folding


def test_folded_bytes_are_capped_in_all(monkeypatch):
    x = torch.randn(100)

    def two(x):
        return x + torch.arange(100.0) * 2 + torch.arange(100.0).cos()

    monkeypatch.setattr(_fold, "MAX_TOTAL_BYTES", 2 * 400)  # room for one chain of f32[100]
    gm, removed, made = fold(two, x)
    assert made == 1, (made, call_targets(gm))
    torch.testing.assert_close(gm(x), two(x))


def test_evaluated_without_autocast_as_traced():
    x = torch.randn(4, 4)

    def f(x):
        return x + torch.arange(16.0).reshape(4, 4) @ torch.ones(4, 4)

    gm = __import__("torch.fx.experimental.proxy_tensor", fromlist=["make_fx"]).make_fx(f)(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        removed, made = _fold.fold_input_independent(gm)
    assert made == 1, call_targets(gm)
    constants = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    assert [c.dtype for c in constants] == [torch.float32]
    torch.testing.assert_close(gm(x), f(x), rtol=0, atol=0)


def test_a_constant_never_shares_the_graphs_own_storage():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    c = graph.get_attr("c")
    alias = graph.call_function(torch.ops.aten.alias.default, (c,))
    out = graph.call_function(torch.ops.aten.add_.Tensor, (x, alias))
    graph.output(out)
    root = torch.nn.Module()
    root.register_buffer("c", torch.arange(4.0))
    gm = torch.fx.GraphModule(root, graph)
    _, made = _fold.fold_input_independent(gm)
    assert made == 1
    folded = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    assert folded[0].untyped_storage().data_ptr() != root.c.untyped_storage().data_ptr()


def test_a_constant_written_through_another_get_attr_is_not_folded():
    """A tracer gives each use of a constant a get_attr of its own: the write through one makes
    every value computed from the others run each call."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    written = graph.get_attr("c")
    read = graph.get_attr("c")
    doubled = graph.call_function(torch.ops.aten.mul.Tensor, (read, 2.0))
    summed = graph.call_function(torch.ops.aten.add.Tensor, (x, doubled))
    graph.call_function(torch.ops.aten.add_.Tensor, (written, 1.0))
    graph.output(summed)
    root = torch.nn.Module()
    root.register_buffer("c", torch.arange(4.0))
    gm = torch.fx.GraphModule(root, graph)
    removed, made = _fold.fold_input_independent(gm)
    assert (removed, made) == (0, 0), call_targets(gm)
    x = torch.zeros(4)
    for step in range(3):  # c grows by one a call; a folded 2c would not
        torch.testing.assert_close(gm(x), (torch.arange(4.0) + step) * 2)


def test_the_total_cap_holds_for_nodes_without_a_trace(monkeypatch):
    """A node without meta (a hand-built graph) is capped by the bytes it evaluated to."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    out = x
    for _ in range(3):
        c = graph.call_function(torch.ops.aten.arange.default, (100.0,))
        out = graph.call_function(torch.ops.aten.add.Tensor, (out, c))
    graph.output(out)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    monkeypatch.setattr(_fold, "MAX_TOTAL_BYTES", 2 * 400)  # two f32[100]
    removed, made = _fold.fold_input_independent(gm)
    assert made == 2 and removed == 2, (removed, made, call_targets(gm))
    torch.testing.assert_close(gm(torch.zeros(100)), torch.arange(100.0) * 3)


def test_folded_nodes_counts_only_what_folding_removed():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(torch.ops.aten.neg.default, (x,))  # dead before folding
    c = graph.call_function(torch.ops.aten.arange.default, (4.0,))
    graph.output(graph.call_function(torch.ops.aten.add.Tensor, (x, c)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert _fold.fold_input_independent(gm) == (1, 1), call_targets(gm)


def test_a_uniform_value_becomes_a_fill_not_a_constant():
    # Note [uniform constants are fills]: zeros a scatter writes into (AOT's backward of a slice)
    # and a uniform chain's end become aten.full of their value, dtype and shape; a value whose
    # elements differ, and one of one element, stay constants.
    x = torch.randn(3, 8)

    def scattered(x):
        zeros = torch.zeros(3, 8).mul(2.0)  # a chain: evaluated, its last node kept
        halves = torch.full((3, 4), 7, dtype=torch.int64).float()
        ramp = torch.arange(8.0)
        one = torch.ones(1)
        return (zeros.slice_scatter(x[:, :4], 1, 4, 8) + halves.repeat(1, 2) + ramp + one)

    gm, removed, made = fold(scattered, x)
    fills = [n for n in gm.graph.nodes if n.target is torch.ops.aten.full.default]
    got = sorted((tuple(n.args[0]), n.args[1], n.kwargs["dtype"]) for n in fills)
    assert got == [((3, 8), 0.0, torch.float32), ((3, 8), 7.0, torch.float32)], got
    constants = [getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"]
    # The ramp, and the one-element value (a fill would be a launch for nothing), stay constants.
    assert [c.tolist() for c in constants] == [[float(i) for i in range(8)], [1.0]], constants
    assert made == 4, made
    torch.testing.assert_close(gm(x), scattered(x), rtol=0, atol=0)
