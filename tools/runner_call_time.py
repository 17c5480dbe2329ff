"""The host time of a training step's compiled calls, forward and backward, on this machine's CPU.

    PYTHONPATH=build/release/python python3 tools/runner_call_time.py [steps]

A transformers Llama of examples/pytorch/hf_models.py (the test size, world 1 over gloo, DTensor
style) trained with torch.compile(backend="symmflow") for `steps` steps (default 30); every call of
a PartitionRunner is timed (its whole __call__: the input checks, the plan's run, the outputs) and
the medians of the steps after the sixth are printed per role, with each runner's pointer and
checked calls (Note [pointer call], Note [strided inputs on the pointer path] in
python/symmflow/torch/_runner.py). At this size the plan's run is small, so the time is mostly
the host's; on a GPU the same Python runs before the GPU gets its work.
"""
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "pytorch"))
import hf_models  # noqa: E402

import symmflow.torch  # noqa: E402,F401  (registers the backend)
from symmflow.torch._runner import PartitionRunner  # noqa: E402


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=0, world_size=1)
    model = hf_models.sharded_copy(hf_models.make_model("llama", torch.float32).train(), "llama",
                                   "dtensor")
    ids = hf_models.make_input_ids(batch=1, seq=4)
    compiled = torch.compile(model, backend="symmflow")
    times: list[tuple[str, float]] = []
    runners: dict[str, PartitionRunner] = {}
    call = PartitionRunner.__call__

    def timed(self, *args):
        start = time.perf_counter()
        out = call(self, *args)
        times.append((self.report.role, time.perf_counter() - start))
        runners[self.report.role] = self
        return out

    PartitionRunner.__call__ = timed
    for step in range(steps):
        if step == 6:
            times.clear()
        compiled(ids, labels=ids).loss.backward()
    for role, runner in sorted(runners.items()):
        mine = [t for r, t in times if r == role]
        print(f"{role:9s} median {statistics.median(mine) * 1e6:8.1f} us over {len(mine)} calls; "
              f"pointer calls {runner.pointer_calls}, checked calls {runner.checked_calls}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
