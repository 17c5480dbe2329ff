"""The backend's modes and options, the user's input names, PyTorch's CUDA graphs wrapper on the
CPU (a pass-through) and Session.run_into into torch tensors (one process; a world of one)."""
from __future__ import annotations

import pytest
import torch

import symmflow
import symmflow.torch as sft
from symmflow.torch import _backend, _cudagraphs


class Lin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x, y):
        return self.lin(x) * 2.0 + y


def test_user_input_names_follow_dynamo_sources(world):
    seen = {}

    def spy(gm, example_inputs, **kw):
        seen["names"] = _backend.user_input_names(gm)
        return gm.forward

    with torch.no_grad():
        torch.compile(Lin(), backend=spy)(torch.randn(2, 8), torch.randn(2, 8))
    assert seen["names"] == ["self_lin_weight", "self_lin_bias", "x", "y"]


def test_compiled_partitions_name_the_users_inputs(world):
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(Lin(), backend="symmflow")(torch.randn(2, 8), torch.randn(2, 8))
    text = sft.last_report().partitions[0].ir_text
    assert text.startswith("graph partition_0(self_lin_weight: f32[8, 8], "
                           "self_lin_bias: f32[8], x: f32[2, 8], y: f32[2, 8])"), text


@pytest.mark.parametrize("mode,options,message", [
    ("max-autotune", None, "the symmflow backend takes mode None, 'default' or 'reduce-overhead' "
                           "(PyTorch's CUDA graphs around the compiled graph), not 'max-autotune'"),
    (None, {"fusion": True}, "the symmflow backend has no option ['fusion'] (it takes "
                             "'cuda_graph': False to run each partition without its own CUDA "
                             "graph, 'deterministic': True for results that do not depend on the "
                             "batch, 'direct_call': False to keep AOT autograd's runtime wrappers "
                             "on every call)"),
])
def test_unknown_modes_and_options_are_refused(world, mode, options, message):
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x * 2.0, backend="symmflow", mode=mode, options=options)
    with pytest.raises(Exception) as e, torch.no_grad():
        compiled(torch.randn(4))
    assert message in str(e.value)


@pytest.mark.parametrize("mode,options", [("reduce-overhead", None), (None, {"cuda_graph": False})])
def test_modes_on_cpu_give_eagers_results(world, mode, options):
    torch._dynamo.reset()
    model = Lin()
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    with torch.no_grad():
        want = model(x, y)
        compiled = torch.compile(model, backend="symmflow", mode=mode, options=options)
        for _ in range(3):  # warm-up, capture, replay on a GPU; the same call on the CPU
            torch.testing.assert_close(compiled(x, y), want)  # f32 tolerance


def test_graphed_callable_passes_cpu_calls_through():
    calls = []

    def fn(a, b):
        calls.append(1)
        return a + b, b

    g = _cudagraphs.GraphedCallable(fn)
    a, b = torch.ones(3), torch.arange(3.0)
    for _ in range(3):
        s, t = g(a, b)
        assert torch.equal(s, a + b) and t is b
    assert len(calls) == 3 and g.captures == 0 and g.replays == 0


def test_graphed_callable_replays_only_what_its_capture_fixed():
    """Note [replay checks], on the lists a capture leaves (no GPU needed: no graph is run).
    In place: the captured address; copied: a GPU tensor of the buffer's shape and dtype;
    anything else: the captured value."""
    class OnGpu(torch.Tensor):  # a host tensor that says it is on a GPU (only is_cuda is read)
        @property
        def is_cuda(self):
            return True

    def gpu(t):
        return t.as_subclass(OnGpu)

    g = _cudagraphs.GraphedCallable(lambda *a: a)
    weight, buffer = torch.zeros(4), gpu(torch.zeros(2, 3))
    g.n_args, g.in_place, g.copied, g.constants = 3, [(0, weight.data_ptr())], [(buffer, 1)], \
        [(2, 0.5)]
    fits = g._replayable
    assert fits((weight, gpu(torch.ones(2, 3)), 0.5))
    assert not fits((weight, buffer))  # another argument count
    assert not fits((torch.zeros(4), buffer, 0.5))  # the in-place argument moved
    assert not fits((0.0, buffer, 0.5))  # not a tensor where one was read in place
    assert not fits((weight, torch.ones(2, 3), 0.5))  # a host tensor to copy
    assert not fits((weight, gpu(torch.zeros(3, 2)), 0.5))  # the copied argument's shape
    assert not fits((weight, gpu(torch.zeros(2, 3, dtype=torch.float64)), 0.5))
    assert not fits((weight, 1.0, 0.5))
    assert not fits((weight, buffer, 0.25))  # another constant


