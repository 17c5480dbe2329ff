"""Inference graphs called without AOT autograd's runtime wrappers after their first call (Note
[inference without AOT's wrappers] in python/symmflow/torch/_direct.py), one process, a world of
one: the direct call taken where the wrappers changed nothing, with PyTorch's results at every
call; kept, with the reason in the report, where they do something."""
from __future__ import annotations

import torch

from symmflow.torch import _backend, _direct


def compiled(fn, mode=None, options=None):
    """fn under torch.compile with the symmflow backend, and what the backend returned to dynamo
    for each graph it compiled."""
    returned = []

    def backend(gm, example_inputs):
        returned.append(_backend.symmflow_backend(gm, example_inputs, mode=mode, options=options))
        return returned[-1]

    torch._dynamo.reset()
    return torch.compile(fn, backend=backend), returned


class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x, y):
        return torch.relu(self.lin(x)) * 2.0 + y


def test_an_inference_graph_is_called_directly_from_its_second_call(world):
    model = Lin()
    fn, returned = compiled(model)
    with torch.no_grad():
        for call in range(4):
            x, y = torch.randn(3, 8), torch.randn(3, 8)
            torch.testing.assert_close(fn(x, y), model(x, y), rtol=1e-5, atol=1e-6)
    (direct,) = returned
    assert isinstance(direct, _direct.DirectInference)
    assert direct.direct_calls == 3  # every call after the probing first
    assert _backend.last_report().direct_call == "taken"
    assert "straight to the compiled graph, without AOT autograd's runtime wrappers" in \
        _backend.last_report().text()


def test_dtensor_parameters_are_unwrapped_to_their_local_shards(world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (1,))
    model = Lin()
    want_model = Lin()
    want_model.load_state_dict(model.state_dict())
    parallelize_module(model, mesh, {"lin": ColwiseParallel()})
    fn, returned = compiled(model)
    with torch.no_grad():
        for _ in range(3):
            x, y = torch.randn(5, 8), torch.randn(5, 8)
            torch.testing.assert_close(fn(x, y), want_model(x, y), rtol=1e-5, atol=1e-6)
    direct = returned[-1]
    assert direct.plan, _backend.last_report().direct_call
    assert any(attr == "_local_tensor" for _, attr in direct.plan.inputs), direct.plan
    assert direct.direct_calls == 2


def test_an_output_that_is_an_input_is_returned_as_the_callers_tensor(world):
    fn, returned = compiled(lambda x, y: (x * 2.0, y))
    with torch.no_grad():
        for _ in range(3):
            x, y = torch.randn(4), torch.randn(4)
            a, b = fn(x, y)
            torch.testing.assert_close(a, x * 2.0)
            assert b is y
    assert returned[-1].direct_calls == 2


def test_a_view_of_an_input_keeps_aots_wrappers_and_says_why(world):
    fn, returned = compiled(lambda x: (x * 2.0, x.t()))
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(3, 4)
            a, b = fn(x)
            torch.testing.assert_close(a, x * 2.0)
            assert torch.equal(b, x.t()) and b.data_ptr() == x.data_ptr()  # still a view
    assert returned[-1].direct_calls == 0 and returned[-1].plan is False
    why = _backend.last_report().direct_call
    assert why == "AOT's wrappers kept: AOT's wrappers made output 1 anew (a view of an input, " \
                  "a subclass)", why


def test_an_input_the_graph_writes_is_written_and_its_version_moves(world):
    def step(cache, pos, x):
        cache.index_copy_(0, pos, x)
        return cache.sum(0) * 1.0

    fn, returned = compiled(step)
    cache, want = torch.zeros(6, 4), torch.zeros(6, 4)
    with torch.no_grad():
        for i in range(4):
            pos, x = torch.tensor([i]), torch.randn(1, 4)
            version = cache._version
            got = fn(cache, pos, x)
            want_sum = step(want, pos, x)
            torch.testing.assert_close(got, want_sum)
            torch.testing.assert_close(cache, want)
            assert cache._version > version  # as AOT's wrappers bump it
    assert returned[-1].direct_calls == 3, _backend.last_report().direct_call


def test_grad_enabled_inference_returns_tensors_without_history(world):
    model = Lin().requires_grad_(False)
    fn, returned = compiled(model)
    for _ in range(3):
        x, y = torch.randn(2, 8), torch.randn(2, 8)
        out = fn(x, y)
        assert not out.requires_grad and out.grad_fn is None
        assert torch.is_grad_enabled()
        torch.testing.assert_close(out, model(x, y), rtol=1e-5, atol=1e-6)
    assert returned[-1].direct_calls == 2


def test_a_repeated_argument_deduplicated_by_aot_is_passed_once(world):
    fn, returned = compiled(lambda a, b: a * 2.0 + b)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(5)
            torch.testing.assert_close(fn(x, x), x * 3.0)
    assert returned[-1].direct_calls == 2


def test_the_option_and_the_variable_keep_aots_wrappers(world, monkeypatch):
    model = Lin()
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    with torch.no_grad():
        fn, returned = compiled(model, options={"direct_call": False})
        for _ in range(2):
            torch.testing.assert_close(fn(x, y), model(x, y), rtol=1e-5, atol=1e-6)
        assert not isinstance(returned[-1], _direct.DirectInference)
        assert _backend.last_report().direct_call == ""
        monkeypatch.setenv("SYMMFLOW_TORCH_DIRECT_CALL", "0")
        fn, returned = compiled(model)
        fn(x, y)
        assert not isinstance(returned[-1], _direct.DirectInference)


def test_a_training_graph_keeps_aots_wrappers(world):
    model = Lin()
    fn, returned = compiled(model)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    fn(x, y).sum().backward()
    assert not isinstance(returned[-1], _direct.DirectInference)
    assert model.lin.weight.grad is not None


def test_autocast_keeps_aots_wrappers(world):
    model = Lin()
    fn, returned = compiled(model)
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = model(x, y)
        for _ in range(2):
            got = fn(x, y)
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    assert returned[-1].plan is False
    assert _backend.last_report().direct_call == "AOT's wrappers kept: autocast is on"


def test_a_number_that_changes_every_call_is_read_at_each_call(world):
    fn, returned = compiled(lambda x, n: x * n + 1.0)
    with torch.no_grad():
        for n in range(2, 8):  # dynamo makes n an input of the graph from its second value
            x = torch.randn(6)
            torch.testing.assert_close(fn(x, n), x * n + 1.0)
    last = returned[-1]
    assert last.plan, _backend.last_report().direct_call
    assert last.direct_calls >= 3  # each with its own n, compared above


def test_the_wrapper_passes_aots_attributes_and_copies(world):
    import copy

    fn, returned = compiled(Lin())
    with torch.no_grad():
        fn(torch.randn(2, 8), torch.randn(2, 8))
    direct = returned[-1]
    assert callable(direct.named_parameters)  # AOT's callable's, passed through
    twin = copy.copy(direct)  # no recursion through __getattr__ before __init__'s attributes
    assert twin.aot_fn is direct.aot_fn
