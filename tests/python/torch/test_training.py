"""Training through torch.compile(backend="symmflow") (issue 26): AOT autograd's forward and
backward graphs both compiled by symmflow (Note [training] in symmflow/torch/_backend.py).

In one process: attention's own backward (Note [attention backward]) against PyTorch's autograd
on every element, for bool, additive, causal and no masks, grouped key/value heads, f32 and f64,
with the forward and the backward each one symmflow partition; the layout of the forward's saved
outputs (Note [output strides]). The tensor-parallel models' training loops run under torchrun in
test_training_models.py.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import symmflow.torch as sft

TOL = {torch.float32: 2e-5, torch.float64: 1e-12}


def _masks(dtype):
    torch.manual_seed(3)
    keep = torch.rand(2, 1, 5, 7) > 0.3
    keep[0, 0, 1, :] = False  # a row with every key masked: its gradients are zeros
    yield "bool", keep, False
    yield "additive", torch.randn(5, 7, dtype=dtype), False
    yield "causal", None, True
    yield "none", None, False


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_backward_equals_autograd(world, dtype):
    def loss(q, k, v, mask, causal):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                             enable_gqa=True)
        return (out * out).sum()

    for name, mask, causal in _masks(dtype):
        torch.manual_seed(0)
        # 4 query heads over 2 key/value heads, 5 queries, 7 keys, value dim 6 != head dim 8
        leaves = [torch.randn(2, 4, 5, 8, dtype=dtype), torch.randn(2, 2, 7, 8, dtype=dtype),
                  torch.randn(2, 2, 7, 6, dtype=dtype)]
        if causal:  # PyTorch's causal attention with grouped heads wants equal lengths
            leaves[1], leaves[2] = leaves[1][:, :, :5], leaves[2][:, :, :5]
        want_in = [t.clone().requires_grad_() for t in leaves]
        got_in = [t.clone().requires_grad_() for t in leaves]
        loss(*want_in, mask, causal).backward()
        torch._dynamo.reset()
        before = len(sft.reports())
        got = torch.compile(loss, backend="symmflow")(*got_in, mask, causal)
        got.backward()
        reports = sft.reports()[before:]
        assert [(r.partition_count, r.boundaries) for r in reports] == [(1, []), (1, [])], name
        for w, g, what in zip(want_in, got_in, "qkv"):
            err = (w.grad - g.grad).abs().max().item()
            assert err <= TOL[dtype] * max(1.0, w.grad.abs().max().item()), (name, what, err)


def test_forward_outputs_keep_their_traced_layout(world):
    """The forward's output laid out [B, S, H, D] behind a [B, H, S, D] shape (a transposed
    result) comes back with those strides, and the gradient through it is right."""
    def f(x, w):
        y = (x @ w).view(2, 3, 4, 2).transpose(1, 2)  # [B, H, S, D] over [B, S, H, D] memory
        return torch.sin(y)

    x = torch.randn(2, 3, 8)
    w = torch.randn(8, 8, requires_grad=True)
    torch._dynamo.reset()
    out = torch.compile(f, backend="symmflow")(x, w)
    want = f(x, w)
    assert out.stride() == want.stride()
    torch.testing.assert_close(out, want)
    g = torch.randn_like(out)
    (gw,) = torch.autograd.grad(out, w, g)
    (ww,) = torch.autograd.grad(want, w, g)
    torch.testing.assert_close(gw, ww)


def test_a_backward_reading_a_strided_saved_output_passes_addresses(world):
    """The backward of a forward whose saved output keeps a transposed layout (Note [output
    strides]) takes the pointer path from its second call on (Note [strided inputs on the pointer
    path]): before, every call of it converted all its inputs through DLPack. Its gradients equal
    eager's at every step."""
    from symmflow.torch import _backend

    def f(x, w):
        y = (x @ w).view(2, 3, 4, 2).transpose(1, 2)
        return torch.sin(y) * y

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="symmflow")
    w = torch.randn(8, 8, requires_grad=True)
    for step in range(3):
        x = torch.randn(2, 3, 8)
        g = torch.randn(2, 4, 3, 2)
        (got,) = torch.autograd.grad(compiled(x, w), w, g)
        (want,) = torch.autograd.grad(f(x, w), w, g)
        torch.testing.assert_close(got, want)
        backward = _backend.last_runner()
        assert backward.report.role == "backward"
    assert (backward.checked_calls, backward.pointer_calls) == (1, 2)


def test_forward_outputs_traced_as_expands_keep_their_overlapping_strides(world):
    """A forward output PyTorch traced as an expand (stride 0: elements that share memory) comes
    back with those strides: copying into such a layout raised "more than one element of the
    written-to tensor refers to a single memory location" (transformers' Llama, batch-2 training
    on GPUs)."""
    def f(x, w):
        s = (torch.sin(x) * w).sum(-1, keepdim=True)
        return s.expand(2, 4, 8), s.transpose(0, 1).expand(3, 4, 2, 5)

    x = torch.randn(2, 4, 8)
    w = torch.randn(2, 4, 8, requires_grad=True)
    torch._dynamo.reset()
    outs = torch.compile(f, backend="symmflow")(x, w)
    wants = f(x, w)
    for out, want in zip(outs, wants):
        assert out.stride() == want.stride(), (out.stride(), want.stride())
        torch.testing.assert_close(out, want)
    g = [torch.randn_like(o) for o in outs]
    (gw,) = torch.autograd.grad(outs, w, g)
    (ww,) = torch.autograd.grad(wants, w, g)
    torch.testing.assert_close(gw, ww)


