"""Eager symmetric-memory ops for torch tensors (issue 17, item 3).

`empty(shape, dtype=..., group=...)` returns a torch tensor whose storage is a symmetric heap of
the calling rank (zero copy: the tensor is a DLPack view of symmflow's allocation, which stays
alive as long as the tensor does). Every `symm_mem` op of symmflow's catalogue is registered as
`torch.ops.symmflow.<op>` with the catalogue's schema (Note [catalogue schemas]): a CPU and a CUDA
kernel that call the op on the rank (symmflow.call_op; one CompositeExplicitAutograd kernel for an
op without tensor arguments, such as barrier, which torch cannot dispatch by device), a fake kernel that asks the op's C++
shape function (symmflow._core.infer_shapes) so that dynamo and AOT autograd trace it, and,
where the installed torch has it, `register_symm_mem_args` naming the arguments the C++
catalogue registers as symmetric.

Group arguments are c10d group names, as torch.ops.symm_mem takes them; they are resolved to
symmflow groups with the same ranks by their members alone (_runtime.local_group).

On a GPU, empty(..., device="cuda") allocates in a GPU symmetric heap (peers map it through CUDA
IPC) and the ops run on PyTorch's current stream, with host waits before and after (Note [eager
GPU calls] in src/api/session.cpp); a GPU tensor that must be symmetric and is not is refused
(Note [no GPU staging]), not staged.

Refuses: dtypes symmflow has no name for, devices other than cpu and cuda.
"""
from __future__ import annotations

import torch

import symmflow
from symmflow import _core

from . import _runtime

# torch dtype <-> symmflow dtype name (core/dtype.hpp).
DTYPES = {
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.float64: "f64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int8: "i8",
    torch.uint32: "u32",
    torch.bool: "bool",
}


TORCH_DTYPES = {name: dtype for dtype, name in DTYPES.items()}


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise symmflow.Error(
            f"symmflow has no dtype for {dtype} (it knows {', '.join(map(str, DTYPES))})"
        ) from None


def _group_of(group) -> _runtime.GroupInfo:
    """A c10d ProcessGroup, its name, or None (the default group) as a symmflow group."""
    import torch.distributed as dist

    if group is None:
        group = dist.group.WORLD
    name = group if isinstance(group, str) else group.group_name
    info = _runtime.local_group(name)  # by its members alone (issue 25)
    _runtime.ensure_runtime_group(info)
    return info


def _symmflow_device(device) -> str:
    """'cpu', 'cuda' or 'cuda:i' for a torch device (empty_symmetric refuses a GPU other than the
    rank's); refuses other device types."""
    device = torch.device(device if device is not None else "cpu")
    if device.type == "cpu":
        return "cpu"
    if device.type != "cuda":
        raise symmflow.Error(f"symmflow has symmetric memory on cpu and cuda, not {device.type}")
    return "cuda" if device.index is None else f"cuda:{device.index}"


def empty(shape, *, dtype: torch.dtype = torch.float32, group=None, device=None) -> torch.Tensor:
    """A zeroed tensor in a new symmetric heap of `group` (collective over the group's members).
    `group`: a c10d ProcessGroup, its name, or None for the default group. `device`: None or
    "cpu" (host shared memory), or "cuda" (this rank's GPU: rank % GPUs, shared with the peers
    of the host through CUDA IPC).
    """
    if isinstance(shape, int):
        shape = (shape,)
    info = _group_of(group)
    array = symmflow.empty_symmetric(
        _runtime.current_rank(), tuple(int(s) for s in shape), dtype=dtype_name(dtype),
        group=info.name, device=_symmflow_device(device),
    )
    return torch.from_dlpack(array)


# Note [catalogue schemas]: symmflow's op schemas are written in torch's schema language
# (schema/parse.hpp reads the same grammar), so torch.library.define takes them verbatim once the
# namespace is dropped. Ops whose schema torch refuses are skipped and listed in SKIPPED with
# torch's reason; test_library checks that none of the symm_mem ops is.
_lib: "torch.library.Library | None" = None
REGISTERED: list[str] = []
SKIPPED: dict[str, str] = {}
SYMM_ARGS: dict[str, list[str]] = {}  # op -> the symmetric arguments registered with torch


def _symm_arg_indices(schema: torch.FunctionSchema, symm_args: list[str]) -> list[int]:
    """Positions of the arguments the catalogue registers as symmetric (register_symm_mem_args
    in C++)."""
    return [i for i, a in enumerate(schema.arguments) if a.name in symm_args]


