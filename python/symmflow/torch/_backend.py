"""`torch.compile(model, backend="symmflow")` (issue 17, item 4).

The backend takes dynamo's graph, keeps attention whole (_sdpa), and hands it to AOT autograd with
the core ATen decompositions; AOT autograd functionalises it (in-place collectives become
functional ops and copies) and calls `_compile_forward` with an ATen graph. That graph is split
by capability (_partition): runs of ops symmflow has become partitions, each imported into
symmflow IR (_fx_import), compiled by the full pipeline (placement in symmetric memory, planning,
race check) and bound to this rank as a Session; the ops between stay PyTorch's, and every
boundary is recorded with the op that caused it. A compiled partition runs with PyTorch's tensors
bound by address without copies (Note [binding torch tensors] in _runner.py).

Every allocation and rendezvous happens when a partition is compiled, which dynamo does on the
first call with a new shape (its guards decide recompiles); nothing is cached across worlds: a
report and its sessions belong to the world of symmflow.torch.init().

Training (issue 26, Note [training]): a graph that needs gradients is split by AOT autograd into
a forward and a backward graph, and both are compiled the same way.
"""
from __future__ import annotations

import dataclasses
import functools
import operator
import os
import re
import threading
import time

import torch
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._functorch._aot_autograd.utils import make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition

import symmflow

from . import (_causal, _cudagraphs, _direct, _fold, _fx_import, _library, _opmap, _partition,
               _runtime, _sdpa, _verify_graph)
from ._runner import PartitionRunner

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
    # Non-contiguous partition inputs made contiguous (Note [binding torch tensors]) in one call
    # (the first).
    input_copies: int = 0
    compile_seconds: float = 0.0  # partitioning, import, the passes and binding, all partitions
    # 0-dim CPU constants of a GPU graph copied to the GPU once (Note [CPU scalars on a GPU]): not
    # a per-call copy, so not in copies_added().
    constant_uploads: int = 0
    # Outputs copied into the layout PyTorch traced for them (Note [output strides]) in one call.
    output_copies: int = 0
    # "inference", or the "forward" / "backward" of a training graph (Note [training]); a
    # forward's outputs include the activations saved for the backward, counted here.
    role: str = "inference"
    saved_tensors: int = 0
    saved_bytes: int = 0
    # Nodes evaluated once at compile time and removed from the graph, and the constants that
    # replace them (Note [folding input-independent values] in _fold.py).
    folded_nodes: int = 0
    folded_constants: int = 0
    # Attention calls whose input-independent mask was the causal pattern, now is_causal with no
    # mask (Note [causal masks recognised] in _causal.py).
    causal_masks: int = 0
    # GPU kernels chosen by measurement in this process so far (Note [measured kernel choice] in
    # src/kernels/cuda/choice/kernel_choice.hpp): explain() fills it after its run; "" on CPUs.
    kernel_choices: str = ""
    # An inference graph's calls after the first: "taken" (without AOT autograd's runtime
    # wrappers), "AOT's wrappers kept: why", or "" (not called yet, or a training graph). Note
    # [inference without AOT's wrappers] in _direct.py.
    direct_call: str = ""

    @property
    def partition_count(self) -> int:
        return len(self.partitions)

    def partition_kinds(self) -> list[str]:
        """Who runs each partition of the split graph, in call order."""
        return list(self.kinds)

    def plan_copies(self) -> int:
        """Copies the compiler added inside the partitions' plans (explain's `copies`)."""
        return sum(len(p.copies()) for p in self.partitions)

    def copies_added(self) -> int:
        """Every copy symmflow adds per call: the plans' copies and the partition inputs it made
        contiguous (input_copies)."""
        return self.plan_copies() + self.input_copies + self.output_copies

    def all_reduce_inputs_in_place(self) -> bool:
        """Whether every collective's input was produced straight into symmetric memory: no copy
        into a symmetric pool was added (a copy into regular memory is not one), and each
        partition with a collective has a symmetric pool holding intermediates only."""
        for p in self.partitions:
            if not p.explain.get("collectives"):
                continue
            symm = [b for b in p.explain["buffers"] if b["pool"].startswith("symm")]
            copied_into = {b["first_step"] for b in symm}
            if any(c["step"] in copied_into for c in p.copies()):
                return False
            if not symm or not all(b["intermediate"] for b in symm):
                return False
        return True

    def text(self) -> str:
        lines = [f"symmflow: {len(self.partitions)} partition(s), "
                 f"{len(self.boundaries)} boundary(ies), {self.plan_copies()} copies in plans, "
                 f"{self.input_copies} input copies, {self.output_copies} output copies, "
                 f"{self.constant_uploads} constants uploaded "
                 f"once, compiled in {self.compile_seconds:.2f} s"]
        if self.causal_masks:
            lines.append(f"  {self.causal_masks} attention call(s) given the causal mask run "
                         f"is_causal, with no mask")
        if self.folded_constants:
            lines.append(f"  {self.folded_nodes} input-independent node(s) evaluated once into "
                         f"{self.folded_constants} constant(s)")
        if self.direct_call:
            lines.append("  calls after the first: " + ("straight to the compiled graph, without "
                         "AOT autograd's runtime wrappers" if self.direct_call == "taken"
                         else self.direct_call))
        if self.role != "inference":
            saved = (f": {self.saved_tensors} tensors ({self.saved_bytes} B) saved for the "
                     f"backward, outputs of its plans" if self.role == "forward" else "")
            lines.append(f"  the {self.role} of a training graph{saved}")
        lines.append("  partitions in call order: " + " -> ".join(self.kinds))
        lines += [f"  {b}" for b in self.boundaries]
        lines += [f"  left to PyTorch: {why}" for why in self.fallback_ops]
        for p in self.partitions:
            lines.append(f"== partition {p.name} on {p.device}")
            lines.append(p.explain_text.rstrip())
        if self.kernel_choices:
            lines.append("== GPU kernels chosen by measurement (this process; op shape: kernel "
                         "(how; median us; refused kernels and why))")
            lines.append(self.kernel_choices.rstrip())
        return "\n".join(lines) + "\n"


