"""Scaled dot-product attention kept whole through AOT autograd (issue 17, item 6).

AOT autograd decomposes `F.scaled_dot_product_attention` into a masked softmax built from a dozen
boolean ops (arange, le, logical_and, where, any, ...). symmflow has the attention as one op
(`aten::scaled_dot_product_attention`: causal, bool or additive masks, grouped KV heads; CPU and
CUDA kernels), so the backend rewrites dynamo's graph first (`keep_attention_whole`): each call
without dropout (causal, or with the mask transformers' models build under compile) becomes
`torch.ops.symmflow.scaled_dot_product_attention`, an opaque custom op whose eager kernel is
torch's own attention, and the importer maps it to symmflow's op.
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
