"""Inference calls without AOT autograd's runtime wrappers (issue 37, item 2).

Expects: AOT autograd's compiled callable of an inference graph (what `aot_autograd` returns to
dynamo) and the Probe whose `wrap` made the forward AOT calls.
Guarantees: the first call goes through AOT's wrappers while the forward records the flat
arguments it is given and what it returns. When, on that call, AOT's wrappers did no more than
take each argument's inner tensors, call the forward and return its outputs (Note [inference
without AOT's wrappers]), every later call does just that itself; otherwise AOT's wrappers stay,
for good, and the report says why. Either way the caller gets what AOT's wrappers would return.
Refuses: nothing.
"""
from __future__ import annotations

import dataclasses

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

# Note [inference without AOT's wrappers]: dynamo calls an AOT-compiled inference graph through
# AOT's runtime wrappers: deduplication of repeated arguments, synthetic bases, the unwrapping of
# each tensor subclass argument (a DTensor parameter into its local shard) and the wrapping of
# outputs, input mutations applied after the call, outputs that alias inputs regenerated, grad
# mode turned off around the call, version counters of mutated inputs bumped. For a DTensor model
# that is tens of Python calls per argument, on every decode step (issue 37: the host path of a
# batch-1 decode step). For the graphs symmflow compiles whole, all of it reduces on every call
# to: the forward's arguments are the caller's tensors or their inner tensors, always the same
# ones, and its outputs are returned as they are. That is not assumed: the first call runs through
# AOT's wrappers with the forward recording what it got and gave, and the direct call is taken
# only when
# - every flat argument is the very object found in the caller's arguments (a tensor, or an
#   attribute of a traceable subclass's `__tensor_flatten__`, or any other object), or a number
#   equal to the caller's next number argument (AOT keeps their order), the numbers one for one;
# - AOT returned as many values as the forward (an input mutation AOT applies itself, or an
#   intermediate base, is a forward output it does not return), each the very object the
#   forward returned in its place, or the very object of a caller's argument (an output that is
#   an input: AOT returns the argument itself; a view of one, made anew per call, is refused);
# - the grad mode is what it was before the call, and autocast is off (dynamo's guards fix both
#   for the later calls of this graph).
# The direct call then turns grad off around the forward when it is on (as AOT does for an
# inference graph) and bumps the version counters of the arguments whose counters AOT's call
# moved (inputs the graph mutates: a KV cache). A graph that fails any condition keeps AOT's
# wrappers; the compile report names the condition (`CompileReport.direct_call`).
# SYMMFLOW_TORCH_DIRECT_CALL=0 (or the backend option {"direct_call": False}) keeps them always.


class Probe:
    """Made before AOT compiles; its `wrap` returns the forward AOT will call, recording that
    call's arguments and outputs while `recording` is set."""

    def __init__(self):
        self.forward = None
        self.report = None  # the forward's CompileReport, told of the decision
        self.recording = False
        self.args = None
        self.outputs = None

    def wrap(self, forward, report):
        self.forward, self.report = forward, report

        def recorded(*args):
            if not self.recording:
                return forward(*args)
            self.args = args
            self.outputs = forward(*args)
            return self.outputs

        return recorded


@dataclasses.dataclass
class _Plan:
    inputs: list  # per flat argument: (caller's argument index, inner attribute or None)
    picks: list  # per returned value: the forward's output k, or -1 - i: the caller's argument i
    kind: type | None  # list or tuple; None: one value, not a sequence
    bumped: tuple  # caller's arguments whose version counters AOT moved


class DirectInference:
    """AOT's compiled inference callable, called without its wrappers once a probe showed they
    change nothing (see the module doc)."""

    def __init__(self, aot_fn, probe: Probe):
        self.aot_fn, self.probe = aot_fn, probe
        self.plan = None  # None: not probed yet; False: AOT's wrappers kept
        self.direct = None  # the plan as one generated function of the caller's arguments
        self.direct_calls = 0

    def __getattr__(self, name):  # zero_grad, named_parameters, serialize of AOT's callable
        if name.startswith("__") or name in ("aot_fn", "probe"):  # copy, pickle: no recursion
            raise AttributeError(name)
        return getattr(self.aot_fn, name)

    def __call__(self, *args):
        if self.direct is not None:
            self.direct_calls += 1
            return self.direct(args)
        if self.plan is None:
            return self._probe(args)
        return self.aot_fn(*args)

    def _probe(self, args):
        p = self.probe
        versions = [a._version if isinstance(a, torch.Tensor) else None for a in args]
        grad = torch.is_grad_enabled()
        p.recording = True
        try:
            out = self.aot_fn(*args)
        finally:
            p.recording = False
        try:
            plan, why = _plan(args, p.args, p.outputs, out, versions, grad)
        finally:
            p.args = p.outputs = None  # no references kept to this call's tensors
        self.plan = plan or False
        if plan:
            self.direct = _generate(plan, p.forward)
        if p.report is not None:
            p.report.direct_call = "taken" if plan else f"AOT's wrappers kept: {why}"
        return out