def test_laid_out_writes_every_layout_a_trace_can_ask_for():
    """_laid_out against PyTorch's own strided tensors: dense permutations, gaps, stride 0 (one
    or several dimensions), size-1 and size-0 dimensions; every element compared."""
    from symmflow.torch._runner import _laid_out, _overlaps

    torch.manual_seed(0)
    base = torch.randn(4, 1, 3)
    cases = [base.permute(2, 0, 1), base.expand(4, 5, 3), base.expand(4, 5, 3).transpose(0, 2),
             torch.randn(3, 1).expand(3, 6).t(), torch.randn(()).expand(2, 3),
             torch.randn(8, 6)[::2, 1::2], torch.randn(2, 0, 3).expand(2, 0, 3),
             torch.randn(5, 1).expand(5, 0)]
    for want in cases:
        got = _laid_out(want.contiguous(), want.stride())
        assert got.stride() == want.stride() and got.shape == want.shape, want.stride()
        assert torch.equal(got, want), want.stride()
        overlapping = torch._debug_has_internal_overlap(want) == 1
        assert _overlaps(want.shape, want.stride()) == overlapping, want.stride()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_backward_on_gpu(world, dtype):
    """The cuda kernel of the attention backward against PyTorch's autograd on the CPU in f32,
    for every mask kind, with grouped key/value heads; one partition each pass."""
    def loss(q, k, v, mask, causal):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal,
                                             enable_gqa=True)
        return (out.float() * out.float()).sum()

    tol = 2e-5 if dtype == torch.float32 else 3e-2
    for name, mask, causal in _masks(torch.float32):
        torch.manual_seed(0)
        leaves = [torch.randn(2, 4, 5, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 6)]
        if causal:
            leaves[1], leaves[2] = leaves[1][:, :, :5], leaves[2][:, :, :5]
        leaves = [t.to(dtype).float() for t in leaves]  # representable in dtype
        want_in = [t.clone().requires_grad_() for t in leaves]
        got_in = [t.to("cuda", dtype).requires_grad_() for t in leaves]
        loss(*want_in, mask, causal).backward()
        gpu_mask = None if mask is None else mask.to("cuda", mask.dtype if mask.dtype ==
                                                     torch.bool else dtype)
        torch._dynamo.reset()
        before = len(sft.reports())
        torch.compile(loss, backend="symmflow")(*got_in, gpu_mask, causal).backward()
        reports = sft.reports()[before:]
        assert [(r.partition_count, r.boundaries) for r in reports] == [(1, []), (1, [])], name
        for w, g, what in zip(want_in, got_in, "qkv"):
            err = (w.grad - g.grad.float().cpu()).abs().max().item()
            assert err <= tol * max(1.0, w.grad.abs().max().item()), (name, what, err)


def test_reports_name_the_passes_and_the_saved_activations(world):
    w = torch.randn(8, 8, requires_grad=True)
    torch._dynamo.reset()
    before = len(sft.reports())
    torch.compile(lambda x: torch.sin(x @ w).sum(), backend="symmflow")(torch.randn(4, 8)).backward()
    forward, backward = sft.reports()[before:]
    assert (forward.role, backward.role) == ("forward", "backward")
    # x @ w is recomputed or saved as the min-cut partitioner decides; sin's input is saved
    assert forward.saved_tensors >= 1 and forward.saved_bytes >= 4 * 8 * 4, forward.text()
    assert "the forward of a training graph: " in forward.text()
    assert "saved for the backward, outputs of its plans" in forward.text()
    assert "the backward of a training graph\n" in backward.text()
    with torch.no_grad():
        torch._dynamo.reset()
        torch.compile(lambda x: torch.sin(x @ w), backend="symmflow")(torch.randn(4, 8))
    assert sft.last_report().role == "inference"
    assert "training graph" not in sft.last_report().text()


def test_an_op_symmflow_lacks_stays_in_pytorch_named_and_gradients_stay_right(world):
    """A training graph with an op outside the catalogue (i0, and its backward i1): PyTorch runs
    it, the boundary names it, and the gradients equal autograd's."""
    w = torch.randn(8, 8, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, 8, dtype=torch.float64)

    def f(x):
        return (torch.special.i0(x @ w) * 0.5).sum()

    torch._dynamo.reset()
    before = len(sft.reports())
    torch.compile(f, backend="symmflow")(x).backward()
    got = w.grad.clone()
    w.grad = None
    f(x).backward()
    torch.testing.assert_close(got, w.grad, rtol=1e-12, atol=1e-12)
    forward, backward = sft.reports()[before:]
    assert any("aten.i0.default at node" in b and "is not in symmflow's catalogue" in b
               for b in forward.boundaries), forward.text()
    assert backward.boundaries, backward.text()  # i1 of the backward stays PyTorch's too


def test_verify_mode_names_a_partition_that_differs_from_pytorch(world, monkeypatch):
    """SYMMFLOW_TORCH_VERIFY=1 runs each partition's FX graph in PyTorch beside it: equal results
    pass, a wrong one (simulated here by corrupting the assembled outputs) raises naming it."""
    from symmflow.torch import _fx_import

    monkeypatch.setenv("SYMMFLOW_TORCH_VERIFY", "1")
    x = torch.randn(4, 8)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(torch.sin, backend="symmflow")(x), torch.sin(x))
    assemble = _fx_import.ImportedGraph.assemble_outputs
    monkeypatch.setattr(_fx_import.ImportedGraph, "assemble_outputs",
                        lambda self, i, r: tuple(t + 1 for t in assemble(self, i, r)))
    torch._dynamo.reset()
    with torch.no_grad(), pytest.raises(Exception) as e:
        torch.compile(torch.cos, backend="symmflow")(x)
    assert "SYMMFLOW_TORCH_VERIFY: output 0 of partition_0 differs from PyTorch's: max error " \
        in str(e.value)
