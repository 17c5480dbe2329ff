"""One rank of the batch-invariance test (tests/python/torch/test_batch_invariance.py, issue 37
item 4; Note [batch-invariant products] in src/kernels/cpu/matmul.cpp).

    torchrun --nproc-per-node N batch_worker.py MODE:MODEL[,...] DTYPE[,DTYPE...]

MODE is `default` or `deterministic` (the backend option {"deterministic": True}, which holds for
the rest of the process: list the default cases first). A sequence's prompt, then STEPS one-token
steps with a StaticCache, under torch.compile(backend="symmflow") made tensor-parallel with
DTensor: once alone (batch 1) and once as the first of a batch of 8 (the others random), each
batch size compiled afresh (a fresh dynamo: static shapes both). The tokens are forced (the same
for both runs). Reported per case: whether sequence 0's logits are bit-identical alone and
batched at every step, the largest difference, and the largest error against eager alone.
SYMMFLOW_TEST_DEVICE=cuda runs each rank on its GPU (`bash tools/device/sf.sh batch`).
"""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))

import hf_models  # noqa: E402
from worker import run_cases  # noqa: E402

DEVICE = os.environ.get("SYMMFLOW_TEST_DEVICE", "cpu")
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 5e-2}
PROMPT, STEPS, BATCH = 8, 4, 8


def device() -> torch.device:
    if DEVICE != "cuda":
        return torch.device("cpu")
    return torch.device("cuda", dist.get_rank() % torch.cuda.device_count())


def decode(model, prompts: torch.Tensor, forced: torch.Tensor) -> list:
    """Sequence 0's last logits after the prompt and after each forced token."""
    from transformers import StaticCache

    prompts, forced = prompts.to(device()), forced.to(device())
    batch = prompts.shape[0]
    cache = StaticCache(config=model.config, max_batch_size=batch,
                        max_cache_len=PROMPT + STEPS + 1)
    out = model(input_ids=prompts, past_key_values=cache,
                cache_position=torch.arange(PROMPT, device=device()))
    logits = [out.logits[0, -1].float().cpu()]
    for step in range(STEPS):
        pos = torch.tensor([PROMPT + step], device=device())
        out = model(input_ids=forced[:batch, step:step + 1], past_key_values=cache,
                    cache_position=pos, position_ids=pos.expand(batch, 1))
        logits.append(out.logits[0, -1].float().cpu())
    return logits


def run_case(mode: str, name: str, dtype: torch.dtype) -> dict:
    full = hf_models.make_model(name, dtype).to(device())
    g = torch.Generator().manual_seed(11)
    prompts = torch.randint(0, hf_models.VOCAB, (BATCH, PROMPT), generator=g)
    forced = torch.randint(0, hf_models.VOCAB, (BATCH, STEPS), generator=g)
    options = {"deterministic": True} if mode == "deterministic" else None
    with torch.no_grad():
        sharded = hf_models.sharded_copy(full, name, "dtensor")
        want = decode(sharded, prompts[:1], forced)
        runs = {}
        for batch in (1, BATCH):
            torch._dynamo.reset()
            compiled = torch.compile(sharded, backend="symmflow", options=options)
            runs[batch] = decode(compiled, prompts[:batch], forced)
    alone, batched = runs[1], runs[BATCH]
    identical = all(torch.equal(a, b) for a, b in zip(alone, batched))
    diff = max((a - b).abs().max().item() for a, b in zip(alone, batched))
    scale = max(max(w.abs().max().item() for w in want), 1.0)
    err = max((a - w).abs().max().item() for a, w in zip(alone, want))
    ok = err <= TOLERANCE[dtype] * scale and (identical or mode != "deterministic")
    return {"case": f"{mode}:{name}", "dtype": str(dtype).split(".")[-1],
            "rank": dist.get_rank(), "world": dist.get_world_size(), "ok": ok,
            "identical": identical, "max_diff": diff, "max_err": err}


def main() -> int:
    def one(case, dtype_name):
        mode, name = case.split(":")
        return run_case(mode, name, DTYPES[dtype_name])
    return run_cases(one, DEVICE, "30")


if __name__ == "__main__":
    sys.exit(main())