def test_run_into_writes_torch_outputs_and_checks_them(world):
    rank = sft.init()
    program = symmflow.compile(symmflow.Program(
        "graph f(x: f32[4, 3]) {\n  y = aten::mul.Scalar(x, 3.0)\n  return y\n}\n", world_size=1))
    session = symmflow.Session(program, rank)
    x = torch.arange(12.0).reshape(4, 3)
    out = torch.full((4, 3), -1.0)
    stats = session.run_into([x], [out])
    assert torch.equal(out, x * 3.0)
    assert stats["output_copies"] == 0 and stats["outputs_bound"] == 1  # written in place
    with pytest.raises(symmflow.Error) as e:
        session.run_into([x], [torch.empty(3, 4)])
    assert str(e.value) == "run: output 0 ('y') of program 'f' is f32[4, 3], got f32[3, 4]"


def test_new_entry_points_refuse_bad_input(world):
    rank = sft.init()
    with pytest.raises(symmflow.Error) as e:
        sft.empty((4,), device="meta")
    assert str(e.value) == "symmflow has symmetric memory on cpu and cuda, not meta"
    with pytest.raises(symmflow.Error) as e:
        symmflow.empty_symmetric(rank, (4,), device="tpu")
    assert str(e.value) == "--device: 'cpu' or 'cuda' (got 'tpu')"
    group = sft.resolve_group(torch.distributed.group.WORLD.group_name).name
    x = sft.empty((4,))
    with pytest.raises(symmflow.Error) as e:
        symmflow.call_op(rank, "symm_mem::one_shot_all_reduce", x, "sum", group, steam=0)
    assert str(e.value) == "call_op: unknown keyword argument 'steam' (only 'stream')"
    program = symmflow.compile(symmflow.Program(
        "graph f(x: f32[4]) {\n  y = aten::neg(x)\n  return y\n}\n", world_size=1))
    session = symmflow.Session(program, rank)
    with pytest.raises(symmflow.Error) as e:
        session.run_into([torch.ones(4)], [torch.empty(4)], stream=0)
    assert str(e.value) == "run: program 'f' runs on the cpu; a stream orders GPU runs only"