_reports_lock = threading.Lock()
_reports: list[CompileReport] = []


_last_session = None
_last_runner = None


def last_session():
    """The Session of the partition compiled last (for measurements of the Python path)."""
    return _last_session


def last_runner():
    """The PartitionRunner of the partition compiled last (its pointer_calls, checked_calls)."""
    return _last_runner


def last_report() -> CompileReport | None:
    """The report of the graph compiled last on this process (None before any)."""
    with _reports_lock:
        return _reports[-1] if _reports else None


def reports() -> list[CompileReport]:
    with _reports_lock:
        return list(_reports)


@functools.cache
def _catalogue(device_kind: str = "cpu"):
    """The catalogue as the C++ registry has it for a device: a GPU graph loads the cuda backend
    first, so that its kernels are listed among each op's backends (Note [kernels per device])."""
    if device_kind == "cuda":
        symmflow.check_device("cuda")
    return _opmap.load_catalogue()


def _compile_partition(sub_gm: torch.fx.GraphModule, example_inputs, report: CompileReport,
                       index: int, settings: Settings, keep_layout: bool = False):
    rank = _runtime.current_rank()
    device = _runtime.device_of(example_inputs)
    imported = _fx_import.import_graph(
        sub_gm, example_inputs, world_size=rank.world_size, rank=rank.rank,
        group_resolver=lambda name: [list(s) for s in _runtime.resolve_group(name).subgroups],
        group_namer=lambda subgroups, c10d: _runtime.resolve_group(c10d).name,
        catalogue=_catalogue(device.split(":")[0]),
        name=f"partition_{index}", device=device,
    )
    # For its device: a GPU compile loads the cuda backend's kernels first (without them the
    # first GPU compile of a process failed "aten::mm has no cuda kernel yet" on the H100).
    compiled = symmflow.compile(imported.program, device=device)
    session = symmflow.Session(compiled, rank, device=device, cuda_graph=settings.own_graphs)
    global _last_session
    _last_session = session
    report.partitions.append(PartitionReport(
        name=f"partition_{index}", ir_text=imported.text, explain=compiled.explain(),
        explain_text=compiled.explain_text(), device=device))
    output = next(n for n in sub_gm.graph.nodes if n.op == "output")
    sub_gm.meta["symmflow_name"] = f"partition_{index}"
    single = not isinstance(output.args[0], (tuple, list))
    runner = PartitionRunner(imported, session, rank, report, single, device)
    if keep_layout:
        runner.strides = _traced_strides(output)
    if settings.verify:
        runner.verify = sub_gm
    global _last_runner
    _last_runner = runner
    return runner


