"""The aten ops that AOT autograd's training graphs of transformers' decoders add, compiled by
torch.compile(backend="symmflow") and compared with PyTorch eager on every element, each graph
one symmflow partition with no boundary: constant_pad_nd (the loss's label shift), squeeze.dims,
scatter.value (nll_loss's backward), slice_scatter (the rotary embedding's backward),
_log_softmax, clamp (the embedding backward's index clamp) and `number - tensor` (the decomposed
silu backward's 1 - sigmoid, imported as aten::rsub.Scalar); then a small decoder-like loss whose
forward and backward graphs hold them all, its gradients against autograd's.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import symmflow.torch as sft

pytestmark = pytest.mark.usefixtures("world")  # a one-process gloo world (conftest.py)


def _compiled_equals_eager(fn, *args, exact=True):
    """fn compiled (inference) equals fn eager (bitwise when `exact`, NaN equal to NaN); the graph
    is one symmflow partition. Returns the compiled result."""
    torch._dynamo.reset()
    with torch.no_grad():
        want = fn(*args)
        got = torch.compile(fn, backend="symmflow")(*args)
    report = sft.last_report()
    assert (report.partition_count, report.boundaries) == (1, []), report.text()
    if exact:
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(got, want, equal_nan=True)
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64])
def test_constant_pad_nd(dtype):
    x = (torch.randn(3, 5) * 10).to(dtype)
    _compiled_equals_eager(lambda t: F.pad(t, (0, 1), value=-100), x)  # the label shift
    _compiled_equals_eager(lambda t: F.pad(t, (1, -1, 2, 0), value=3), x)
    _compiled_equals_eager(lambda t: F.pad(t, (-2, -1)) * 2, x)


def test_squeeze_dims():
    x = torch.randn(1, 4, 1, 3)
    _compiled_equals_eager(lambda t: t.squeeze((0, 2)) * 2, x)
    _compiled_equals_eager(lambda t: t.squeeze((1, -2)) + 1, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_scatter_value(dtype):
    torch.manual_seed(0)
    x = (torch.randn(4, 7) * 5).to(dtype)
    idx = torch.randint(0, 7, (4, 9))  # larger than self along dim: repeated indices
    _compiled_equals_eager(lambda t, i: torch.scatter(t, 1, i, 2), x, idx)
    idx0 = torch.randint(0, 4, (6, 7))
    _compiled_equals_eager(lambda t, i: t.scatter(0, i, -1) * 3, x, idx0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_slice_scatter(dtype):
    x, src = torch.randn(3, 8, dtype=dtype), torch.randn(3, 3, dtype=dtype)
    _compiled_equals_eager(lambda a, b: torch.slice_scatter(a, b, 1, 1, 7, 2), x, src)
    _compiled_equals_eager(lambda a, b: torch.slice_scatter(a, b[:, :2], -1, -2), x, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log_softmax(dtype):
    x = torch.randn(3, 5, 7, dtype=dtype) * 4
    _compiled_equals_eager(lambda t: torch.log_softmax(t, -1), x, exact=False)
    _compiled_equals_eager(lambda t: torch.log_softmax(t, 1), x, exact=False)


@pytest.mark.parametrize("dim", [-1, 1])
def test_log_softmax_bf16_rounds_once(dim):
    """bf16: symmflow computes in float and rounds once, within half a bf16 ulp of the f64 result
    (PyTorch's CPU kernel rounds x - max to bf16 first, so eager may differ by one ulp)."""
    torch.manual_seed(12)
    x = torch.randn(3, 5, 7, dtype=torch.bfloat16) * 4
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(lambda t: torch.log_softmax(t, dim), backend="symmflow")(x)
    assert (sft.last_report().partition_count, sft.last_report().boundaries) == (1, [])
    ref = torch.log_softmax(x.double(), dim)
    assert got.dtype == torch.bfloat16
    err = ((got.double() - ref).abs() / ref.abs().clamp(min=1)).max().item()
    assert err <= 2.0**-8, err


def test_clamp_and_number_minus_tensor():
    ids = torch.randint(-300, 300, (2, 8))
    _compiled_equals_eager(lambda t: t.clamp(-128, 127), ids)
    x = torch.randn(4, 6)
    x[0, 0] = float("nan")
    _compiled_equals_eager(lambda t: t.clamp(min=-0.5) * 2, x)
    _compiled_equals_eager(lambda t: t.clamp(max=0.25) + 1, x)
    _compiled_equals_eager(lambda t: torch.sub(1, t), x)
    # alpha != 1: a multiply then an add, as sub.Scalar computes it (PyTorch may fuse: one ulp)
    _compiled_equals_eager(lambda t: torch.sub(2.5, t, alpha=3), x, exact=False)
    # the silu backward's form (sigmoid itself within float rounding of PyTorch's)
    _compiled_equals_eager(lambda t: torch.sub(1, torch.sigmoid(t)), x, exact=False)
    n = torch.randint(-50, 50, (3, 4))
    _compiled_equals_eager(lambda t: torch.sub(7, t, alpha=2), n)


class _TinyDecoder(torch.nn.Module):
    """Embedding, a rotary-style half swap, a SiLU MLP and transformers' shifted cross-entropy."""

    def __init__(self, vocab=11, dim=8):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(vocab, dim, generator=g))
        self.up = torch.nn.Parameter(torch.randn(dim, 2 * dim, generator=g) / dim**0.5)
        self.out = torch.nn.Parameter(torch.randn(2 * dim, vocab, generator=g) / dim**0.5)

    def forward(self, ids, labels):
        h = F.embedding(ids, self.emb)
        half = h.shape[-1] // 2
        rot = torch.cat((-h[..., half:], h[..., :half]), dim=-1)  # rotate_half
        h = h * 0.6 + rot * 0.8
        logits = F.silu(h @ self.up) @ self.out
        labels = F.pad(labels, (0, 1), value=-100)[..., 1:]  # ForCausalLMLoss's shift
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.reshape(-1),
                               ignore_index=-100)


def test_decoder_loss_trains_in_one_partition_per_graph():
    ids = torch.randint(0, 11, (2, 6))
    want_model, got_model = _TinyDecoder(), _TinyDecoder()
    want = want_model(ids, ids)
    want.backward()
    torch._dynamo.reset()
    before = len(sft.reports())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(got_model, backend="symmflow")(ids, ids)
        got.backward()
    # The backward takes AOT's boxed arguments: no warning about them.
    assert not [w for w in caught if "boxed" in str(w.message)], [str(w.message) for w in caught]
    reports = sft.reports()[before:]
    assert [(r.partition_count, r.boundaries) for r in reports] == [(1, []), (1, [])], \
        "\n".join(r.text() for r in reports)
    torch.testing.assert_close(got, want)
    for (name, w), g in zip(want_model.named_parameters(), got_model.parameters()):
        torch.testing.assert_close(g.grad, w.grad, msg=name)
