"""`torch.compile(model, backend="symmflow")` (issue 17, item 4).

The backend takes dynamo's graph, keeps attention whole (_sdpa), and hands it to AOT autograd with
the core ATen decompositions; AOT autograd functionalises it (in-place collectives become
functional ops and copies) and calls `_compile_forward` with an ATen graph. That graph is split
by capability (_partition): runs of ops symmflow has become partitions, each imported into
symmflow IR (_fx_import), compiled by the full pipeline (placement in symmetric memory, planning,
race check) and bound to this rank as a Session; the ops between stay PyTorch's, and every
boundary is recorded with the op that caused it. A compiled partition runs with PyTorch's tensors
bound by DLPack without copies (Note [binding torch tensors]).

Every allocation and rendezvous happens when a partition is compiled, which dynamo does on the
first call with a new shape (its guards decide recompiles); nothing is cached across worlds: a
report and its sessions belong to the world of symmflow.torch.init().

Refuses: graphs that need gradients (symmflow compiles inference; use torch.no_grad() or
torch.inference_mode()), with an error saying so.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import threading

import torch
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd

import symmflow

from . import _fx_import, _library, _opmap, _partition, _runtime, _sdpa

# Note [streams]: on a GPU a compiled partition runs on the Session's stream, not PyTorch's
# current stream; the runner waits for PyTorch's stream before the run and Session.run returns
# once its work is done, so the order of PyTorch's and symmflow's kernels is kept at the cost of
# two host synchronisations per partition call (measured by tools/device/torch_backend.py).
# Running on PyTorch's stream, and so inside PyTorch's own CUDA graphs, is not done yet.

# Note [binding torch tensors]: a partition's inputs reach Session.run as the torch tensors
# themselves (DLPack, no copy); a non-contiguous input is made contiguous first and counted in the
# report (`input_copies`). Outputs come back as tensors that own the plan's result memory
# (torch.from_dlpack, no copy), so they stay valid after the next call.


@dataclasses.dataclass
class PartitionReport:
    """One symmflow partition: its IR, the compiled plan's explain data and text."""

    name: str
    ir_text: str
    explain: dict
    explain_text: str
    device: str

    def copies(self) -> list:
        return list(self.explain.get("copies", []))


@dataclasses.dataclass
class CompileReport:
    """What one compiled graph became: partitions (symmflow's) and boundaries (PyTorch's ops)."""

    partitions: list[PartitionReport] = dataclasses.field(default_factory=list)
    kinds: list[str] = dataclasses.field(default_factory=list)  # "symmflow" / "torch", in order
    boundaries: list[str] = dataclasses.field(default_factory=list)
    fallback_ops: list[str] = dataclasses.field(default_factory=list)
    input_copies: int = 0

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    def partition_kinds(self) -> list[str]:
        """Who runs each partition of the split graph, in call order."""
        return list(self.kinds)

    def copies_added(self) -> int:
        """Copies the compiler added in every partition (explain's `copies`)."""
        return sum(len(p.copies()) for p in self.partitions)

    def all_reduce_inputs_in_place(self) -> bool:
        """Whether every collective's input was produced straight into symmetric memory: no copy
        was added, and each partition with a collective has a symmetric pool holding intermediates
        only."""
        for p in self.partitions:
            if not p.explain.get("collectives"):
                continue
            if p.copies():
                return False
            symm = [b for b in p.explain["buffers"] if b["pool"].startswith("symm")]
            if not symm or not all(b["intermediate"] for b in symm):
                return False
        return True

    def text(self) -> str:
        lines = [f"symmflow: {len(self.partitions)} partition(s), "
                 f"{len(self.boundaries)} boundary(ies)"]
        lines.append("  partitions in call order: " + " -> ".join(self.kinds))
        lines += [f"  {b}" for b in self.boundaries]
        lines += [f"  left to PyTorch: {why}" for why in self.fallback_ops]
        for p in self.partitions:
            lines.append(f"== partition {p.name} on {p.device}")
            lines.append(p.explain_text.rstrip())
        return "\n".join(lines) + "\n"


_reports_lock = threading.Lock()
_reports: list[CompileReport] = []


_last_session = None


def last_session():
    """The Session of the partition compiled last (for measurements of the Python path)."""
    return _last_session


def last_report() -> CompileReport | None:
    """The report of the graph compiled last on this process (None before any)."""
    with _reports_lock:
        return _reports[-1] if _reports else None


def reports() -> list[CompileReport]:
    with _reports_lock:
        return list(_reports)


@functools.cache
def _catalogue():
    return _opmap.load_catalogue()


