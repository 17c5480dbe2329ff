"""Note [causal masks recognised] (python/symmflow/torch/_causal.py): an attention mask built from
arange alone that is the top-left causal pattern (bool, or additive 0 / -inf) makes the call
is_causal with no mask; other patterns (bottom-right with L < S, a sliding window) and masks read
from inputs are kept; every result equals eager, forward and backward (one process)."""
from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F

import symmflow.torch as sft

MASK_OPS = ("aten::le.Tensor", "aten::ge.Tensor", "aten::lt.Tensor", "aten::gt.Tensor",
            "aten::arange.start_step", "aten::arange", "aten::where.self", "aten::sub.Tensor")


def step_counts(report):
    return collections.Counter(s["name"] for p in report.partitions
                               for s in p.explain.get("steps", []))


def _mask(kind: str, rows: int, cols: int, dtype=torch.float32) -> torch.Tensor:
    i = torch.arange(rows)[:, None]
    j = torch.arange(cols)[None, :]
    keep = {"causal": j <= i, "bottom_right": j <= i + (cols - rows),
            "window": (j <= i) & (j > i - 3)}[kind]
    return keep


class Attention(torch.nn.Module):
    """q from x, k and v from y; the mask made in forward from arange (a kind), or an input."""

    def __init__(self, kind: str, additive: bool = False, dim: int = 16):
        super().__init__()
        self.kind, self.additive = kind, additive
        self.q = torch.nn.Linear(dim, dim)
        self.kv = torch.nn.Linear(dim, 2 * dim)

    def forward(self, x, y, mask=None):
        q = self.q(x)[:, None]
        k, v = (t[:, None] for t in self.kv(y).chunk(2, dim=-1))
        if mask is None:
            keep = _mask(self.kind, x.shape[1], y.shape[1])
            mask = keep
            if self.additive:
                mask = torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
            mask = mask[None, None].expand(x.shape[0], 1, *keep.shape)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).squeeze(1)


def _compiled(model, *args):
    torch._dynamo.reset()
    with torch.no_grad():
        want = model(*args)
        got = torch.compile(model, backend="symmflow")(*args)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    return sft.last_report()


@pytest.mark.parametrize("kind,additive,rows,cols,rewritten", [
    ("causal", False, 12, 12, True),
    ("causal", True, 12, 12, True),
    ("causal", False, 5, 13, True),         # top-left with L < S: PyTorch's is_causal
    ("bottom_right", False, 5, 13, False),  # another diagonal
    ("bottom_right", False, 9, 9, True),    # the same diagonal when L == S
    ("window", False, 12, 12, False),
    ("window", True, 12, 12, False),
])
def test_only_the_causal_pattern_becomes_is_causal(world, kind, additive, rows, cols, rewritten):
    torch.manual_seed(0)
    model = Attention(kind, additive)
    report = _compiled(model, torch.randn(2, rows, 16), torch.randn(2, cols, 16))
    assert report.causal_masks == int(rewritten), report.text()
    mask_steps = sum(step_counts(report)[op] for op in MASK_OPS)
    if rewritten:
        assert "run is_causal, with no mask" in report.text()
        assert mask_steps == 0, step_counts(report)
        assert report.folded_constants == 0, report.text()  # nothing of the mask is kept
    else:
        assert "is_causal" not in report.text()


def test_a_mask_read_from_an_input_is_kept(world):
    torch.manual_seed(0)
    x = torch.randn(2, 12, 16)
    mask = _mask("causal", 12, 12)[None, None].expand(2, 1, 12, 12).contiguous()
    report = _compiled(Attention("causal"), x, x, mask)
    assert report.causal_masks == 0, report.text()


