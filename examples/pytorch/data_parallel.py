"""Data parallelism that a compiler sees: each parameter's gradient is averaged over the data-
parallel ranks inside the traced backward, so `torch.compile(backend="symmflow")` compiles the
tensor-parallel and the data-parallel collectives of a training step into one graph (issue 38).

    mesh = init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
    hf_models.parallelize(model, "llama", "dtensor", mesh=mesh["tp"])   # TP inside a host
    data_parallel(model, mesh["dp"], mode="replicate")                  # DP across hosts
    model = torch.compile(model, backend="symmflow")

This is the pattern of torchtitan's SimpleFSDP (experiments/simple_fsdp), written here from its
description: every parameter gets a parametrization whose forward rewraps the tensor on the data-
parallel mesh and returns its local values with `grad_placements=[Partial("avg")]`, so that DTensor
turns the local gradient into the mean over the data-parallel ranks, in the backward, as a
functional collective that dynamo traces:
- "replicate" (DDP): every rank keeps the whole (tensor-parallel) parameter; the backward
  all-reduces its gradient (mean) over `dp_mesh`.
- "fully_shard" (FSDP, ZeRO-3): every rank keeps a slice of dim 0 of it (a DTensor on `dp_mesh`,
  Shard(0)); the forward all-gathers it, the backward reduce-scatters the gradient (mean), and
  the optimizer updates the slice.

DDP's and FSDP2's own hooks run outside the traced graph (dynamo skips them), so their
communication is not compiled; this module is how a program puts it into the compiled step.
Tensor-parallel parameters (DTensors on a `tp` mesh, from parallelize_module) keep their mesh and
placements: the data-parallel step works on their local shard and rewraps it. Use it after
tensor parallelism, before torch.compile, on every rank.
"""
from __future__ import annotations

import torch
import torch.nn.utils.parametrize as parametrize
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

MODES = ("replicate", "fully_shard")


class _DataParallelParam(torch.nn.Module):
    """The parametrization of one parameter: `original` -> the tensor the module computes with."""

    def __init__(self, dp_mesh, mode: str, like: torch.Tensor):
        super().__init__()
        self.dp_mesh, self.mode = dp_mesh, mode
        # How to rewrap the local values for the module (a tensor-parallel DTensor or a tensor).
        self.tp = (like.device_mesh, tuple(like.placements), like.shape, like.stride()) \
            if isinstance(like, DTensor) else None

    def forward(self, stored: torch.Tensor) -> torch.Tensor:
        if self.mode == "replicate":
            local = stored.to_local() if isinstance(stored, DTensor) else stored
            stored = DTensor.from_local(local, self.dp_mesh, [Replicate()], run_check=False)
        # replicate: nothing moves forward; fully_shard: the all-gather of the slices. Backward:
        # the mean over the ranks of dp_mesh (all-reduce, or reduce-scatter to the slices).
        local = stored.redistribute(self.dp_mesh, [Replicate()]).to_local(
            grad_placements=[Partial("avg")])
        if self.tp is None:
            return local
        mesh, placements, shape, stride = self.tp
        return DTensor.from_local(local, mesh, placements, run_check=False, shape=shape,
                                  stride=stride)


def data_parallel(model: torch.nn.Module, dp_mesh, mode: str = "replicate") -> torch.nn.Module:
    """Makes every parameter of `model` data-parallel over the 1-D mesh `dp_mesh`, in place."""
    if mode not in MODES:
        raise ValueError(f"data_parallel: mode '{mode}' is not one of {MODES}")
    if dp_mesh.ndim != 1:
        raise ValueError(f"data_parallel: dp_mesh must be 1-D (a mesh dimension such as "
                         f"mesh['dp']), not {dp_mesh.ndim}-D")
    for module in list(model.modules()):
        for name, param in list(module.named_parameters(recurse=False)):
            kept = _DataParallelParam(dp_mesh, mode, param)
            if mode == "fully_shard":  # the parameter becomes this rank's slice of dim 0
                local = param.to_local() if isinstance(param, DTensor) else param
                sliced = distribute_tensor(local.detach(), dp_mesh, [Shard(0)])
                setattr(module, name, torch.nn.Parameter(sliced, param.requires_grad))
            parametrize.register_parametrization(module, name, kept, unsafe=True)
    return model


def batch_slice(batch: torch.Tensor, dp_mesh) -> torch.Tensor:
    """This rank's share of dim 0 of a global batch (the data-parallel ranks split it evenly)."""
    n, i = dp_mesh.size(), dp_mesh.get_local_rank()
    if batch.shape[0] % n:
        raise ValueError(f"batch_slice: a batch of {batch.shape[0]} does not split over {n} "
                         "data-parallel ranks")
    step = batch.shape[0] // n
    return batch[i * step:(i + 1) * step]