# Note [output strides]: in a training graph's forward, a partition's output reaches PyTorch with
# the strides PyTorch traced for it (the `val` of the node it returns), not only with its values:
# the backward graph was traced against those strides. Training needs it: the forward's saved attention output is laid out
# [B, S, H, D] behind a [B, H, S, D] shape, and the backward graph AOT autograd traced (its views
# and the CPU flash attention's backward) reads it through that layout; handed a contiguous copy
# of the same values it computed wrong gradients with no error. symmflow's plans write dense
# row-major buffers, so such an output is copied once into the traced layout (counted in the
# report as output_copies); an output that is dense already, the common case, is not touched.
# An output traced as an expand has overlapping strides (0): its copy holds each element once
# (_runner._laid_out), since copy_ refuses such a destination (batch-2 training failed on it).
# An inference graph's outputs stay dense (a user's elementwise op on a transposed input gets a
# dense result of the same values; no copy is spent on a layout nothing traced against).


def _count_saved(gm: torch.fx.GraphModule, report: CompileReport) -> None:
    """The forward's outputs AOT autograd marks as saved for the backward (its output descs)."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    values = output.args[0] if isinstance(output.args[0], (tuple, list)) else [output.args[0]]
    for desc, v in zip(output.meta.get("desc") or [], values):
        val = _fx_import.node_val(v) if isinstance(v, torch.fx.Node) else None
        if type(desc).__name__ == "SavedForBackwardsAOTOutput" and isinstance(val, torch.Tensor):
            report.saved_tensors += 1
            report.saved_bytes += val.numel() * val.element_size()


def _traced_strides(output: torch.fx.Node) -> dict[int, tuple]:
    values = output.args[0]
    values = values if isinstance(values, (tuple, list)) else [values]
    strides = {}
    for i, v in enumerate(values):
        val = _fx_import.node_val(v) if isinstance(v, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and not val.is_contiguous():
            strides[i] = tuple(val.stride())
    return strides


def user_input_names(dynamo_gm: torch.fx.GraphModule) -> list[str] | None:
    """Note [input names]: what the user calls each input of dynamo's graph, as an IR name
    ("x" for L['x'], "self_lin_weight" for L['self']._modules['lin']._parameters['weight']), so that
    errors about a partition's inputs (rank agreement: ranks binding different shapes) name the
    user's argument instead of AOT autograd's placeholder (arg0_1). None when a placeholder has
    no source."""
    names: list[str] = []
    for node in dynamo_gm.graph.nodes:
        if node.op != "placeholder":
            continue
        grapharg = node.meta.get("grapharg")
        source = getattr(grapharg, "source", None)
        if source is None:
            return None
        text = source.name() if callable(source.name) else source.name
        parts = [a or b for a, b in re.findall(r"\['([^']*)'\]|\.(\w+)", text)]
        parts = [p for p in parts if p not in ("_modules", "_parameters", "_buffers")]
        name = re.sub(r"\W", "_", "_".join(parts)) or "input"
        names.append(name if re.match(r"[A-Za-z]", name) else f"in_{name}")
    return names


def _rename_inputs(gm: torch.fx.GraphModule, names: list[str] | None) -> None:
    """AOT's placeholders (arg0_1, ...) take the user's names (Note [input names]) when AOT kept
    dynamo's inputs one for one."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not names or len(names) != len(placeholders):
        return
    for node, name in zip(placeholders, names):
        node._rename(name)  # an identifier (user_input_names); the builder makes it IR-safe
    gm.recompile()


def _compile_forward(gm: torch.fx.GraphModule, example_inputs, settings: Settings,
                     input_names: list[str] | None = None, keep_layout: bool = False,
                     role: str = "inference", causal_masks: int = 0,
                     probe: _direct.Probe | None = None):
    _runtime.current_rank()  # joins the world (collective) before any partition compiles
    started = time.perf_counter()
    _rename_inputs(gm, input_names)
    mutated = _mutated_inputs(gm)
    report = CompileReport(role=role)
    _count_saved(gm, report)
    report.causal_masks = causal_masks + _causal.causal_masks(gm)
    report.folded_nodes, report.folded_constants = _fold.fold_input_independent(gm)
    counter = iter(range(1 << 30))
    device = _runtime.device_of(example_inputs)
    split = _partition.partition(
        gm, _catalogue(device.split(":")[0]),
        compile_partition=lambda sub, ex: _compile_partition(sub, ex, report, next(counter),
                                                             settings, keep_layout),
        example_inputs=example_inputs, device=device,
    )
    report.boundaries = list(split.boundaries)
    report.fallback_ops = [p.reason for p in split.partitions if not p.supported]
    report.kinds = ["symmflow" if p.supported else "torch" for p in split.partitions]
    report.compile_seconds = time.perf_counter() - started
    with _reports_lock:
        _reports.append(report)
    rank = _runtime.current_rank()
    module = _direct_call(split.split_gm) or split.split_gm

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

    if settings.torch_cuda_graph and any(isinstance(t, torch.Tensor) and t.is_cuda
                                         for t in example_inputs):
        run = _cudagraphs.GraphedCallable(run, mutated)
    if probe is not None:  # Note [inference without AOT's wrappers] in _direct.py
        run = probe.wrap(run, report)
    # AOT calls a backward with its arguments in one list and warns at every training step's first
    # backward when the function takes them unpacked (UserWarning "... doesn't take boxed
    # arguments"); the forward it boxes itself.
    return make_boxed_func(run) if role == "backward" else run