def _sources(args) -> tuple[dict | None, list, str]:
    """id of each tensor or object the forward may be given -> (argument index, attribute or
    None); the positions of the int, float and bool arguments; or None and why."""
    sources, others = {}, []
    for i, a in enumerate(args):
        if type(a) in (int, float, bool):
            others.append(i)  # matched by value and order: small ints share their objects
        elif not isinstance(a, torch.Tensor):
            sources.setdefault(id(a), (i, None))  # a DeviceMesh, an opaque object
        elif is_traceable_wrapper_subclass(a):
            attrs, _ = a.__tensor_flatten__()
            for attr in attrs:  # tensors, and opaque objects (torch 2.13: DTensor's mesh)
                inner = getattr(a, attr)
                if is_traceable_wrapper_subclass(inner):
                    return None, others, (f"argument {i} ({type(a).__name__}) nests a "
                                          f"{type(inner).__name__}")
                sources.setdefault(id(inner), (i, attr))
        elif type(a) in (torch.Tensor, torch.nn.Parameter):
            sources.setdefault(id(a), (i, None))
        else:
            return None, others, f"argument {i} is a {type(a).__name__}"
    return sources, others, ""


def _plan(args, flat, fw_out, aot_out, versions, grad_before) -> tuple[_Plan | None, str]:
    """The direct call equal to this call of AOT's wrappers, or None and why not (Note [inference
    without AOT's wrappers])."""
    if flat is None:
        return None, "AOT's wrappers did not call the forward"
    if torch.is_grad_enabled() != grad_before:
        return None, "the graph changes the grad mode"
    if torch._C._is_any_autocast_enabled():
        return None, "autocast is on"
    sources, others, why = _sources(args)
    if sources is None:
        return None, why
    inputs, next_other = [], iter(others)
    for j, x in enumerate(flat):
        source = sources.get(id(x))
        if source is not None:
            inputs.append(source)
            continue
        if isinstance(x, torch.Tensor):
            return None, f"the forward's argument {j} is none of the caller's tensors"
        i = next(next_other, None)
        if i is None or type(args[i]) is not type(x) or args[i] != x:
            return None, f"the forward's argument {j} is none of the caller's values"
        inputs.append((i, None))
    if next(next_other, None) is not None and any(
            not isinstance(x, torch.Tensor) and id(x) not in sources for x in flat):
        # Numbers on both sides but not one for one: AOT adds sizes of subclass arguments when
        # shapes are dynamic, which a caller's number may equal on this call only.
        return None, "the forward's numbers are not the caller's, one for one"
    given = list(fw_out) if isinstance(fw_out, (list, tuple)) else [fw_out]
    returned = list(aot_out) if isinstance(aot_out, (list, tuple)) else [aot_out]
    if len(given) != len(returned):  # input mutations AOT applies, or intermediate bases
        return None, (f"the forward returned {len(given)} values and AOT's wrappers "
                      f"{len(returned)}")
    argument = {id(a): i for i, a in reversed(list(enumerate(args)))}
    picks = []  # per value: the forward's output k, or -1 - i for the caller's argument i
    for k, (g, r) in enumerate(zip(given, returned)):
        if r is g:
            picks.append(k)
        elif isinstance(r, torch.Tensor) and id(r) in argument:
            picks.append(-1 - argument[id(r)])  # an output that is an input, returned as is
        else:
            return None, f"AOT's wrappers made output {k} anew (a view of an input, a subclass)"
    kind = type(aot_out) if isinstance(aot_out, (list, tuple)) else None
    if kind is None and (not isinstance(fw_out, torch.Tensor) or fw_out is not aot_out):
        return None, "one value returned, not the forward's"
    if kind is not None and kind not in (list, tuple):
        return None, f"AOT's wrappers returned a {kind.__name__}"
    bumped = tuple(i for i, a in enumerate(args)
                   if isinstance(a, torch.Tensor) and a._version != versions[i])
    return _Plan(inputs, picks, kind, bumped), ""


def _generate(plan: _Plan, forward):
    """The plan as one function of the caller's argument tuple (its steps spelled out, as AOT's
    own runtime wrapper is in torch 2.13: a loop over the plan cost 5.6 us a call for a 31-argument
    DTensor decode step)."""
    def arg(i, attr):
        if attr is None:
            return f"args[{i}]"
        return f"args[{i}].{attr}" if attr.isidentifier() else f"getattr(args[{i}], {attr!r})"

    call = ", ".join(arg(i, attr) for i, attr in plan.inputs)
    lines = ["def direct(args):",
             "    grad = is_grad_enabled()",
             "    if grad:",
             "        set_grad_enabled(False)",
             "    try:",
             f"        out = forward({call})",
             "    finally:",
             "        if grad:",
             "            set_grad_enabled(True)"]
    if plan.bumped:
        bumped = "".join(f"args[{i}], " for i in plan.bumped)
        lines.append(f"    increment_version(({bumped}))")
    if plan.kind is None:
        lines.append("    return out")
    else:
        items = "".join((f"out[{k}], " if k >= 0 else f"args[{-1 - k}], ") for k in plan.picks)
        lines.append(f"    return {plan.kind.__name__}(({items}))")
    scope = {"forward": forward, "is_grad_enabled": torch.is_grad_enabled,
             "set_grad_enabled": torch._C._set_grad_enabled,
             "increment_version": torch.autograd.graph.increment_version}
    exec(compile("\n".join(lines) + "\n", "<symmflow direct call>", "exec"), scope)
    return scope["direct"]