def _make_kernel(qualname: str, schema: torch.FunctionSchema, symm_args: list[str]):
    """The eager kernel of torch.ops.symmflow.<op>: calls symmflow's op on the rank.

    A tensor that must be symmetric but lies elsewhere (a plain torch tensor, or a heap of another
    group) is staged through a fresh symmetric heap of the op's group (collective, like the op:
    every rank stages alike) and, when the op writes it (`Tensor(a!)`), copied back: eager code
    need not place its tensors, while compiled code gets them placed with no copy.
    """
    group_index = next(
        (i for i, a in enumerate(schema.arguments) if a.name == "group_name"), None
    )
    symm_indices = _symm_arg_indices(schema, symm_args)
    written = {i for i, a in enumerate(schema.arguments)
               if a.alias_info is not None and a.alias_info.is_write}

    def kernel(*args):
        args = list(args)
        rank = _runtime.current_rank()
        group = None
        if group_index is not None and group_index < len(args):
            group = _group_of(args[group_index]).name
            args[group_index] = group
        write_back = []
        for i in symm_indices:
            t = args[i] if i < len(args) else None
            if not isinstance(t, torch.Tensor) or group is None:
                continue
            if symmflow.symmetric_group(t.detach()) == group:
                continue
            if t.is_cuda:
                # Note [no GPU staging]: staging through a fresh GPU heap per call gave one rank's
                # contribution as zeros in bf16 with two processes sharing an H100 (f32 was
                # right; cause not found; the staged copy was PyTorch's asynchronous copy on its
                # stream, see Note [eager GPU calls] in src/api/session.cpp), so GPU tensors
                # must be symmetric already.
                raise symmflow.Error(
                    f"torch.ops.symmflow.{qualname.split('::')[1]}: argument "
                    f"'{schema.arguments[i].name}' is a CUDA tensor outside symmetric memory of "
                    f"group '{group}'; allocate it with symmflow.torch.empty(shape, dtype=..., "
                    f"device='cuda', group=...) (eager GPU calls do not stage)")
            staged = torch.from_dlpack(symmflow.empty_symmetric(  # on the CPU only (above)
                rank, tuple(t.shape), dtype=dtype_name(t.dtype), group=group))
            staged.copy_(t)
            if i in written:
                write_back.append((t, staged))
            args[i] = staged
        cuda = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda), None)
        # On a GPU the op runs on PyTorch's current stream (Note [streams] in _backend.py).
        stream = torch.cuda.current_stream(cuda).cuda_stream if cuda is not None else None
        results = symmflow.call_op(
            rank, qualname, *[a.detach() if isinstance(a, torch.Tensor) else a for a in args],
            stream=stream)
        for original, staged in write_back:
            original.copy_(staged)
        outs = [torch.from_dlpack(r) for r in results]
        if len(schema.returns) == 0 or not outs:
            return None
        if len(schema.returns) == 1:  # one tensor, or one list of them (Tensor[])
            return outs if isinstance(schema.returns[0].type, torch.ListType) else outs[0]
        return tuple(outs)

    return kernel


def _group_size(name: str) -> int:
    import torch.distributed.distributed_c10d as c10d

    return c10d._resolve_process_group(name).size()


def _meta(a):
    """A fake (or real) tensor as the C++ shape functions take it; lists of them too."""
    if isinstance(a, torch.Tensor):
        return _core.Meta(dtype_name(a.dtype), list(a.shape))
    if isinstance(a, (list, tuple)) and a and all(isinstance(x, torch.Tensor) for x in a):
        return [_meta(x) for x in a]
    return a


