"""Scaled dot-product attention kept whole through AOT autograd (issue 17, item 6).

AOT autograd decomposes `F.scaled_dot_product_attention` into a masked softmax built from a dozen
boolean ops (arange, le, logical_and, where, any, ...). symmflow has the attention as one op
(`aten::scaled_dot_product_attention`: causal, bool or additive masks, grouped KV heads; CPU and
CUDA kernels), so the backend rewrites dynamo's graph first (`keep_attention_whole`): each call
without dropout (causal, or with the mask transformers' models build under compile) becomes
`torch.ops.symmflow.scaled_dot_product_attention`, an opaque custom op whose eager kernel is
torch's own attention, and the importer maps it to symmflow's op.

In training (issue 26) the op has an autograd formula (Note [attention backward]): its gradient
is `torch.ops.symmflow.scaled_dot_product_attention_backward`, another opaque op that the
importer maps to symmflow's `aten::scaled_dot_product_attention_backward`, so the backward graph
keeps attention whole too.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

_SDPA_TARGETS = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}


@torch.library.custom_op("symmflow::scaled_dot_product_attention", mutates_args=())
def scaled_dot_product_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
    *, scale: float | None = None, enable_gqa: bool = False,
) -> torch.Tensor:
    """aten's schema and semantics (the importer maps arguments by position)."""
    return F.scaled_dot_product_attention(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
    ).contiguous()


@scaled_dot_product_attention.register_fake
def _(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
      enable_gqa=False):
    return query.new_empty((*query.shape[:-1], value.shape[-1]))


def _kept(node: torch.fx.Node) -> bool:
    """Whether a dynamo-level attention call can become symmflow's op: no dropout, and not a mask
    together with is_causal (PyTorch refuses that too). A bool or additive mask is kept
    (Note [attention masks] in src/ops/aten/meta_attention.cpp)."""
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
    args = dict(zip(names, node.args))
    args.update(node.kwargs)
    if args.get("dropout_p", 0.0):
        return False
    return args.get("attn_mask") is None or not args.get("is_causal", False)


def keep_attention_whole(gm: torch.fx.GraphModule) -> int:
    """Rewrites attention calls of dynamo's graph in place; returns how many."""
    count = 0
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in _SDPA_TARGETS or not _kept(node):
            continue
        node.target = torch.ops.symmflow.scaled_dot_product_attention.default
        count += 1
    if count:
        gm.recompile()
    return count


# Note [attention backward]: PyTorch has no single backward op for attention (each of its kernels,
# flash, efficient, math, has its own with its own saved state), and AOT autograd's core
# decompositions give a wrong gradient for the CPU flash kernel: its decomposed forward returns
# a logsumexp and an output layout the undecomposed backward kernel does not expect (seen on a
# Llama at world 1: every weight's gradient wrong, loss right, no error). So symmflow's attention
# op carries its own formula: the backward recomputes the probabilities from query, key, value
# and mask (nothing but the inputs is saved, as flash attention does) and returns the gradients
# of query, key and value; the mask gets none (transformers' masks are bool or constant). Its
# eager kernel differentiates PyTorch's math attention, so a graph left to PyTorch is right too;
# compiled, it is symmflow's aten::scaled_dot_product_attention_backward on CPU and CUDA.
@torch.library.custom_op("symmflow::scaled_dot_product_attention_backward", mutates_args=())
def scaled_dot_product_attention_backward(
    grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
    *, scale: float | None = None, enable_gqa: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    acc = torch.float64 if query.dtype == torch.float64 else torch.float32
    q, k, v, do = (t.to(acc) for t in (query, key, value, grad_out))
    group = q.shape[-3] // k.shape[-3]
    if group > 1:  # grouped key/value heads: query head h reads head h // group
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scale = 1.0 / q.shape[-1] ** 0.5 if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if is_causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    elif attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool \
            else scores + attn_mask.to(acc)
    p = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row with every key masked: zeros
    dv = p.transpose(-2, -1) @ do
    dp = do @ v.transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    dq = ds @ k * scale
    dk = ds.transpose(-2, -1) @ q * scale
    if group > 1:
        dk = dk.unflatten(-3, (-1, group)).sum(-3)
        dv = dv.unflatten(-3, (-1, group)).sum(-3)
    return tuple(g.to(query.dtype).contiguous() for g in (dq, dk, dv))


@scaled_dot_product_attention_backward.register_fake
def _(grad_out, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
      scale=None, enable_gqa=False):
    return query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape)


def _setup_context(ctx, inputs, keyword_only_inputs, output):
    query, key, value, attn_mask, dropout_p, is_causal = inputs
    ctx.save_for_backward(query, key, value, attn_mask)
    ctx.options = (dropout_p, is_causal, keyword_only_inputs.get("scale"),
                   keyword_only_inputs.get("enable_gqa", False))


def _backward(ctx, grad_out):
    query, key, value, attn_mask = ctx.saved_tensors
    dropout_p, is_causal, scale, enable_gqa = ctx.options
    dq, dk, dv = scaled_dot_product_attention_backward(
        grad_out.contiguous(), query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
        enable_gqa=enable_gqa)
    return dq, dk, dv, None, None, None


scaled_dot_product_attention.register_autograd(_backward, setup_context=_setup_context)
