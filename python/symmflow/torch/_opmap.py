"""The mapping from PyTorch ops (as AOT autograd's functionalized ATen graphs name them) to
symmflow's op catalogue, as data.

What it does: names, for every torch op target that can appear in a graph, the symmflow op it
becomes and how (`Rule`); loads the catalogue of ops the installed symmflow has (`Catalogue`, from
`symmflow._core.ops()` when the native module is importable, else from the `symmflow ops`
command); renders the table of `docs/pytorch_ops_table.md`.
Expects: torch op targets as `torch._ops.OpOverload` (or their qualified `ns.name.overload`
strings).
Guarantees: one rule per special op (collectives, aliases, symmflow's own ops); every other
`aten` op maps by name (`aten.mm.default` -> `aten::mm`, `aten.add.Tensor` -> `aten::add.Tensor`)
and is supported exactly when the catalogue has that name. The table is deterministic.
Refuses: nothing here; `_fx_import` raises `UnsupportedGraph` for ops without a rule.

Run `python3 -m symmflow.torch._opmap --write docs/pytorch_ops_table.md` (with `python/` on
PYTHONPATH) to regenerate the docs table; tests/python/torch/test_fx_import.py checks it is current.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from typing import Iterable, Optional


# Note [rule kinds]
# Each special torch op is handled in one of these ways by _fx_import:
# - "op":          a call of `symmflow_op`, arguments rearranged by `args` (positions of the torch
#                  op's arguments to pass, in order; group arguments become IR group names);
# - "alias":       no statement; the node's value is its first argument's (wait_tensor: symmflow's
#                  collectives are synchronous; aten.copy of equal shape and dtype: the functional
#                  form of an in-place collective's write-back);
# - "inplace":     a mutating symmflow op on its first argument; the node's value is that
#                  argument after the write (graphs that were not functionalized);
# - "functional":  auto_functionalized(_v2) of a mutating op: `functional<symmflow_op>(...)`,
#                  whose results are the op's returns, then each written argument's new value.
# A rule's `equal_splits` names split-size arguments (all_to_all_single's) that must be None or
# static and equal: Note [equal splits] in _fx_import.
# The namespace `symmflow` (ops registered by symmflow.torch with torch.library) maps each op to
# `symm_mem::<name>` when the catalogue has it, else to `aten::<name>` (NAMESPACE_FALLBACKS).


@dataclasses.dataclass(frozen=True)
class Rule:
    """How one torch op becomes symmflow IR (Note [rule kinds])."""

    torch_op: str  # qualified: "_c10d_functional.all_reduce.default"
    kind: str  # "op" | "alias" | "inplace"
    symmflow_op: Optional[str]  # "symm_mem::one_shot_all_reduce"; None for aliases
    args: tuple[int, ...] = ()  # torch argument positions passed, in order ("op"/"inplace")
    group_arg: Optional[int] = None  # torch position of the c10d group name
    group_size_arg: Optional[int] = None  # torch position of a group size to check
    equal_splits: tuple[int, ...] = ()  # torch positions of split sizes that must be equal
    notes: str = ""


# The special rules: every torch op outside `aten` that the importer handles, and the aten ops
# whose meaning differs from the catalogue op of the same name.
RULES: tuple[Rule, ...] = (
    Rule("_c10d_functional.all_reduce.default", "op", "symm_mem::one_shot_all_reduce",
         args=(0, 1, 2), group_arg=2,
         notes="functional all-reduce (funcol.all_reduce, and dist.all_reduce as dynamo "
               "rewrites it); reduce ops sum, avg, max, min"),
    Rule("_c10d_functional.all_reduce_.default", "inplace", "symm_mem::two_shot_all_reduce_",
         args=(0, 1, 2), group_arg=2,
         notes="only in graphs that were not functionalized: torch 2.13's AOT autograd refuses "
               "it (a custom op returning an alias); dist.all_reduce reaches the graph as "
               "all_reduce + wait_tensor + aten.copy instead"),
    Rule("_c10d_functional.all_gather_into_tensor.default", "op",
         "symm_mem::_low_contention_all_gather", args=(0, 2), group_arg=2, group_size_arg=1,
         notes="gathers along dim 0; the group size argument must equal the group's size"),
    Rule("_c10d_functional.reduce_scatter_tensor.default", "op",
         "symm_mem::_low_contention_reduce_scatter", args=(0, 1, 3), group_arg=3,
         group_size_arg=2,
         notes="scatters along dim 0; the group size argument must equal the group's size"),
    Rule("_c10d_functional.all_to_all_single.default", "op", "symm_mem::all_to_all",
         args=(0, 3), group_arg=3, equal_splits=(1, 2),
         notes="equal splits along dim 0 (both split-size lists None or static, one entry per "
               "rank, each dim 0 / group size: funcol.all_to_all_single with no splits, "
               "Ulysses-style sequence parallelism); unequal or symbolic splits stay in PyTorch, "
               "named"),
    # Note [views as reshapes]: PyTorch traced each view against the layout its input had in the
    # trace; symmflow hands a partition contiguous inputs (Note [binding torch tensors]) and its
    # kernels write dense results, so a view that was valid there (of a transposed tangent in a
    # backward graph) may have no view here. Imported as reshape, it is the same view wherever
    # one exists and a copy where none does, with the same values.
    Rule("aten.view.default", "op", "aten::reshape", args=(0, 1),
         notes="a view where the input's layout allows one, else a copy (Note [views as "
               "reshapes])"),
    Rule("aten._unsafe_view.default", "op", "aten::reshape", args=(0, 1),
         notes="as aten.view (Note [views as reshapes])"),
    Rule("_c10d_functional.wait_tensor.default", "alias", None,
         notes="no statement: symmflow's collectives complete in order; supported only after "
               "a collective that symmflow runs"),
    Rule("aten.alias.default", "alias", None,
         notes="no statement: the value is its argument's (torch 2.11 traces a funcol all_reduce "
               "on a world of one as an alias)"),
    Rule("aten.copy.default", "alias", None,
         notes="copy(dst, src) with src of dst's shape and dtype is src (the write-back of an "
               "in-place collective after functionalization); other copies are refused"),
    Rule("transformers.grouped_mm_fallback.default", "op", "aten::_grouped_mm", args=(0, 1, 2),
         notes="transformers' MoE expert matmul on CPU (and non-bf16 GPU) weights: input [S, K] "
               "sorted by expert, weight [E, K, N], offs [E] cumulative row ends; "
               "torch._grouped_mm's semantics"),
    Rule("symm_mem.one_shot_all_reduce.default", "op", "symm_mem::one_shot_all_reduce",
         args=(0, 1, 2), group_arg=2, notes="same op"),
    Rule("symm_mem.two_shot_all_reduce_.default", "inplace", "symm_mem::two_shot_all_reduce_",
         args=(0, 1, 2), group_arg=2,
         notes="torch 2.13 (CPU build) has no fake kernel for it and its schema returns an alias "
               "AOT autograd cannot functionalize; the symmflow backend gives it a fake kernel "
               "and rewrites it to torch.ops.symmflow.two_shot_all_reduce_ before AOT autograd "
               "(Note [torch's symm_mem ops]), so it arrives auto-functionalized; this rule "
               "imports it where a graph still holds it unfunctionalized"),
)

# Ops of namespace `symmflow` that are neither symm_mem nor aten ops of the same name.
SYMMFLOW_NAMESPACE_OPS: dict[str, str] = {
    "scaled_dot_product_attention": "aten::scaled_dot_product_attention",
    "scaled_dot_product_attention_backward": "aten::scaled_dot_product_attention_backward",
}
# Namespaces tried, in order, for an op of namespace `symmflow` without an entry above.
NAMESPACE_FALLBACKS: tuple[str, ...] = ("symm_mem", "aten")

# A torch overload taking a Tensor whose graph passes a Python number there maps to this overload
# of the same op (aten.add.Tensor(x, 1e-05) -> aten::add.Scalar), when the catalogue has it.
SCALAR_OVERLOADS: dict[str, str] = {"Tensor": "Scalar", "Tensor_mode": "Scalar_mode"}
# A torch op whose graph passes a Python number as `self` and a tensor as `other` maps to this op
# with the two swapped: aten.sub.Tensor(1, x) (1 - x, as the decomposed silu backward writes it)
# -> aten::rsub.Scalar(x, 1), which is other - alpha * self.
REVERSED_SCALAR_OPS: dict[str, str] = {"aten.sub.Tensor": "aten::rsub.Scalar"}

RULES_BY_OP: dict[str, Rule] = {r.torch_op: r for r in RULES}



def qualified_name(target: object) -> str:
    """`torch.ops.aten.mm.default` -> "aten.mm.default" (for OpOverloads and HOPs)."""
    name = getattr(target, "name", None)
    if callable(name):  # OpOverload.name() -> "aten::mm" / "aten::add.Tensor"
        schema = getattr(target, "_schema", None)
        if schema is not None:
            ns, op = schema.name.split("::", 1)
            return f"{ns}.{op}.{schema.overload_name or 'default'}"
    if isinstance(target, str):
        return target
    mod = getattr(target, "__module__", "") or ""
    return f"{mod}.{getattr(target, '__name__', repr(target))}"


def catalogue_name(namespace: str, op: str, overload: str) -> str:
    """The catalogue's name of a torch op: `.default` drops ("aten::mm"), others stay."""
    return f"{namespace}::{op}" if overload in ("default", "") else f"{namespace}::{op}.{overload}"