def test_compiling_for_cuda_loads_its_kernels_first():
    """compile(..., device="cuda") registers the cuda backend's kernels before the passes choose
    (no GPU needed); a device symmflow lacks is refused. In a fresh process: nothing loaded yet."""
    import os
    import subprocess
    import sys

    code = (
        "import symmflow\n"
        "mm = lambda: next(e for e in symmflow.ops() if e['name'] == 'aten::mm')['backends']\n"
        "print(mm())\n"
        "try:\n"
        "    symmflow.compile('graph f(x: f32[2, 2]) {\\n  y = aten::mm(x, x)\\n  return y\\n}\\n',"
        " device='cuda')\n"
        "except symmflow.Error as e:\n"
        "    print('no cuda module:', e)\n"
        "print(mm())\n"
        "try:\n"
        "    symmflow.compile('graph f(x: f32[2]) {\\n  return x\\n}\\n', device='tpu')\n"
        "except symmflow.Error as e:\n"
        "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ)).stdout.splitlines()
    if any(line.startswith("no cuda module:") for line in out):
        pytest.skip("built without the cuda backend")
    assert out == ["['cpu']", "['cpu', 'cuda']", "compile: device 'cpu' or 'cuda' (got 'tpu')"], out


def test_a_new_collective_reaches_torch_ops_without_python_changes(world):
    """symm_mem::reduce_out was added in C++ alone (its definition and two kernel files); the
    catalogue registers it as torch.ops.symmflow.reduce_out (eager here, on a world of one)."""
    x = sft.empty((3, 5), dtype=torch.float32, group=world)
    x.copy_(torch.arange(15, dtype=torch.float32).reshape(3, 5))
    out = torch.full((3, 5), -1.0)
    torch.ops.symmflow.reduce_out(x, 0, "sum", world, out)
    torch.testing.assert_close(out, x, rtol=0, atol=0)
    with pytest.raises(Exception) as e:
        torch.ops.symmflow.reduce_out(x, 1, "sum", world, out)
    assert "symm_mem::reduce_out: root 1 out of range for group" in str(e.value)


# --- Note [pointer call] (python/symmflow/torch/_runner.py) -------------------------------------

class Many(torch.nn.Module):
    """Twelve inputs (the decoder layer's count), one output."""

    def forward(self, *ts):
        acc = ts[0] * ts[1]
        for i in range(2, 12, 2):
            acc = acc + ts[i] * ts[i + 1]
        return acc


def test_steady_calls_pass_addresses_and_match_eager(world):
    torch._dynamo.reset()
    m = Many()
    f = torch.compile(m, backend="symmflow")
    with torch.no_grad():
        for call in range(4):
            xs = [torch.randn(5, 7, dtype=torch.float64) for _ in range(12)]
            assert torch.equal(f(*xs), m(*xs)), call
    runner = _backend.last_runner()
    # the first call counts the report's copies through the checked path; the others pass addresses
    assert (runner.checked_calls, runner.pointer_calls) == (1, 3)


def test_pointer_path_off_gives_the_same_results(world, monkeypatch):
    from symmflow.torch._runner import PartitionRunner
    monkeypatch.setattr(PartitionRunner, "pointer_path", False)
    torch._dynamo.reset()
    m = Many()
    f = torch.compile(m, backend="symmflow")
    with torch.no_grad():
        for _ in range(3):
            xs = [torch.randn(5, 7) for _ in range(12)]
            assert torch.equal(f(*xs), m(*xs))
    assert (_backend.last_runner().checked_calls, _backend.last_runner().pointer_calls) == (3, 0)


def test_a_call_the_specs_do_not_fit_takes_the_checked_path(world):
    """A non-contiguous tensor is copied dense and passed by address (Note [strided inputs on the
    pointer path]), a wrong shape or dtype is refused naming it by the checked path: the
    addresses alone would have read the wrong memory."""
    torch._dynamo.reset()
    m = Lin()
    f = torch.compile(m, backend="symmflow")
    x, y = torch.randn(2, 8), torch.randn(2, 8)
    with torch.no_grad():
        f(x, y)
        runner = _backend.last_runner()
        params = [m.lin.weight, m.lin.bias]
        base = runner.checked_calls
        # atol: OpenBLAS and PyTorch sum the 8 products in other orders, and an output of the
        # random inputs near 0 is beyond rtol alone (seen once in CI: -0.0041 off by ~1e-7).
        assert torch.allclose(runner(*params, x, y), m(x, y), atol=1e-6)
        assert runner.checked_calls == base and runner.pointer_calls >= 1
        pointer_calls = runner.pointer_calls
        strided = torch.randn(8, 2).t()
        assert torch.allclose(runner(*params, strided, y), m(strided, y), atol=1e-6)
        assert (runner.checked_calls, runner.pointer_calls) == (base, pointer_calls + 1)
        pointer_calls = runner.pointer_calls
        with pytest.raises(symmflow.Error) as e:
            runner(*params, torch.randn(3, 8), y)
        assert "input 2 ('x') of program 'partition_0' is f32[2, 8], got f32[3, 8]" in str(e.value)
        with pytest.raises(symmflow.Error) as e:
            runner(*params, x.double(), y)
        assert "input 2 ('x') of program 'partition_0' is f32[2, 8], got f64[2, 8]" in str(e.value)
        assert runner.pointer_calls == pointer_calls  # both refused by the checked path


def test_run_pointers_checks_the_counts(world):
    rank = sft.init()
    program = symmflow.compile(symmflow.Program(
        "graph f(x: f32[4, 3], y: f32[4, 3]) {\n  z = aten::add.Tensor(x, y)\n  return z\n}\n",
        world_size=1))
    session = symmflow.Session(program, rank)
    x, y, out = torch.arange(12.0).reshape(4, 3), torch.ones(4, 3), torch.empty(4, 3)
    assert session.run_pointers([x.data_ptr(), y.data_ptr()], [out.data_ptr()]) is None
    assert torch.equal(out, x + 1)
    with pytest.raises(symmflow.Error) as e:
        session.run_pointers([x.data_ptr()], [out.data_ptr()])
    assert str(e.value) == "run_pointers: the program takes 2 inputs, got 1"
    with pytest.raises(symmflow.Error) as e:
        session.run_pointers([x.data_ptr(), y.data_ptr()], [])
    assert str(e.value) == "run_pointers: the program takes 1 outputs, got 0"


def test_importing_symmflow_torch_leaves_cudnn_attention_to_the_tunable():
    """symmflow.torch no longer switches cuDNN's attention off (it ran under PyTorch once the GPU
    build shared PyTorch's libstdc++: docs/cuda.md, "cuDNN under PyTorch"): the tunable keeps its
    default, and a value the user set holds."""
    import os
    import subprocess
    import sys

    code = ("import symmflow.torch, symmflow; "
            "print(symmflow.tunables()['cuda_cudnn']['value'])")
    env = {k: v for k, v in os.environ.items() if k != "SYMMFLOW_CUDA_CUDNN"}
    default = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=120)
    assert default.stdout.strip() == "1", default.stderr
    off = subprocess.run([sys.executable, "-c", code], env={**env, "SYMMFLOW_CUDA_CUDNN": "0"},
                         capture_output=True, text=True, timeout=120)
    assert off.stdout.strip() == "0", off.stderr