def test_training_with_a_causal_mask_equals_eager(world):
    """The call becomes is_causal in dynamo's graph, so the backward's attention is causal too,
    with no mask saved; every gradient equals eager's."""
    torch.manual_seed(0)
    model = Attention("causal")
    x = torch.randn(2, 12, 16)
    eager = Attention("causal")
    eager.load_state_dict(model.state_dict())
    eager(x, x).square().sum().backward()
    torch._dynamo.reset()
    before = len(sft.reports())
    torch.compile(model, backend="symmflow")(x, x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-5, msg=name)
    made = sft.reports()[before:]
    forward = [r for r in made if r.role == "forward"]
    backward = [r for r in made if r.role == "backward"]
    assert forward and forward[0].causal_masks == 1, [r.text() for r in made]
    # Rewritten before AOT autograd: no mask saved, the backward's attention is causal too.
    calls = [line for r in backward for p in r.partitions for line in p.ir_text.splitlines()
             if "scaled_dot_product_attention_backward(" in line]
    assert len(calls) == 1 and "None, 0.0, True" in calls[0], calls


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_a_transformers_prefill_built_with_its_mask_runs_causal(world, monkeypatch, name):
    """transformers skips the causal mask under torch.compile only from torch 2.13 on (its
    `_ignore_causal_mask_sdpa`); before, every prefill's attention got the full mask (seen on
    the GPU machines' torch 2.11). Made to build it here, the compiled prefill's attention calls
    run is_causal and the logits equal eager's."""
    import os
    import sys

    import transformers.masking_utils as masking

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                                    "pytorch"))
    import hf_models

    monkeypatch.setattr(masking, "_ignore_causal_mask_sdpa", lambda *a, **k: False)
    torch.manual_seed(0)
    model = hf_models.make_model(name, torch.float32, max_positions=40).eval()
    ids = hf_models.make_input_ids(batch=2, seq=33)
    torch._dynamo.reset()
    with torch.no_grad():
        want = model(input_ids=ids).logits
        got = torch.compile(model, backend="symmflow")(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    report = sft.last_report()
    layers = model.config.num_hidden_layers
    assert report.causal_masks == layers, report.text()
    assert "run is_causal, with no mask" in report.text()


def test_a_transformers_training_step_with_its_mask_runs_causal_forward_and_backward(
        world, monkeypatch):
    """As above, in training: dynamo's graph is rewritten, so the backward's attention calls are
    causal with no saved mask; the loss and every gradient equal eager's."""
    import copy
    import os
    import sys

    import transformers.masking_utils as masking

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                                    "pytorch"))
    import hf_models

    monkeypatch.setattr(masking, "_ignore_causal_mask_sdpa", lambda *a, **k: False)
    torch.manual_seed(0)
    model = hf_models.make_model("llama", torch.float32, max_positions=40).train()
    eager = copy.deepcopy(model)
    ids = hf_models.make_input_ids(batch=2, seq=17)
    want = eager(input_ids=ids, labels=ids).loss
    want.backward()
    torch._dynamo.reset()
    before = len(sft.reports())
    got = torch.compile(model, backend="symmflow")(input_ids=ids, labels=ids).loss
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    made = sft.reports()[before:]
    layers = model.config.num_hidden_layers
    assert sum(r.causal_masks for r in made if r.role == "forward") == layers, \
        [r.text() for r in made]
    calls = [line for r in made if r.role == "backward" for p in r.partitions
             for line in p.ir_text.splitlines() if "scaled_dot_product_attention_backward(" in line]
    assert len(calls) == layers and all("None, 0.0, True" in c for c in calls), calls


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.bfloat16])
def test_the_pattern_is_compared_block_by_block_to_the_last_row(dtype):
    from symmflow.torch import _causal

    rows, cols = 37, 41
    keep = torch.ones(rows, cols, dtype=torch.bool).tril()
    mask = keep if dtype == torch.bool else \
        torch.zeros(rows, cols, dtype=dtype).masked_fill(~keep, float("-inf"))
    mask = mask[None, None].expand(2, 3, rows, cols)
    assert _causal._is_causal(mask, rows_at_once=8)
    assert not _causal._is_causal(mask[..., :, 1:], rows_at_once=8)  # another diagonal
    wrong = mask.clone()
    wrong[1, 2, rows - 1, cols - 1] = True if dtype == torch.bool else 0.0  # the last block
    assert not _causal._is_causal(wrong, rows_at_once=8)
    if dtype != torch.bool:
        finite = torch.zeros(rows, cols, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)
        assert _causal._is_causal(finite, rows_at_once=8)
        small = torch.zeros(rows, cols, dtype=dtype).masked_fill(~keep, -1e4)
        assert not _causal._is_causal(small, rows_at_once=8)  # a bias, not a mask
    assert not _causal._is_causal(torch.ones(5, dtype=torch.bool))
    assert not _causal._is_causal(keep.to(torch.int32))


