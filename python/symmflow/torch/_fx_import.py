"""Imports a functionalized ATen FX graph (what AOT autograd hands a backend) into symmflow IR,
node by node through the C++ program builder (Note [program builder] in src/api/builder.cpp).

What it does: `import_graph` declares one IR group per c10d group the graph names, one input per
placeholder (dtype and shape from the example inputs), one builder call per node (the op map of
`_opmap`, Note [rule kinds]) and the outputs, and returns the built `symmflow.Program` (its text
is the IR as C++ prints it, for people).
Expects: an inference graph from `aot_autograd(fw_compiler=...)` with `core_aten_decompositions()`
(or make_fx, or one built by hand), static shapes, tensors of symmflow's dtypes; a
`group_resolver(c10d_name)` giving the group's subgroups of global ranks (or one flat list).
Guarantees: a node is supported exactly when the builder accepts it: its schema binds, its shape
function takes the arguments and, for a device, a kernel there takes them (the C++ registry
decides, not a table here); value names are
the FX node names (the builder makes them IR-safe); the returned `ImportedGraph` keeps the order
of graph inputs and, for every FX output, where its value comes from (an IR result, possibly
shared by several outputs, or a graph input or a view of one, left to Python: Note [outputs left
to Python]).
Refuses: with `UnsupportedGraph` naming the node and its op: ops the op map and the catalogue do
not cover, calls the registry refuses (with its message), symbolic shapes, dtypes symmflow lacks,
in-place ops on views, groups that leave this rank out.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, Optional, Sequence

import torch
import torch.fx

import symmflow
from symmflow import _core
from symmflow.torch import _opmap
from symmflow.torch._fx_state import (COUNTER_OPS, INT_OPS, StateTranslation, int_input,
                                      integer_indices, node_val, written_back_to_self)
from symmflow.torch._groups import (GroupResolver, GroupTable, UnsupportedGraph, ir_dtype,
                                    tensor_type)
from symmflow.torch._opmap import Catalogue, Rule

__all__ = ["ImportedGraph", "OutputSource", "UnsupportedGraph", "import_graph"]

# Keyword arguments of torch factory and copy ops that only place the tensor (symmflow decides
# placement): dropped when they hold these values, refused otherwise.
_PLACEMENT_KWARGS: dict[str, Callable[[Any], bool]] = {
    "layout": lambda v: v is None or v == torch.strided,
    "device": lambda v: True,
    "pin_memory": lambda v: v is None or v is False,
    "memory_format": lambda v: v in (None, torch.contiguous_format, torch.preserve_format),
    "non_blocking": lambda v: v is False,
}

_HOP_NAMES = ("auto_functionalized", "auto_functionalized_v2")


@dataclasses.dataclass(frozen=True)
class OutputSource:
    """Where one FX output comes from: kind "ir" (index into the IR's returns), "int" (the same,
    a 0-dim IR result returned as a Python int: Note [ints that change every call]), "input" (a
    graph input, index into the inputs), "python" (index into `python_outputs`'s results) or
    "none"."""

    kind: str
    index: int = 0


@dataclasses.dataclass
class ImportedGraph:
    """A graph built as a symmflow Program, with the bookkeeping to bind and unpack it."""

    program: Any  # symmflow.Program
    text: str  # the program's IR as C++ prints it (explain, dumps)
    name: str
    world_size: int
    rank: int
    input_names: list[str]  # IR input names, in placeholder order (all placeholders)
    return_names: list[str]  # IR values returned, each once
    outputs: list[OutputSource]  # one per FX output, in order
    groups: dict[str, str]  # c10d group name -> IR group name
    python_outputs: Optional[torch.fx.GraphModule] = None  # placeholders -> views of inputs
    notes: list[str] = dataclasses.field(default_factory=list)
    # placeholder positions the program writes back (Note [the KV cache in place])
    written_inputs: list[int] = dataclasses.field(default_factory=list)
    # placeholder positions of Python ints, 0-dim i64 inputs (Note [ints that change every call])
    int_inputs: list[int] = dataclasses.field(default_factory=list)

    def assemble_outputs(self, inputs: Sequence[Any], ir_results: Sequence[Any]) -> tuple:
        """The FX graph's outputs from its inputs and the IR program's results."""
        views = tuple(self.python_outputs(*inputs)) if self.python_outputs is not None else ()
        out = []
        for src in self.outputs:
            if src.kind == "ir":
                out.append(ir_results[src.index])
            elif src.kind == "int":
                out.append(int(ir_results[src.index].item()))
            elif src.kind == "input":
                out.append(inputs[src.index])
            elif src.kind == "python":
                out.append(views[src.index])
            else:
                out.append(None)
        return tuple(out)


_INDEX_PUT_OPS = ("aten.index_put.default", "aten.index_put_.default")


def describe_target(node: torch.fx.Node) -> str:
    return _opmap.qualified_name(node.target) if node.op == "call_function" else node.op


def hop_name(target: Any) -> Optional[str]:
    """"auto_functionalized" / "auto_functionalized_v2" for those HOPs, else None."""
    if isinstance(target, torch._ops.HigherOrderOperator):
        return target.name() if target.name() in _HOP_NAMES else None
    return None


def is_view_node(node: torch.fx.Node) -> bool:
    """A call of an op whose result aliases its first argument without writing it."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    returns = node.target._schema.returns
    return len(returns) == 1 and returns[0].alias_info is not None and \
        not returns[0].alias_info.is_write


class NodeTranslator(StateTranslation):
    """Translates FX nodes into calls of a `symmflow._core.ProgramBuilder`; shared by import and
    partitioning (a node is supported exactly when it translates)."""

    def __init__(self, catalogue: Catalogue, groups: GroupTable, builder: Any):
        self.catalogue = catalogue
        self.groups = groups
        self.builder = builder
        self.values: dict[torch.fx.Node, Any] = {}  # node -> Ref, tuple of Refs, or None
        self.inputs: dict[torch.fx.Node, Any] = {}  # placeholder -> its IR input's Ref
        self.written: set[torch.fx.Node] = set()  # placeholders written back
        self.declared: set[str] = set()  # IR groups declared in the builder
        self.used_ops: list[str] = []  # catalogue ops the translated nodes call, in order

    def group(self, c10d_name: Any, where: str) -> "_IRGroup":
        name = self.groups.resolve(c10d_name, where)
        if name not in self.declared:
            self.builder.add_group(name, self.groups.decls[name])
            self.declared.add(name)
        return _IRGroup(name)

    # --- arguments -------------------------------------------------------------------------
    def arg(self, a: Any, where: str) -> Any:
        """An FX argument as the builder takes it: a Ref, a list, or a literal."""
        if isinstance(a, _core.Ref):  # a value this translator made itself
            return a
        if isinstance(a, torch.fx.Node):
            v = self.values.get(a)
            if v is None:
                raise UnsupportedGraph(f"{where}: uses {a.name}, which has no IR value")
            if isinstance(v, tuple):
                raise UnsupportedGraph(f"{where}: uses the tuple {a.name} as one value")
            return v
        if isinstance(a, _IRGroup):
            return a.name
        if isinstance(a, (list, tuple)):
            return [self.arg(x, where) for x in a]
        if isinstance(a, torch.dtype):
            return _core.DTypeArg(ir_dtype(a, where))
        if a is None or isinstance(a, (bool, int, float, str)):
            return a
        raise UnsupportedGraph(f"{where}: argument {a!r} of type {type(a).__name__} has no IR "
                               "form")

    def named_args(self, op: str, schema: Any, args: list[Any], kwargs: dict, where: str) -> None:
        """Resolves, in place, the group argument the catalogue names for `op` (c10d group -> IR
        group) and checks an argument named `reduce_op`."""
        group_arg = self.catalogue.ops.get(op, {}).get("group_arg") or ""
        for i, a in enumerate(schema.arguments):
            container, key = (args, i) if i < len(args) else (kwargs, a.name)
            if key not in kwargs and container is kwargs:
                continue
            if a.name == group_arg:
                container[key] = self.group(container[key], where)

    def call(self, op: str, args: Sequence[Any], kwargs: dict, where: str, name: str,
             functional: bool = False) -> list:
        """Adds the call to the builder; returns its results' Refs. The registry's refusal
        (schema binding, shape function) becomes UnsupportedGraph with its message."""
        self.used_ops.append(op)
        pos = [self.arg(a, where) for a in args]
        kw = {}
        for k, v in kwargs.items():
            if k in _PLACEMENT_KWARGS:
                if _PLACEMENT_KWARGS[k](v):
                    continue
                raise UnsupportedGraph(f"{where}: keyword {k}={v} is not supported")
            kw[k] = self.arg(v, where)
        add = self.builder.add_functional if functional else self.builder.add_op
        try:
            return list(add(op, pos, kw, name))
        except symmflow.Error as e:
            raise UnsupportedGraph(f"{where}: {e}") from None

    # --- nodes -----------------------------------------------------------------------------
    def translate(self, node: torch.fx.Node) -> None:
        """Adds `node` to the builder (possibly nothing: views of values, waits) and records its
        IR value. Raises UnsupportedGraph naming the node and its op."""
        try:
            return self._translate(node)
        except UnsupportedGraph as e:
            if e.node is None:
                e.node, e.op = node.name, describe_target(node)
            raise

    def _translate(self, node: torch.fx.Node) -> None:
        op = describe_target(node)
        where = f"{op} at node {node.name}"
        name = node.name
        if node.target is operator.getitem:
            src, index = node.args
            v = self.values.get(src)
            if not isinstance(v, tuple) or not isinstance(index, int) or \
                    not (0 <= index < len(v)) or v[index] is None:
                raise UnsupportedGraph(f"{where}: takes item {index} of {src.name}, which has "
                                       "no such IR result", node.name, op)
            self.values[node] = v[index]
            return
        hop = hop_name(node.target)
        if hop is not None:
            return self._functionalized(node, hop, name)
        if node.target in INT_OPS:
            return self._int_op(node, where, name)
        if not isinstance(node.target, torch._ops.OpOverload):
            raise UnsupportedGraph(f"{where} is not an op symmflow can import", node.name, op)
        rule = _opmap.RULES_BY_OP.get(op)
        if rule is not None:
            return self._by_rule(node, rule, name, where)
        if op in COUNTER_OPS and self._counter_in_place(node, op, where, name):
            return
        ns, opname, overload = op.split(".")
        target = _opmap.map_namespace_op(ns, opname, overload, self.catalogue)
        args = list(node.args)
        if target is None:
            raise UnsupportedGraph(f"{where} is not in symmflow's catalogue", node.name, op)
        scalar_overload = _opmap.SCALAR_OVERLOADS.get(overload)
        schema_args = node.target._schema.arguments
        reversed_op = _opmap.REVERSED_SCALAR_OPS.get(op)
        if reversed_op and len(args) >= 2 and isinstance(args[1], torch.fx.Node) and \
                isinstance(args[0], (int, float)) and not isinstance(args[0], bool):
            if not self.catalogue.has(reversed_op):
                raise UnsupportedGraph(f"{where}: a number for self needs {reversed_op}, which is "
                                       "not in symmflow's catalogue", node.name, op)
            target, args, scalar_overload = reversed_op, [args[1], args[0], *args[2:]], None
        if scalar_overload and any(
                isinstance(a, (int, float)) and not isinstance(a, bool) and
                isinstance(schema_args[i].type, torch.TensorType)
                for i, a in enumerate(args[:len(schema_args)])):
            alt = _opmap.catalogue_name(target.split("::")[0], opname, scalar_overload)
            if not self.catalogue.has(alt):
                raise UnsupportedGraph(f"{where}: a number for a Tensor argument needs {alt}, "
                                       "which is not in symmflow's catalogue", node.name, op)
            target = alt
        self._check_result(node, where)
        if op == "aten.copy_.default" and self._written_back(node, where):
            return
        functional = False
        if op in _INDEX_PUT_OPS and len(args) > 1 and isinstance(args[1], (list, tuple)):
            functional = op == "aten.index_put.default" and integer_indices(args[1]) and \
                written_back_to_self(node)
            if any(i is None for i in args[1]):
                args[1] = self._indices_without_none(node, list(args[1]), where, name)
        if functional:  # Note [the KV cache in place]
            target = "aten::index_put_"
        kwargs = dict(node.kwargs)
        self.named_args(target, node.target._schema, args, kwargs, where)
        refs = self.call(target, args, kwargs, where, name, functional=functional)
        if functional:  # functional<index_put_>: no returns, then self's new value
            self.values[node] = refs[0]
            return
        returns = node.target._schema.returns
        written = _written_alias_arg(node)
        if written is not None:  # torch returns the argument it wrote; symmflow returns ()
            self.values[node] = self.arg(written, where)
        elif len(returns) == 0:
            self.values[node] = None
        elif len(returns) == 1 and not isinstance(returns[0].type, torch.ListType):
            self.values[node] = refs[0]
        else:  # several results, or a list (split_with_sizes): one Ref each
            self.values[node] = tuple(refs)

    def _check_result(self, node: torch.fx.Node, where: str) -> None:
        val = node_val(node)
        for t in (val if isinstance(val, (list, tuple)) else [val]):
            if isinstance(t, torch.Tensor):
                tensor_type(t, where)  # refuses dtypes and symbolic shapes

    def _by_rule(self, node: torch.fx.Node, rule: Rule, name: str, where: str) -> None:
        if rule.kind == "alias":
            return self._alias(node, rule, where)
        args = list(node.args) + [None] * 8
        picked = []
        for pos in rule.args:
            a = args[pos]
            if pos == rule.group_arg:
                a = self.group(a, where)
            picked.append(a)
        if rule.equal_splits:
            _check_equal_splits(node, rule, args, where,
                                self.groups.sizes.get(str(args[rule.group_arg])))
        if rule.group_size_arg is not None:
            size = args[rule.group_size_arg]
            expected = self.groups.sizes.get(str(args[rule.group_arg]))
            if expected is not None and size != expected:
                raise UnsupportedGraph(f"{where}: group size {size} differs from the size "
                                       f"{expected} of c10d group '{args[rule.group_arg]}'",
                                       node.name, describe_target(node))
        assert rule.symmflow_op is not None
        if not self.catalogue.has(rule.symmflow_op):
            raise UnsupportedGraph(f"{where}: maps to {rule.symmflow_op}, which is not in "
                                   "symmflow's catalogue", node.name, describe_target(node))
        self._check_result(node, where)
        refs = self.call(rule.symmflow_op, picked, {}, where, name)
        if rule.kind == "inplace":
            self.values[node] = self.arg(node.args[0], where)
            return
        self.values[node] = refs[0]

    def _alias(self, node: torch.fx.Node, rule: Rule, where: str) -> None:
        src = node.args[1] if rule.torch_op == "aten.copy.default" else node.args[0]
        if not isinstance(src, torch.fx.Node):
            raise UnsupportedGraph(f"{where}: its source is not a tensor", node.name,
                                   describe_target(node))
        if rule.torch_op == "aten.copy.default":
            dst_val, src_val = node_val(node.args[0]), node_val(src)
            if dst_val is None or src_val is None or dst_val.shape != src_val.shape or \
                    dst_val.dtype != src_val.dtype:
                raise UnsupportedGraph(f"{where}: copies between different shapes or dtypes",
                                       node.name, describe_target(node))
        elif rule.torch_op == "aten.alias.default":
            pass  # the same value under another name
        else:
            producer = _opmap.RULES_BY_OP.get(describe_target(src))
            if producer is None or producer.kind not in ("op", "inplace") or \
                    producer.group_arg is None:
                raise UnsupportedGraph(f"{where}: waits on {src.name}, which is not a "
                                       "collective symmflow runs", node.name,
                                       describe_target(node))
        self.values[node] = self.arg(src, where)

    def _functionalized(self, node: torch.fx.Node, hop: str, name: str) -> None:
        """auto_functionalized(_v2)(op, **kwargs) -> functional<op>(...) (Note [rule kinds])."""
        mutable_op = node.args[0]
        op = _opmap.qualified_name(mutable_op)
        where = f"{hop}({op}) at node {node.name}"
        if not isinstance(mutable_op, torch._ops.OpOverload):
            raise UnsupportedGraph(f"{where} does not wrap an op", node.name, op)
        ns, opname, overload = op.split(".")
        rule = _opmap.RULES_BY_OP.get(op)
        target = rule.symmflow_op if rule is not None else \
            _opmap.map_namespace_op(ns, opname, overload, self.catalogue)
        if target is None or not self.catalogue.has(target):
            raise UnsupportedGraph(f"{where}: {op} is not in symmflow's catalogue", node.name, op)
        schema = mutable_op._schema
        kwargs = dict(node.kwargs)
        bases = kwargs.pop("_all_bases", None)
        args: list[Any] = []
        mutated: list[str] = []
        for i, a in enumerate(schema.arguments):
            written = a.alias_info is not None and a.alias_info.is_write
            if written:
                mutated.append(a.name)
            if hop == "auto_functionalized_v2" and written:
                base_index = kwargs.get(f"_{a.name}_base_index")
                extra = [k for k in kwargs if k.startswith(f"_{a.name}_")
                         and k not in (f"_{a.name}_base_index", f"_{a.name}_alias")]
                if base_index is None or extra or bases is None:
                    raise UnsupportedGraph(f"{where}: argument '{a.name}' is a view of its base "
                                           "(in-place ops on views are not supported)",
                                           node.name, op)
                args.append(bases[base_index])
            elif a.name in kwargs:
                args.append(kwargs[a.name])
            elif a.has_default_value():
                args.append(a.default_value)
            else:
                raise UnsupportedGraph(f"{where}: argument '{a.name}' is missing", node.name, op)
        if hop == "auto_functionalized_v2":
            used = [kwargs.get(f"_{m}_base_index") for m in mutated]
            if len(set(used)) != len(used) or len(used) != len(bases):
                raise UnsupportedGraph(f"{where}: written arguments share a base", node.name, op)
        self.named_args(target, schema, args, {}, where)
        n_returns = len(schema.returns)
        results = self.call(target, args, {}, where, name, functional=True)
        # The HOP's tuple: the op's returns (one None for an op returning ()), then the new
        # value of each base (v2, in _all_bases order) or each written argument (v1).
        hop_items: list[Any] = results[:n_returns] if n_returns else [None]
        if hop == "auto_functionalized_v2":
            by_base = {kwargs[f"_{m}_base_index"]: r for m, r in zip(mutated, results[n_returns:])}
            hop_items += [by_base[i] for i in range(len(bases))]
        else:
            hop_items += results[n_returns:]
        self.values[node] = tuple(hop_items)


# Note [equal splits]
# torch's all_to_all_single(input, output_split_sizes, input_split_sizes, group) moves rows of dim
# 0 in blocks whose sizes each rank passes; symm_mem::all_to_all (Note [equal all-to-all] in
# src/ops/symm_mem/defs.cpp) moves W equal blocks. The importer maps a call whose split lists are
# each None (funcol's default: equal) or W static ints all equal to dim 0 / W, which is exactly
# when both ops move the same rows; what W is and whether dim 0 divides is the C++ shape
# function's to say (the group's size as the IR declares it). Unequal splits (expert-parallel
# token dispatch) and symbolic ones (sizes computed at run time) are left to PyTorch with the
# lists in the reason: they need all_to_all_vdev's splits in symmetric memory, which a compiled
# graph does not produce yet.
def _check_equal_splits(node: torch.fx.Node, rule: Rule, args: list, where: str,
                        group_size: Optional[int]) -> None:
    schema_args = node.target._schema.arguments
    val = node_val(node.args[0]) if isinstance(node.args[0], torch.fx.Node) else None
    rows = val.shape[0] if isinstance(val, torch.Tensor) and val.dim() >= 1 else None
    for pos in rule.equal_splits:
        splits, name = args[pos], schema_args[pos].name
        if splits is None:
            continue
        shown = list(splits) if isinstance(splits, (list, tuple)) else splits
        if not isinstance(splits, (list, tuple)) or \
                not all(isinstance(x, int) and not isinstance(x, bool) for x in splits):
            raise UnsupportedGraph(f"{where}: {name} {shown} are not static ints (symbolic "
                                   "splits stay in PyTorch)", node.name, describe_target(node))
        if group_size is not None and len(splits) != group_size:
            raise UnsupportedGraph(f"{where}: {name} {shown} has {len(splits)} entries for a "
                                   f"group of {group_size} ranks", node.name,
                                   describe_target(node))
        if len(set(splits)) > 1 or (isinstance(rows, int) and sum(splits) != rows):
            raise UnsupportedGraph(f"{where}: {name} {shown} do not split dim 0 ({rows} rows) "
                                   f"into equal blocks; {rule.symmflow_op} takes equal splits "
                                   "only (Note [equal splits])", node.name, describe_target(node))


def _written_alias_arg(node: torch.fx.Node) -> Any:
    """For an op returning the argument it writes (`add_(Tensor(a!) self, ...) -> Tensor(a!)`),
    that argument of the node; else None."""
    schema = node.target._schema
    if len(schema.returns) != 1:
        return None
    info = schema.returns[0].alias_info
    if info is None or not info.is_write:
        return None
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.before_set == info.before_set:
            return node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
    return None


@dataclasses.dataclass(frozen=True)
class _IRGroup:
    name: str


def _python_output_module(gm: torch.fx.GraphModule,
                          view_outputs: list[torch.fx.Node]) -> torch.fx.GraphModule:
    """A GraphModule from the graph's placeholders to `view_outputs` (views of inputs)."""
    g = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = g.placeholder(n.name)
    needed: set[torch.fx.Node] = set()
    stack = list(view_outputs)
    while stack:
        n = stack.pop()
        if n in needed or n.op == "placeholder":
            continue
        needed.add(n)
        stack.extend(x for x in n.all_input_nodes)
    for n in gm.graph.nodes:
        if n in needed:
            env[n] = g.node_copy(n, lambda x: env[x])
    g.output(tuple(env[n] for n in view_outputs))
    return torch.fx.GraphModule(gm, g)


def _view_of_input(node: torch.fx.Node) -> bool:
    """Whether `node` is a graph input seen through views only (Note [outputs left to Python])."""
    while is_view_node(node):
        node = node.args[0]
    return node.op == "placeholder"


def _views_only_for_outputs(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Views of graph inputs used only by outputs (or by such views): computed by Python."""
    skipped: set[torch.fx.Node] = set()
    for n in reversed(list(gm.graph.nodes)):
        if is_view_node(n) and _view_of_input(n) and n.users and \
                all(u.op == "output" or u in skipped for u in n.users):
            skipped.add(n)
    return skipped


# Note [outputs left to Python]
# An FX output that is a graph input, or a view of one, shares storage with the caller's tensor;
# symmflow returns fresh buffers. Such outputs are not returned by the IR program: the importer
# records them (OutputSource "input" / "python") and `ImportedGraph.assemble_outputs` computes the
# views from the inputs with the graph's own view ops, so aliasing is as PyTorch had it.


def import_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *, world_size: int,
                 rank: int, group_resolver: Optional[GroupResolver] = None,
                 catalogue: Optional[Catalogue] = None, name: str = "fx_graph",
                 group_namer: Optional[Callable[[list[list[int]], str], str]] = None,
                 device: Optional[str] = None) -> ImportedGraph:
    """Builds `gm` as a symmflow Program. Raises UnsupportedGraph naming the first node that
    cannot be imported (`node`, `op` attributes). `group_namer`: Note [group names]. `device`:
    every node must also have a kernel there that takes its arguments (Note [kernels per
    device])."""
    if catalogue is None:
        catalogue = _opmap.load_catalogue()
    groups = GroupTable(group_resolver, world_size, rank, group_namer)
    builder = _core.ProgramBuilder(name, world_size, device or "")
    tr = NodeTranslator(catalogue, groups, builder)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(example_inputs) != len(placeholders):
        raise UnsupportedGraph(f"the graph has {len(placeholders)} inputs but "
                               f"{len(example_inputs)} example inputs were given")
    input_refs, int_inputs = [], []
    for i, (n, ex) in enumerate(zip(placeholders, example_inputs)):
        val = ex if isinstance(ex, torch.Tensor) else node_val(n)
        if int_input(ex) or (not isinstance(ex, torch.Tensor) and int_input(val)):
            dtype, shape = "i64", []  # Note [ints that change every call]
            int_inputs.append(i)
        else:
            dtype, shape = tensor_type(val, f"input {n.name}")
        tr.values[n] = tr.inputs[n] = builder.add_input(n.name, dtype, shape)
        input_refs.append(tr.values[n])
    output_node = None
    python_only = _views_only_for_outputs(gm)
    for n in gm.graph.nodes:
        if n.op == "placeholder" or n in python_only:
            continue
        if n.op == "output":
            output_node = n
            break
        if n.op != "call_function":
            raise UnsupportedGraph(f"{n.op} {n.target} at node {n.name} is not an op symmflow "
                                   "can import", n.name, str(n.target))
        tr.translate(n)
    assert output_node is not None
    fx_outputs = output_node.args[0]
    if not isinstance(fx_outputs, (list, tuple)):
        fx_outputs = (fx_outputs,)
    outputs, returns, views, notes = [], [], [], []
    for i, o in enumerate(fx_outputs):
        if o is None:
            outputs.append(OutputSource("none"))
        elif not isinstance(o, torch.fx.Node):
            raise UnsupportedGraph(f"output {i} is the constant {o!r}")
        elif o.op == "placeholder":
            outputs.append(OutputSource("input", placeholders.index(o)))
            notes.append(f"output {i} is input {o.name}: left to Python")
        elif _view_of_input(o):
            outputs.append(OutputSource("python", len(views)))
            views.append(o)
            notes.append(f"output {i} ({o.name}) is a view of a graph input: left to Python")
        else:
            value = tr.arg(o, f"output {i}")
            ids = [r.id for r in returns]
            if value.id not in ids:
                returns.append(value)
                ids.append(value.id)
            kind = "int" if int_input(node_val(o)) else "ir"
            outputs.append(OutputSource(kind, ids.index(value.id)))
    builder.set_outputs(returns)
    try:
        program = builder.finish(f"<graph {name}>")
    except symmflow.Error as e:
        raise UnsupportedGraph(f"graph {name}: {e}") from None
    return ImportedGraph(
        program=program, text=program.text, name=name, world_size=world_size, rank=rank,
        input_names=[builder.type(r)[0] for r in input_refs],
        return_names=[builder.type(r)[0] for r in returns], outputs=outputs,
        groups=dict(groups.names),
        python_outputs=_python_output_module(gm, views) if views else None, notes=notes,
        written_inputs=[i for i, n in enumerate(placeholders) if n in tr.written],
        int_inputs=int_inputs)
