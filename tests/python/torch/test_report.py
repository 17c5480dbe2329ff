"""What a compiled graph's report tells (issue 24, item 6): copies_added() counts the partition
inputs made contiguous as well as the plans' copies; explain(model, *args, **kwargs) takes
keyword inputs, leaves dynamo's caches alone, and reports the compile time."""
from __future__ import annotations

import torch
import torch.distributed._functional_collectives as funcol

import symmflow.torch as sft
from symmflow.torch import _backend


class Scaled(torch.nn.Module):
    def __init__(self, group):
        super().__init__()
        self.group = group
        self.w = torch.nn.Parameter(torch.randn(8, 8) / 4, requires_grad=False)

    def forward(self, x, *, scale=1.0):
        return funcol.all_reduce(x @ self.w, "sum", self.group) * scale


def test_input_copies_are_counted_once_per_graph(world):
    class Sin(torch.nn.Module):
        def forward(self, x):
            return torch.sin(x) + 1.0

    torch._dynamo.reset()
    compiled = torch.compile(Sin(), backend="symmflow")
    x = torch.randn(4, 6).t()  # a non-contiguous input: made contiguous once per call
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), torch.sin(x) + 1.0)
    report = sft.last_report()
    assert report.input_copies == 1, report.text()
    assert report.copies_added() == report.plan_copies() + 1
    assert "1 input copies" in report.text()


def test_explain_takes_keyword_inputs_and_leaves_other_compiled_models_alone(world, capsys):
    model = Scaled(world)
    x = torch.randn(4, 8)
    other = torch.compile(lambda t: torch.cos(t) * 2.0, backend="symmflow")
    with torch.no_grad():
        other(x)
    reports_before = len(sft.reports())
    report = sft.explain(model, x, scale=3.0)
    out = capsys.readouterr().out
    assert report.partition_count == 1 and report.boundaries == []
    assert report.compile_seconds > 0 and "compiled in" in out
    assert "symm[" in out  # the plan's symmetric pool is shown
    # `other` is still compiled: calling it compiles nothing new (no reset happened).
    count = len(sft.reports())
    with torch.no_grad():
        torch.testing.assert_close(other(x), torch.cos(x) * 2.0)
    assert len(sft.reports()) == count
    assert count == reports_before + 1
    # The keyword reached the model.
    with torch.no_grad():
        want = model(x, scale=3.0)
        got = torch.compile(model, backend="symmflow")(x, scale=3.0)
    torch.testing.assert_close(got, want)
    assert isinstance(report, _backend.CompileReport)


def test_the_report_prints_the_gpu_kernel_choices_it_holds():
    """explain() fills kernel_choices from symmflow.kernel_choices() ('' on CPUs, where nothing is
    chosen by measurement) and text() prints them under their own heading only when there are
    some."""
    report = _backend.CompileReport()
    assert "GPU kernels chosen" not in report.text()
    line = ("aten::scaled_dot_product_attention f32 b1 h8/8 l16 s16 e64/64 causal cudnn: own "
            "(only candidate; refused: cudnn: cuDNN's fused attention takes bf16 and f16 only)")
    report.kernel_choices = line + "\n"
    text = report.text()
    assert "== GPU kernels chosen by measurement" in text
    assert text.rstrip().endswith(line)


def test_explain_on_cpus_has_no_kernel_choices(world, capsys):
    import symmflow

    report = sft.explain(Scaled(world), torch.randn(4, 8))
    capsys.readouterr()
    assert symmflow.kernel_choices() == "" and report.kernel_choices == ""