@dataclasses.dataclass
class Catalogue:
    """The ops the installed symmflow has: name -> {"name", "schema", "backends", "tags",
    "inplace"}."""

    ops: dict[str, dict]

    @classmethod
    def from_list(cls, ops: Iterable[dict]) -> "Catalogue":
        return cls({o["name"]: dict(o) for o in ops})

    def has(self, name: str) -> bool:
        return name in self.ops

    def inplace_of(self, name: str) -> Optional[str]:
        """The registry's in-place variant of op `name` ("aten::add_.Tensor" for
        "aten::add.Tensor"), or None."""
        return self.ops.get(name, {}).get("inplace") or None

    def names(self) -> list[str]:
        return sorted(self.ops)


def find_cli() -> Optional[str]:
    """The `symmflow` command: $SYMMFLOW_CLI, the build tree's build/dev/bin, or PATH."""
    env = os.environ.get("SYMMFLOW_CLI")
    if env:
        return env
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    local = os.path.join(root, "build", "dev", "bin", "symmflow")
    if os.path.isfile(local) and os.access(local, os.X_OK):
        return local
    return shutil.which("symmflow")


_OPS_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_.]*)\((.*)$")


def parse_ops_listing(text: str) -> list[dict]:
    """Parses `symmflow ops` output into the list `symmflow._core.ops()` returns."""
    ops: list[dict] = []
    for line in text.splitlines():
        m = _OPS_LINE.match(line)
        if m:
            ops.append({"name": m.group(1), "schema": line.strip(), "backends": [], "tags": [],
                        "inplace": ""})
            continue
        stripped = line.strip()
        if not ops or not stripped:
            continue
        if stripped.startswith("backends:"):
            words = stripped[len("backends:"):].split()
            backends = []
            for w in words:  # "cpu  out: aten::mm.out": backends end at the first "key:"
                if w.endswith(":"):
                    break
                backends.append(w.rstrip(","))
            ops[-1]["backends"] = backends
            if "inplace:" in words:  # "... inplace: aten::add_.Tensor  out: ..."
                ops[-1]["inplace"] = words[words.index("inplace:") + 1]
        elif stripped.startswith("tags:"):
            ops[-1]["tags"] = [t.strip() for t in stripped[len("tags:"):].split(",") if t.strip()]
    return ops


def load_catalogue(cli: Optional[str] = None) -> Catalogue:
    """The installed catalogue: `symmflow._core.ops()` when importable, else `symmflow ops`.

    Raises RuntimeError when neither is available (naming what was tried)."""
    if cli is None:
        try:
            from symmflow import _core  # type: ignore[attr-defined]

            return Catalogue.from_list(_core.ops())
        except ImportError:
            pass
        cli = find_cli()
    if cli is None:
        raise RuntimeError("symmflow: no catalogue: symmflow._core is not importable and no "
                           "`symmflow` command was found (set SYMMFLOW_CLI)")
    out = subprocess.run([cli, "ops"], check=True, capture_output=True, text=True).stdout
    return Catalogue.from_list(parse_ops_listing(out))


def map_namespace_op(namespace: str, op: str, overload: str, catalogue: Catalogue) -> Optional[str]:
    """The catalogue op for a torch op without a special rule, or None when it has none."""
    if namespace == "aten":
        name = catalogue_name("aten", op, overload)
        return name if catalogue.has(name) else None
    if namespace == "symmflow":
        if op in SYMMFLOW_NAMESPACE_OPS:
            base = SYMMFLOW_NAMESPACE_OPS[op]
            ns, plain = base.split("::", 1)
            name = catalogue_name(ns, plain, overload)
            return name if catalogue.has(name) else None
        for ns in NAMESPACE_FALLBACKS:
            name = catalogue_name(ns, op, overload)
            if catalogue.has(name):
                return name
    return None


def op_mapping_table() -> list[tuple[str, str, str]]:
    """Rows (torch op, symmflow op, notes) for docs/pytorch.md, in a fixed order."""
    rows: list[tuple[str, str, str]] = [
        ("aten.<op>.<overload>", "aten::<op>.<overload> (.default dropped)",
         "when the catalogue has it (`symmflow ops`); otherwise the node stays in PyTorch"),
        ("aten.<op>.Tensor with a Python number", "aten::<op>.Scalar",
         "e.g. aten.add.Tensor(x, 1e-05) -> aten::add.Scalar(x, 1e-05)"),
    ]
    for op, target in sorted(REVERSED_SCALAR_OPS.items()):
        rows.append((f"{op} with a Python number for self", f"{target} (self and other swapped)",
                     "e.g. aten.sub.Tensor(1, x) -> aten::rsub.Scalar(x, 1)"))
    for r in RULES:
        target = r.symmflow_op or "(no statement: alias)"
        if r.kind == "inplace":
            target += " (in place)"
        rows.append((r.torch_op, target, r.notes))
    rows.append(("auto_functionalized / auto_functionalized_v2 of a mutating op",
                 "functional<op> of the op's mapping",
                 "how AOT autograd hands over torch.ops.symmflow in-place ops; the written "
                 "arguments' new values are its results (views of a base are refused)"))
    for op, target in sorted(SYMMFLOW_NAMESPACE_OPS.items()):
        rows.append((f"symmflow.{op}.<overload>", target, "registered by symmflow.torch"))
    rows.append(("symmflow.<op>.<overload>", "symm_mem::<op>, else aten::<op>",
                 "ops registered by symmflow.torch, by name"))
    return rows


def render_table_markdown() -> str:
    """docs/pytorch_ops_table.md's text."""
    lines = [
        "<!-- Generated by `python3 -m symmflow.torch._opmap --write docs/pytorch_ops_table.md`"
        " (PYTHONPATH=python); tests/python/torch/test_fx_import.py checks it is current. -->",
        "",
        "| torch op | symmflow op | notes |",
        "|---|---|---|",
    ]
    for torch_op, target, notes in op_mapping_table():
        cells = [c.replace("|", "\\|") for c in (torch_op, target, notes)]
        lines.append(f"| `{cells[0]}` | `{cells[1]}` | {cells[2]} |")
    return "\n".join(lines) + "\n"


def _main(argv: Optional[list[str]] = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Print or write the torch -> symmflow op table")
    parser.add_argument("--write", metavar="PATH", help="write the markdown table here")
    ns = parser.parse_args(argv)
    text = render_table_markdown()
    if ns.write:
        with open(ns.write, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
