"""symmflow for PyTorch programs (issue 17; docs/pytorch.md).

    import symmflow.torch                      # registers the "symmflow" dynamo backend
    torch.distributed.init_process_group("gloo")   # torchrun sets the rendezvous
    model = torch.compile(model, backend="symmflow")

- `init()` joins symmflow's world through torch.distributed's store (the first compiled call does
  it by itself); `empty(shape, dtype=, group=)` allocates a tensor in a symmetric heap;
  `torch.ops.symmflow.<op>` are the symm_mem ops of symmflow's catalogue on such tensors.
- `torch.compile(..., backend="symmflow")` compiles inference graphs: symmflow runs what it has,
  PyTorch the rest, each boundary listed in `last_report()`.
- `explain(model, *inputs)` compiles and runs the model once, prints the partitions and every
  plan as `symmflow explain` does, and returns the report.
"""
from __future__ import annotations

import torch

from ._backend import CompileReport, PartitionReport, last_report, reports, symmflow_backend
from ._fx_import import UnsupportedGraph
from ._library import empty, register_ops, register_torch_symm_mem_kernels
from ._runtime import init, resolve_group

__all__ = ["init", "empty", "explain", "last_report", "reports", "register_ops", "resolve_group",
           "symmflow_backend", "CompileReport", "PartitionReport", "UnsupportedGraph"]


def _register_backend() -> None:
    """Registers backend="symmflow", unless dynamo is loading it through the entry point that
    `pip install .` declares (it registers what the entry point names itself)."""
    from torch._dynamo.backends import registry

    if "symmflow" in registry._COMPILER_FNS or registry._BACKENDS.get("symmflow") is not None:
        return
    torch._dynamo.register_backend(compiler_fn=symmflow_backend, name="symmflow")


_register_backend()
register_ops()
register_torch_symm_mem_kernels()


def explain(model, *inputs, print_report: bool = True, **kwargs) -> CompileReport:
    """Compiles `model` with the symmflow backend, runs it once on `inputs` and `kwargs`
    (collective: every rank calls), prints the partitions and each plan, and returns the report
    as data. Dynamo's caches are left alone: the compile goes through a backend object of its
    own, so dynamo compiles anew for it while the user's compiled models keep theirs."""
    def backend(gm, example_inputs):
        return symmflow_backend(gm, example_inputs)

    compiled = torch.compile(model, backend=backend)
    before = len(reports())
    with torch.no_grad():
        compiled(*inputs, **kwargs)
    new = reports()[before:]
    report = CompileReport()
    for r in new:
        report.partitions += r.partitions
        report.boundaries += r.boundaries
        report.fallback_ops += r.fallback_ops
        report.kinds += r.kinds
        report.input_copies += r.input_copies
        report.compile_seconds += r.compile_seconds
        report.constant_uploads += r.constant_uploads
    import symmflow

    report.kernel_choices = symmflow.kernel_choices()
    if print_report:
        print(report.text(), end="")
    return report