class CacheWrite(torch.nn.Module):
    """A KV cache made and written in place inside the call by tensor methods whose results go
    unused (transformers' StaticCache on its first call: zeros, index_copy_, add_), then read by
    an attention with a causal mask made from arange."""

    def forward(self, q, k, v):
        cache_k = torch.zeros(q.shape[0], 1, 12, q.shape[-1])
        cache_v = torch.zeros(q.shape[0], 1, 12, q.shape[-1])
        length = torch.zeros((), dtype=torch.int64)
        position = torch.arange(q.shape[2]) + length
        length.add_(q.shape[2])
        cache_k.index_copy_(2, position, k)
        cache_v.index_copy_(2, position, v)
        keep = _mask("causal", q.shape[2], 12)[None, None]
        out = F.scaled_dot_product_attention(q, cache_k, cache_v, attn_mask=keep)
        return out, cache_k, length


def test_writes_in_place_beside_a_rewritten_mask_are_kept(world):
    """The mask's nodes are removed after the rewrite, and nothing else: dead-code elimination of
    dynamo's graph took every in-place method whose result went unused with it (FX counts a
    method call as pure), so the cache was never written and the attention read zeros (wrong
    logits of a transformers prefill on the GPU machines' torch 2.11, with no error)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 1, 7, 16) for _ in range(3))
    report = _compiled(CacheWrite(), q, k, v)
    assert report.causal_masks == 1, report.text()


def test_a_transformers_prefill_that_makes_its_static_cache_in_the_call_is_right(
        world, monkeypatch):
    """transformers' StaticCache made inside the compiled prefill (its lazy initialisation on a
    first call), with the causal mask built (as under torch < 2.13): the logits, the key and value
    caches and the cache's length equal eager's."""
    import os
    import sys

    import transformers.masking_utils as masking
    from transformers import StaticCache

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                                    "pytorch"))
    import hf_models

    monkeypatch.setattr(masking, "_ignore_causal_mask_sdpa", lambda *a, **k: False)
    torch.manual_seed(0)
    model = hf_models.make_model("llama", torch.float32, max_positions=40).eval()
    ids = hf_models.make_input_ids(batch=1, seq=8)
    torch._dynamo.reset()
    caches, logits = [], []
    with torch.no_grad():
        for m in (model, torch.compile(model, backend="symmflow")):
            cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=15)
            logits.append(m(input_ids=ids, past_key_values=cache,
                            cache_position=torch.arange(8)).logits)
            caches.append(cache)
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-4, atol=1e-4)
    for want, got in zip(caches[0].layers, caches[1].layers):
        torch.testing.assert_close(got.keys, want.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.values, want.values, rtol=1e-5, atol=1e-5)
        assert int(got.cumulative_length) == int(want.cumulative_length) == 8
    assert sft.last_report().causal_masks == model.config.num_hidden_layers


def test_verify_mode_compares_the_call_with_dynamos_graph_before_the_rewrites(world, monkeypatch):
    """SYMMFLOW_TORCH_VERIFY=1 also runs dynamo's graph as traced, before the backend's rewrites:
    with the old dead-code elimination put back, the cache the compiled call returns differs from
    it, and the error names that output; with the fix the same call passes."""
    from symmflow.torch import _causal

    monkeypatch.setenv("SYMMFLOW_TORCH_VERIFY", "1")
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 1, 7, 16) for _ in range(3))
    _compiled(CacheWrite(), q, k, v)  # right: passes the check
    monkeypatch.setattr(_causal, "_erase_unread", lambda graph, evaluated:
                        graph.eliminate_dead_code())
    torch._dynamo.reset()
    with torch.no_grad(), pytest.raises(Exception) as e:
        torch.compile(CacheWrite(), backend="symmflow")(q, k, v)
    assert "SYMMFLOW_TORCH_VERIFY: output 0 of the compiled call against dynamo's graph " \
        "differs from PyTorch's" in str(e.value), str(e.value)