def _make_fake(qualname: str, schema: torch.FunctionSchema, group_arg: str):
    """The fake kernel of torch.ops.symmflow.<op>: the results the op's C++ shape function gives
    for these arguments (symmflow._core.infer_shapes), the group argument's size from c10d."""
    group_index = next((i for i, a in enumerate(schema.arguments) if a.name == group_arg), None)

    def fake(*args):
        if len(schema.returns) == 0:
            return None
        sizes = {}
        if group_index is not None and group_index < len(args) and \
                isinstance(args[group_index], str):
            sizes[args[group_index]] = _group_size(args[group_index])
        like = next(a for a in args if isinstance(a, torch.Tensor))
        specs = _core.infer_shapes(qualname, [_meta(a) for a in args], {}, sizes)
        outs = [like.new_empty(shape, dtype=TORCH_DTYPES[dtype]) for dtype, shape in specs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    return fake


def register_ops() -> list[str]:
    """Registers every symm_mem op of the catalogue as torch.ops.symmflow.<op> (idempotent)."""
    global _lib
    if _lib is not None:
        return REGISTERED
    _lib = torch.library.Library("symmflow", "FRAGMENT")
    for entry in symmflow.ops():
        qualname = entry["name"]
        if not qualname.startswith("symm_mem::"):
            continue
        op_name = qualname.split("::", 1)[1]
        if "." in op_name:
            continue  # overloads are reached through their base name
        schema_text = entry["schema"].split("::", 1)[1]
        try:
            _lib.define(schema_text)
        except Exception as e:  # noqa: BLE001 - the reason is kept and reported
            SKIPPED[qualname] = str(e).splitlines()[0]
            continue
        schema = getattr(torch.ops.symmflow, op_name).default._schema
        symm = list(entry.get("symm_args", []))  # the C++ catalogue's register_symm_mem_args
        kernel = _make_kernel(qualname, schema, symm)
        if any("Tensor" in str(a.type) for a in schema.arguments):
            _lib.impl(op_name, kernel, "CPU")
            _lib.impl(op_name, kernel, "CUDA")
        else:  # no tensor to dispatch on (barrier): one kernel for every key (issue 25)
            _lib.impl(op_name, kernel, "CompositeExplicitAutograd")
        torch.library.register_fake(f"symmflow::{op_name}",
                                    _make_fake(qualname, schema, entry.get("group_arg", "")),
                                    lib=_lib)
        if hasattr(_lib, "register_symm_mem_args") and symm:
            _lib.register_symm_mem_args(op_name, symm)
        SYMM_ARGS[op_name] = symm
        REGISTERED.append(op_name)
    return REGISTERED


# Note [torch's symm_mem ops]: torch.ops.symm_mem.one_shot_all_reduce and two_shot_all_reduce_
# have CUDA kernels only, and two_shot_all_reduce_ has no fake kernel in a CPU build, so dynamo
# breaks the graph at it; its schema also returns its input as an alias (`Tensor(a!)`), which AOT
# autograd refuses for custom ops. symmflow therefore (1) gives both ops CPU kernels that run
# symmflow's op, staging a tensor that is not symmetric through a fresh symmetric heap (eager
# only: compiled programs are planned), and a fake kernel where torch has none; (2) rewrites
# dynamo's graph so that two_shot_all_reduce_ becomes torch.ops.symmflow.two_shot_all_reduce_
# (returns nothing), whose uses of the result read the mutated input instead; AOT autograd then
# functionalises it like any mutating custom op.
_torch_symm_lib: "torch.library.Library | None" = None


def _catalogue_symm_args(qualname: str) -> list[str]:
    return next(list(o["symm_args"]) for o in symmflow.ops() if o["name"] == qualname)


def register_torch_symm_mem_kernels() -> None:
    """CPU kernels (and a missing fake) for torch's own symm_mem ops (idempotent)."""
    global _torch_symm_lib
    if _torch_symm_lib is not None:
        return
    _torch_symm_lib = torch.library.Library("symm_mem", "IMPL")
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    one = torch.ops.symm_mem.one_shot_all_reduce.default
    two = torch.ops.symm_mem.two_shot_all_reduce_.default
    if not has(one.name(), "CPU"):
        kernel = _make_kernel("symm_mem::one_shot_all_reduce", one._schema,
                              _catalogue_symm_args("symm_mem::one_shot_all_reduce"))
        _torch_symm_lib.impl("one_shot_all_reduce", kernel, "CPU")
    if not has(two.name(), "CPU"):
        kernel = _make_kernel("symm_mem::two_shot_all_reduce_", two._schema,
                              _catalogue_symm_args("symm_mem::two_shot_all_reduce_"))

        def two_shot(x, op, g):  # torch's schema returns the input
            kernel(x, op, g)
            return x

        _torch_symm_lib.impl("two_shot_all_reduce_", two_shot, "CPU")
    if not has(two.name(), "Meta"):
        _torch_symm_lib.impl("two_shot_all_reduce_", lambda x, op, g: x, "Meta")


def make_inplace_symm_mem_functionalizable(gm: torch.fx.GraphModule) -> int:
    """Note [torch's symm_mem ops] (2): rewrites dynamo's graph in place; returns how many."""
    targets = {torch.ops.symm_mem.two_shot_all_reduce_, torch.ops.symm_mem.two_shot_all_reduce_.default}
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in targets:
            continue
        node.replace_all_uses_with(node.args[0])
        node.target = torch.ops.symmflow.two_shot_all_reduce_.default
        count += 1
    if count:
        gm.recompile()
    return count
