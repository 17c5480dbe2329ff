"""Debugging aid (not a benchmark): finds the first ATen node whose value symmflow computes
differently from PyTorch in a transformers model's compiled call.

    torchrun --nproc-per-node N tools/device/node_bisect.py [--device cpu|cuda] [--model llama]
             [--case lazy|early]

It compiles the model's StaticCache prefill (`lazy`: the cache initialised inside the compiled
call, as transformers does on a first call; `early`: before it) with backend="symmflow", records
the ATen graph AOT autograd hands the backend and the arguments of its first call, then, with
those arguments:
  1. the graph as it was, through symmflow and through PyTorch: outputs compared;
  2. the graph returning every tensor node as well: the nodes that differ, first one first;
  3. prefixes of the graph (one node its only output, what follows it dropped), bisected: the
     first node whose value differs when nothing after it is computed (a planner's reuse of a
     buffer shows here and not in 2).
Lines start with BISECT; rank 0 prints the graph's nodes around the first difference.
"""
import argparse
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.fx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))
os.environ["SYMMFLOW_TORCH_DIRECT_CALL"] = "0"  # every call through the recorded forward
import hf_models  # noqa: E402
import symmflow.torch as sft  # noqa: E402
from symmflow.torch import _backend  # noqa: E402

CAPTURED = []
_ORIGINAL = _backend._compile_forward