def test_graphed_callable_copies_a_written_argument_back_after_a_replay():
    """An argument the graph writes (AOT keeps an inference graph's input mutations in it, Note
    [the KV cache in place]) that was copied into a static buffer is copied back into the
    caller's tensor after each replay; one read in place, or one not written, is not."""
    class OnGpu(torch.Tensor):
        @property
        def is_cuda(self):
            return True

    class FakeGraph:  # a replay writes its static buffers as the captured graph would
        def __init__(self, buffers):
            self.buffers = buffers

        def replay(self):
            for b in self.buffers:
                b.add_(1.0)

    written, read = torch.zeros(3).as_subclass(OnGpu), torch.zeros(3).as_subclass(OnGpu)
    g = _cudagraphs.GraphedCallable(lambda *a: a, mutated=[0])
    bw, br = torch.zeros(3), torch.zeros(3)
    g.n_args, g.in_place, g.constants = 2, [], []
    g.copied = [(bw, 0), (br, 1)]
    g.copied_back = [(b, i) for b, i in g.copied if i in g.mutated]
    g.graph, g.static_outputs = FakeGraph([bw, br]), ()
    for k in range(1, 3):
        caller_w = written.clone().as_subclass(OnGpu) + 5.0
        caller_r = read.clone().as_subclass(OnGpu) + 5.0
        g(caller_w, caller_r)
        assert torch.equal(caller_w, torch.full((3,), 6.0))  # the replay's write reached it
        assert torch.equal(caller_r, torch.full((3,), 5.0))  # not written: left as it was
    assert g.replays == 2


def test_mutated_inputs_are_the_graph_inputs_an_op_writes():
    g = torch.fx.Graph()
    a, b, c = g.placeholder("a"), g.placeholder("b"), g.placeholder("c")
    s = g.call_function(torch.ops.aten.add.Tensor, (a, b))
    g.call_function(torch.ops.aten.copy_.default, (c, s))
    g.output((s,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    assert _backend._mutated_inputs(gm) == [2]


def test_graphed_callable_runs_calls_with_an_int_argument_without_a_graph():
    """An int argument is one dynamo made dynamic (Note [ints that change every call]): a
    capture would fix it and could not upload it, so such calls run without a graph."""
    class OnGpu(torch.Tensor):
        @property
        def is_cuda(self):
            return True

    calls = []
    g = _cudagraphs.GraphedCallable(lambda x, n: calls.append(n) or x * n)
    x = torch.ones(3).as_subclass(OnGpu)
    for n in (3, 4, 5):
        assert torch.equal(g(x, n), torch.full((3,), float(n)))
    assert calls == [3, 4, 5] and g.captures == 0 and g.replays == 0
