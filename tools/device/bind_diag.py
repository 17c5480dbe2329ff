"""Device diagnostic: per training step, each compiled partition's outputs bound vs copied."""
import os, sys, time
import torch, torch.distributed as dist
sys.path.insert(0, "examples/pytorch")
import hf_models
import symmflow.torch as sft
from symmflow.torch import _runner
log = []
orig = _runner.Runner.__call__ if hasattr(_runner, "Runner") else None
cls = [c for c in vars(_runner).values() if isinstance(c, type) and hasattr(c, "_restride")][0]
orig = cls.__call__
def call(self, *a):
    out = orig(self, *a)
    st = self.session.last_stats
    log.append((id(self) % 1000, st["outputs_bound"], st["output_copies"]))
    return out
cls.__call__ = call
dist.init_process_group("nccl")
torch.cuda.set_device(0)
full = hf_models.make_model("llama", torch.bfloat16, size="4096", max_positions=1024).cuda().train()
ids = hf_models.make_input_ids(batch=4, seq=512).cuda()
model = torch.compile(hf_models.sharded_copy(full, "llama", "dtensor"), backend="symmflow")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
for step in range(12):
    torch.cuda.synchronize(); t = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    torch.cuda.synchronize()
    print(step, f"{(time.perf_counter()-t)*1e3:.2f} ms", log[-2:], flush=True)
dist.destroy_process_group()
