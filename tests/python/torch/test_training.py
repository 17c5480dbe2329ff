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