def _mutated_inputs(gm: torch.fx.GraphModule) -> list[int]:
    """Positions of the graph inputs that an op of the graph writes (AOT keeps an inference
    graph's input mutations in it, as copy_ into the input: Note [the KV cache in place] in
    _fx_state.py)."""
    position = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    return sorted({position[a] for node in gm.graph.nodes for a in _fold.written_args(node)
                   if isinstance(a, torch.fx.Node) and a in position})


# Note [one-partition call]: a graph that is one symmflow partition (the common case: DTensor and
# transformers' models compile whole) is called without the split graph module: its generated
# forward and two nn.Module calls (the split module's and the partition's) cost about a third of
# the backend's own per-call time on a CPU. The partition's runner is called with the graph's
# inputs in the order the split module passes them (a constant of the graph, such as a folded one,
# passed as itself), and its results are arranged as the split module returns them; any other
# shape of split (PyTorch partitions, an output that is an input) keeps the module.
def _direct_call(split_gm: torch.fx.GraphModule):
    """The split module's forward as one call of its only partition, or None."""
    nodes = list(split_gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    calls = [n for n in nodes if n.op == "call_module"]
    output = nodes[-1]
    if len(calls) != 1 or calls[0].kwargs or output.op != "output":
        return None
    call = calls[0]
    partition = getattr(split_gm, call.target)
    if not isinstance(partition, _partition.CompiledPartition):
        return None
    if any(not isinstance(a, torch.fx.Node) or a.op not in ("placeholder", "get_attr")
           for a in call.args):
        return None
    # Per partition argument: the graph input's index, or the constant itself.
    order = [placeholders.index(a) if a.op == "placeholder" else _fold.attr(split_gm, a.target)
             for a in call.args]
    constant = [a.op == "get_attr" for a in call.args]
    picks = []  # per graph output: None (the call's value itself) or the index taken from it
    for n in nodes:
        if n.op in ("placeholder", "get_attr", "call_module", "output"):
            continue
        if not (n.op == "call_function" and n.target is operator.getitem and n.args[0] is call
                and isinstance(n.args[1], int)):
            return None
    spec = output.args[0]
    items = spec if isinstance(spec, (tuple, list)) else [spec]
    for item in items:
        if item is call:
            picks.append(None)
        elif isinstance(item, torch.fx.Node) and item.op == "call_function" \
                and item.target is operator.getitem and item.args[0] is call:
            picks.append(item.args[1])
        else:
            return None
    runner = partition.fn
    kind = type(spec) if isinstance(spec, (tuple, list)) else None

    def direct(*args):
        result = runner(*[i if c else args[i] for i, c in zip(order, constant)])
        if kind is None:
            return result if picks[0] is None else result[picks[0]]
        return kind(result if k is None else result[k] for k in picks)

    return direct


_MODES = {None: False, "default": False, "reduce-overhead": True}
_OPTIONS = {
    "cuda_graph": "False to run each partition without its own CUDA graph",
    "deterministic": "True for results that do not depend on the batch",
    "direct_call": "False to keep AOT autograd's runtime wrappers on every call",
}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one compile of the backend was asked for: its mode, options and environment, read
    once when dynamo hands it a graph, and passed to every partition of it."""

    torch_cuda_graph: bool = False  # mode="reduce-overhead": PyTorch's CUDA graphs around it
    own_graphs: bool = True  # each partition's own CUDA graph (SYMMFLOW_TORCH_CUDA_GRAPH)
    deterministic: bool = False  # Note [batch-invariant products]
    direct_call: bool = True  # Note [inference without AOT's wrappers] in _direct.py
    verify: bool = False  # SYMMFLOW_TORCH_VERIFY: each partition checked against PyTorch's run

    @staticmethod
    def read(mode, options) -> Settings:
        if mode not in _MODES:
            raise symmflow.Error(
                f"the symmflow backend takes mode None, 'default' or 'reduce-overhead' (PyTorch's "
                f"CUDA graphs around the compiled graph), not {mode!r}")
        options = dict(options or {})
        unknown = set(options) - set(_OPTIONS)
        if unknown:
            takes = ", ".join(f"'{k}': {v}" for k, v in _OPTIONS.items())
            raise symmflow.Error(f"the symmflow backend has no option {sorted(unknown)} (it "
                                 f"takes {takes})")
        env = os.environ.get
        return Settings(
            torch_cuda_graph=_MODES[mode],
            own_graphs=bool(options.get("cuda_graph", True))
            and env("SYMMFLOW_TORCH_CUDA_GRAPH", "1") != "0",
            deterministic=bool(options.get("deterministic", False)),
            direct_call=bool(options.get("direct_call", True))
            and env("SYMMFLOW_TORCH_DIRECT_CALL", "1") != "0",
            verify=env("SYMMFLOW_TORCH_VERIFY", "0") != "0")


def symmflow_backend(gm: torch.fx.GraphModule, example_inputs, mode=None, options=None):
    """The dynamo backend registered as "symmflow". mode="reduce-overhead" captures each compiled
    graph into PyTorch's CUDA graphs (_cudagraphs); options={"cuda_graph": False} turns off
    symmflow's own graph of each partition (SYMMFLOW_TORCH_CUDA_GRAPH=0 does too);
    options={"deterministic": True} makes results independent of the batch for the rest of the
    process (SYMMFLOW_DETERMINISTIC=1 does too); options={"direct_call": False}
    keeps AOT autograd's runtime wrappers around every call of an inference graph
    (SYMMFLOW_TORCH_DIRECT_CALL=0 does too; Note [inference without AOT's wrappers])."""
    settings = Settings.read(mode, options)
    if settings.deterministic:
        # Note [batch-invariant products]: the kernels read it at run time, so it holds for the
        # rest of the process, as SYMMFLOW_DETERMINISTIC=1 does.
        symmflow._core._set_deterministic(True)
    _library_ready()
    training = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad
        for t in [*example_inputs, *gm.parameters()])
    # Note [verify against dynamo's graph] in _verify_graph.py: copied before any rewrite.
    reference = _verify_graph.reference_of(gm) if settings.verify else None
    _sdpa.keep_attention_whole(gm)  # with its backward in training (Note [attention backward])
    causal = _causal.causal_masks_traced(gm)  # Note [causal masks recognised]
    _library.make_inplace_symm_mem_functionalizable(gm)
    probe = _direct.Probe() if settings.direct_call and not training else None
    forward = functools.partial(_compile_forward, settings=settings,
                                input_names=user_input_names(gm), keep_layout=training,
                                causal_masks=causal, probe=probe,
                                role="forward" if training else "inference")
    backward = functools.partial(_compile_forward, settings=settings, role="backward")
    compiler = aot_autograd(
        fw_compiler=forward, bw_compiler=backward,
        partition_fn=min_cut_rematerialization_partition,
        decompositions=_decompositions(training),
        keep_inference_input_mutations=True,  # Note [the KV cache in place] in _fx_state
    )
    compiled = compiler(gm, example_inputs)
    if probe is not None:
        compiled = _direct.DirectInference(compiled, probe)
    return _verify_graph.VerifiedCall(compiled, reference) if reference is not None else compiled


# Note [training]: a graph that needs gradients goes through AOT autograd's joint tracing and
# min-cut partitioner (the one inductor uses: cheap ops are recomputed in the backward instead of
# saved), and the forward and the backward graph are each compiled like an inference graph:
# split by capability, every partition imported, placed, planned and bound. The saved
# activations are the forward's outputs and the backward's inputs (explain shows them as such);
# the backward's collectives (DTensor's all-reduce of the input gradient after a column-parallel
# layer, the reduce-scatter / all-gather pairs of sequence parallelism) are placed in symmetric
# memory like the forward's. Parameter gradients are the backward's outputs: PyTorch's autograd
# accumulates them into `.grad`, and the optimizer step stays PyTorch's. The outputs keep the
# layout PyTorch traced (Note [output strides]). Attention keeps its own backward op (Note
# [attention backward] in _sdpa.py). The core decomposition of the CPU flash attention is left
# out in training: decomposed, its forward feeds the undecomposed backward kernel a logsumexp and
# a layout that kernel does not expect, and every gradient came out wrong with no error (an
# attention symmflow does not keep whole, with dropout, then stays PyTorch's, whole).
def _decompositions(training: bool) -> dict:
    table = dict(core_aten_decompositions())
    if training:
        table.pop(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default, None)
    return table


@functools.cache
def _library_ready() -> None:
    _library.register_ops()
    _library.register_torch_symm_mem_kernels()