def _clone(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _spy(gm, example_inputs, settings, **kw):
    entry = {"graph": copy.deepcopy(gm.graph), "module": gm, "args": None}
    CAPTURED.append(entry)
    run = _ORIGINAL(gm, example_inputs, settings, **kw)

    def wrapped(*args):
        if entry["args"] is not None:
            return run(*args)
        entry["args"] = _clone(args)
        result = run(*args)
        # The first call checked where it ran: against PyTorch on the same arguments, and against
        # a second call of the same compiled function.
        gm_eager, _ = _module(entry, lambda g, out: (list(out.args[0]), []))
        want = gm_eager(*_clone(entry["args"]))
        again = run(*_clone(entry["args"]))
        first = ["%.1e" % _err(g, w) for g, w in zip(result, want)]
        second = ["%.1e" % _err(g, w) for g, w in zip(again, want)]
        entry["want"] = want
        print(f"BISECT in the model's call: first call {first} second call {second}", flush=True)
        return result

    return wrapped


def _module(entry, outputs_of) -> tuple[torch.fx.GraphModule, list]:
    """The recorded graph with `outputs_of(graph)` -> (output nodes, extra nodes) as its output."""
    graph = copy.deepcopy(entry["graph"])
    out = next(n for n in graph.nodes if n.op == "output")
    outputs, extra = outputs_of(graph, out)
    out.args = (tuple(outputs),)
    graph.eliminate_dead_code()
    graph.lint()
    return torch.fx.GraphModule(entry["module"], graph), extra


def _tensor_nodes(graph):
    return [n for n in graph.nodes if n.op == "call_function"
            and isinstance(n.meta.get("val"), torch.Tensor)]


def _run_both(gm: torch.fx.GraphModule, args):
    want = gm(*_clone(args))
    settings = _backend.Settings.read(None, None)
    compiled = _ORIGINAL(copy.deepcopy(gm), _clone(args), settings)
    got = compiled(*_clone(args))
    return list(want), list(got)


def _err(g, w) -> float:
    if not isinstance(w, torch.Tensor):
        return 0.0 if g == w else float("inf")
    if g.shape != w.shape:
        return float("inf")
    if w.numel() == 0:
        return 0.0
    return (g.double() - w.double()).abs().max().item()


def _describe(node) -> str:
    args = ", ".join(a.name if isinstance(a, torch.fx.Node) else repr(a)[:40]
                     for a in node.args)
    val = node.meta.get("val")
    shape = tuple(val.shape) if isinstance(val, torch.Tensor) else ""
    return f"{node.name} = {node.target}({args}) {shape}"


def bisect(entry, rank: int, tol: float) -> None:
    args = entry["args"]
    gm, _ = _module(entry, lambda g, out: (list(out.args[0]), []))
    want, got = _run_both(gm, args)
    errs = [_err(g, w) for g, w in zip(got, want)]
    print(f"BISECT rank {rank} whole graph: output errors {['%.1e' % e for e in errs]}",
          flush=True)
    out = next(n for n in entry["graph"].nodes if n.op == "output")
    for i, (n, g, w) in enumerate(zip(out.args[0], got, want)):
        val = n.meta.get("val") if isinstance(n, torch.fx.Node) else None
        traced = (tuple(val.shape), val.stride(), val.storage_offset()) \
            if isinstance(val, torch.Tensor) else None
        layout = [(t.stride(), t.storage_offset()) if isinstance(t, torch.Tensor) else t
                  for t in (w, g)]
        print(f"BISECT rank {rank}   output {i} {getattr(n, 'name', n)}: traced {traced} "
              f"eager {layout[0]} symmflow {layout[1]}", flush=True)

    def all_nodes(graph, out):
        nodes = _tensor_nodes(graph)
        return list(out.args[0]) + nodes, nodes
    gm, nodes = _module(entry, all_nodes)
    want, got = _run_both(gm, args)
    offset = len(want) - len(nodes)
    bad = [(n, _err(g, w)) for n, g, w in zip(nodes, got[offset:], want[offset:])
           if _err(g, w) > tol]
    print(f"BISECT rank {rank} every node an output: {len(bad)} of {len(nodes)} differ", flush=True)
    for n, e in bad[:8]:
        print(f"BISECT rank {rank}   {e:.1e} {_describe(n)}", flush=True)

    names = [n.name for n in _tensor_nodes(entry["graph"])]
    lo, hi = 0, len(names)  # the first bad prefix lies in [lo, hi)
    while lo < hi:
        mid = (lo + hi) // 2

        def prefix(graph, out, name=names[mid]):
            node = next(n for n in graph.nodes if n.name == name)
            return [node], [node]
        gm, _ = _module(entry, prefix)
        want, got = _run_both(gm, args)
        wrong = _err(got[0], want[0]) > tol
        flags = torch.tensor([int(wrong)])
        dist.all_reduce(flags)  # every rank takes the same branch (collectives inside)
        if flags.item():
            hi = mid
        else:
            lo = mid + 1
    if lo == len(names):
        print(f"BISECT rank {rank} every prefix agrees", flush=True)
        return
    print(f"BISECT rank {rank} first wrong prefix: node {lo} {names[lo]}", flush=True)
    if rank == 0:
        listed = list(entry["graph"].nodes)
        at = next(i for i, n in enumerate(listed) if n.name == names[lo])
        for n in listed[max(0, at - 12):at + 3]:
            print(f"BISECT graph {'>>' if n.name == names[lo] else '  '} {_describe(n)}",
                  flush=True)


def _pytorch_backends() -> dict:
    """dynamo alone, AOT autograd alone, and AOT autograd with symmflow's decompositions and
    dynamo-graph rewrites, each run by PyTorch; the graphs printed where the cache is written."""
    from torch._dynamo.backends.common import aot_autograd
    from symmflow.torch import _causal, _library, _sdpa

    def show(label, gm):
        if dist.get_rank() == 0:
            for line in gm.code.splitlines():
                if any(w in line for w in ("index_", "zeros", "full", "add_", "_to_copy", ".to(",
                                           "return")):
                    print(f"BISECT {label} {line.strip()[:240]}", flush=True)
        return gm

    def dynamo_only(gm, example_inputs):
        show("dynamo", gm)
        return gm.forward

    def ours(gm, example_inputs):
        _backend._library_ready()
        _sdpa.keep_attention_whole(gm)
        _causal.causal_masks_traced(gm)
        _library.make_inplace_symm_mem_functionalizable(gm)
        return aot_autograd(fw_compiler=lambda g, ex: show("aten", g),
                            decompositions=_backend._decompositions(False),
                            keep_inference_input_mutations=True)(gm, example_inputs)

    return {"dynamo-only": dynamo_only, "aot_eager": "aot_eager", "aot+symmflow-passes": ours}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", default="llama")
    p.add_argument("--case", default="lazy")
    p.add_argument("--dtype", default="f32")
    p.add_argument("--backends", action="store_true",
                   help="PyTorch's own backends on the same call instead of the bisect")
    a = p.parse_args()
    if a.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("cpu:gloo,cuda:nccl")
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dist.init_process_group("gloo")
        dev = torch.device("cpu")
    sft.init()
    rank = dist.get_rank()
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[a.dtype]
    from transformers import StaticCache
    full = hf_models.make_model(a.model, dtype).to(dev)
    prompt = hf_models.make_input_ids()[:1, :8].to(dev)
    with torch.no_grad():
        sharded = hf_models.sharded_copy(full, a.model, "dtensor")
        outs = {}
        models = [("eager", sharded), ("symmflow", torch.compile(sharded, backend="symmflow"))]
        if a.backends:
            models = [("eager", sharded)] + [(b, torch.compile(sharded, backend=f))
                                             for b, f in _pytorch_backends().items()]
        for label, model in models:
            torch._dynamo.reset()
            cache = StaticCache(config=sharded.config, max_batch_size=1, max_cache_len=15)
            if a.case == "early":
                cache.early_initialization(1, sharded.config.num_key_value_heads
                                           // dist.get_world_size(),
                                           getattr(sharded.config, "head_dim", None) or sharded.config.hidden_size // sharded.config.num_attention_heads, dtype, dev)
            outs[label] = model(input_ids=prompt, past_key_values=cache,
                                cache_position=torch.arange(8, device=dev)).logits
            layer = cache.layers[0]
            written = (layer.keys.abs().sum(dim=(0, 1, 3)) != 0).int().tolist()
            print(f"BISECT rank {rank} {label}: logits error "
                  f"{_err(outs[label].float(), outs['eager'].float()):.2e}, cache slots written "
                  f"{written}, cumulative {layer.cumulative_length.tolist()}", flush=True)
        if a.backends:
            dist.destroy_process_group()
            return
        err = (outs["symmflow"].float() - outs["eager"].float()).abs().max().item()
        print(f"BISECT rank {rank} {a.model} {a.case} on {a.device}: logits error {err:.2e}; "
              f"{len(CAPTURED)} graph(s) recorded", flush=True)
        for entry in CAPTURED:
            if "want" in entry:
                logits = entry["want"][-1]
                print(f"BISECT rank {rank} the recorded graph in PyTorch against the eager model: "
                      f"{_err(logits.float(), outs['eager'].float()):.2e}; the model's compiled "
                      f"call against it {_err(outs['symmflow'].float(), logits.float()):.2e}",
                      flush=True)
        tol = 2e-4 if dtype == torch.float32 else 5e-2
        for entry in CAPTURED:
            if entry["args"] is not None:
                bisect(entry, rank, tol)
    dist.destroy_process_group()


if __name__ == "__main__":
    _backend._compile_forward = _spy
    main()