class _PartitionRunner:
    """A compiled partition bound to this rank: called with the partition's torch tensors."""

    def __init__(self, imported, session, rank, report: CompileReport, single_output: bool):
        self.imported, self.session, self.rank, self.report = imported, session, rank, report
        self.single_output = single_output  # the submodule returns one value, not a tuple
        self.cuda = session.device_description != "cpu"

    def __call__(self, *args):
        if self.cuda:
            # The plan runs on symmflow's stream: the inputs PyTorch queued must be done
            # (Note [streams]).
            torch.cuda.current_stream().synchronize()
        tensors = []
        for a in args:
            if not a.is_contiguous():
                a = a.contiguous()
                self.report.input_copies += 1
            tensors.append(a.detach())
        try:
            results = self.session.run(tensors)
        except symmflow.Error:
            raise
        except BaseException as e:
            self.rank.abort(f"{type(e).__name__}: {e}")
            raise
        outs = self.imported.assemble_outputs(args, [torch.from_dlpack(r) for r in results])
        return outs[0] if self.single_output else outs


def _compile_partition(sub_gm: torch.fx.GraphModule, example_inputs, report: CompileReport,
                       index: int):
    rank = _runtime.current_rank()
    device = _runtime.device_of(example_inputs)
    # The cuda backend registers its kernels when loaded, and the compiler picks among the
    # registered ones: load it before compiling (the first GPU compile of a process failed
    # "aten::mm has no cuda kernel yet" without this, on the H100).
    symmflow.check_device(device)
    imported = _fx_import.import_graph(
        sub_gm, example_inputs, world_size=rank.world_size, rank=rank.rank,
        group_resolver=lambda name: [list(s) for s in _runtime.resolve_group(name).subgroups],
        group_namer=_runtime.group_name, catalogue=_catalogue(), name=f"partition_{index}",
    )
    compiled = symmflow.compile(
        symmflow.Program(imported.text, world_size=rank.world_size,
                         filename=f"<torch partition {index}>"))
    session = symmflow.Session(compiled, rank, device=device,
                               cuda_graph=os.environ.get("SYMMFLOW_TORCH_CUDA_GRAPH", "1") != "0")
    global _last_session
    _last_session = session
    report.partitions.append(PartitionReport(
        name=f"partition_{index}", ir_text=imported.text, explain=compiled.explain(),
        explain_text=compiled.explain_text(), device=device))
    output = next(n for n in sub_gm.graph.nodes if n.op == "output")
    single = not isinstance(output.args[0], (tuple, list))
    return _PartitionRunner(imported, session, rank, report, single)


def _compile_forward(gm: torch.fx.GraphModule, example_inputs):
    _runtime.current_rank()  # joins the world (collective) before any partition compiles
    report = CompileReport()
    counter = iter(range(1 << 30))
    split = _partition.partition(
        gm, _catalogue(),
        compile_partition=lambda sub, ex: _compile_partition(sub, ex, report, next(counter)),
        example_inputs=example_inputs,
    )
    report.boundaries = list(split.boundaries)
    report.fallback_ops = [p.reason for p in split.partitions if not p.supported]
    report.kinds = ["symmflow" if p.supported else "torch" for p in split.partitions]
    with _reports_lock:
        _reports.append(report)
    rank = _runtime.current_rank()
    module = split.split_gm

    def run(*args):
        try:
            return module(*args)
        except symmflow.Error:
            raise
        except BaseException as e:
            # A rank failing between partitions would leave its peers waiting in the next
            # collective: poison the world so they raise naming this rank.
            rank.abort(f"{type(e).__name__}: {e}")
            raise

    return run


def symmflow_backend(gm: torch.fx.GraphModule, example_inputs, **options):
    """The dynamo backend registered as "symmflow"."""
    # Decided here, on dynamo's graph: AOT autograd runs the forward compiler under no_grad.
    if torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad
        for t in [*example_inputs, *gm.parameters()]
    ):
        raise symmflow.Error(
            "the symmflow backend compiles inference graphs; this graph needs gradients (call the "
            "model under torch.no_grad() or torch.inference_mode())")
    _library_ready()
    _sdpa.keep_attention_whole(gm)
    _library.make_inplace_symm_mem_functionalizable(gm)
    compiler = aot_autograd(
        fw_compiler=_compile_forward,
        decompositions=core_aten_decompositions(),
    )
    return compiler(gm, example_inputs)


@functools.cache
def _library_ready() -> None:
    _library.register_ops()
    _library.register_torch_symm_mem_kernels()
