"""One rank of the KV-cache decode tests (tests/python/torch/test_decode.py, issue 37 item 1).

    torchrun --nproc-per-node N decode_worker.py MODEL:STYLE[:after][,...] DTYPE[,DTYPE...]

For every model (examples/pytorch/hf_models.py) made tensor-parallel: a prompt of 8 tokens, then 6
greedy one-token steps with transformers' StaticCache (each step passes cache_position and
position_ids, as generate does), eagerly and under torch.compile(backend="symmflow") with caches of
their own; then transformers' `generate` (greedy, static cache) with the model's forward compiled,
against eager's generate. The compiled run is fed eager's tokens (a near-tie of a random model must
not derail the comparison); every step's logits are compared on every element and the tokens each
would pick are recorded. explain's facts of every graph compiled (the prefill's and the decode
step's): partitions, boundaries with their reasons, compiler-added copies (kind and bytes), and the
KV-cache writes made in place (Note [the KV cache in place] in _fx_state.py). One `RESULT {json}`
line per case, also appended to $SYMMFLOW_TEST_RESULTS/rank<r>.jsonl.

SYMMFLOW_TEST_DEVICE=cuda runs it on GPUs, one a process (tools/device/sf.sh decode). A case
ending in `:after` then decodes again in the same processes under symmflow's reduce-overhead,
inductor's reduce-overhead and eager, in that order (issue 37: inductor's CUDA graphs crashed
after symmflow's once), each compared with the first eager decode.
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

import symmflow.torch as sft  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 5e-2}
PROMPT, STEPS = 8, 6
DEVICE = os.environ.get("SYMMFLOW_TEST_DEVICE", "cpu")


def device() -> torch.device:
    if DEVICE == "cpu":
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def decode(model, prompt: torch.Tensor, forced: list | None):
    """The prompt, then STEPS one-token steps with a StaticCache; returns every step's last
    logits and the greedy tokens. `forced`: the tokens to feed instead of its own picks."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=PROMPT + STEPS + 1)
    dev = prompt.device
    out = model(input_ids=prompt, past_key_values=cache,
                cache_position=torch.arange(PROMPT, device=dev))
    logits = [out.logits[:, -1].float()]
    picks = [int(logits[-1].argmax(-1))]
    for step in range(STEPS):
        token = forced[step] if forced is not None else picks[-1]
        pos = torch.tensor([PROMPT + step], device=dev)
        out = model(input_ids=torch.tensor([[token]], device=dev), past_key_values=cache,
                    cache_position=pos, position_ids=pos.unsqueeze(0))
        logits.append(out.logits[:, -1].float())
        picks.append(int(logits[-1].argmax(-1)))
    return logits, picks


def generated(model, prompt: torch.Tensor) -> list:
    """The new tokens of transformers' `generate` (greedy, a static cache, as serving runs it)."""
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=STEPS,
                         do_sample=False, cache_implementation="static",
                         pad_token_id=model.config.pad_token_id or 0)
    return out[0, prompt.shape[1]:].tolist()


def decoded_after(sharded, prompt, want, eager_picks) -> dict:
    """Issue 37: after symmflow's decode, the same model decoded in the same processes by
    symmflow's reduce-overhead, then inductor's reduce-overhead, then eager: each one's largest
    error against the first eager decode and whether it picked eager's tokens."""
    found = {}
    for label, make in (("symmflow-ro", lambda: torch.compile(sharded, backend="symmflow",
                                                              mode="reduce-overhead")),
                        ("inductor-ro", lambda: torch.compile(sharded, mode="reduce-overhead")),
                        ("eager", lambda: sharded)):
        torch._dynamo.reset()
        try:
            got, picks = decode(make(), prompt, eager_picks[:-1])
        except Exception as e:  # noqa: BLE001 - the next one still runs; reported as failed
            found[label] = {"max_err": float("inf"), "tokens_equal": False,
                            "error": f"{type(e).__name__}: {str(e)[:400]}"}
            continue
        found[label] = {"max_err": max((g - w).abs().max().item() for g, w in zip(got, want)),
                        "tokens_equal": picks == eager_picks}
    if prompt.is_cuda:
        torch.cuda.synchronize()
    return found


def run_case(name: str, style: str, dtype: torch.dtype, others: bool = False) -> dict:
    full = hf_models.make_model(name, dtype).to(device())
    prompt = hf_models.make_input_ids()[:1, :PROMPT].to(device())
    with torch.no_grad():
        sharded = hf_models.sharded_copy(full, name, style)
        want, eager_picks = decode(sharded, prompt, None)
        torch._dynamo.reset()
        before = len(sft.reports())
        got, picks = decode(torch.compile(sharded, backend="symmflow"), prompt, eager_picks[:-1])
        after = len(sft.reports())
        # generate with the compiled forward (its own sharded copy: forward is replaced). Its
        # cache has another length than decode()'s: a fresh dynamo, or the recompile would make
        # that dim dynamic (docs/pytorch.md, "Decoding")
        eager_generated = generated(sharded, prompt)
        torch._dynamo.reset()
        served = hf_models.sharded_copy(full, name, style)
        served.forward = torch.compile(served.forward, backend="symmflow")
        compiled_generated = generated(served, prompt)
        generate_reports = sft.reports()[after:]
        later = decoded_after(sharded, prompt, want, eager_picks) if others else {}
    scale = max(max(w.abs().max().item() for w in want), 1.0)
    err = max((g - w).abs().max().item() for g, w in zip(got, want))
    reports = sft.reports()[before:after]
    tol = TOLERANCE[dtype] * scale
    return {"case": f"{name}:{style}" + (":after" if others else ""),
            "dtype": str(dtype).split(".")[-1], "device": str(device()),
            "rank": dist.get_rank(), "world": dist.get_world_size(), "max_err": err,
            "tol": tol, "ok": err <= tol and all(v["max_err"] <= tol for v in later.values()),
            "after": later,
            "tokens_equal": picks == eager_picks, "eager_tokens": eager_picks, "tokens": picks,
            "generate_equal": compiled_generated == eager_generated,
            "eager_generated": eager_generated, "generated": compiled_generated,
            "generate_partitions": [r.partition_count for r in generate_reports],
            "generate_boundaries": [list(r.boundaries) for r in generate_reports],
            "graphs": len(reports),
            # Note [inference without AOT's wrappers]: "taken", or why AOT's wrappers stayed
            "direct_call": [r.direct_call for r in reports],
            "partitions": [r.partition_count for r in reports],
            "boundaries": [list(r.boundaries) for r in reports],
            "copies_added": [r.copies_added() for r in reports],
            "copies": [[(c["kind"], c["bytes"]) for p in r.partitions for c in p.copies()]
                       for r in reports],
            # KV-cache writes in place, and those left functional (a copy each), per graph
            "cache_writes_in_place": [sum(p.explain_text.count(" aten::index_put_ ")
                                          for p in r.partitions) for r in reports],
            "cache_writes_copied": [sum(p.explain_text.count("functional<aten::index_put_>")
                                        for p in r.partitions) for r in reports]}


def main() -> int:
    def one(case, dtype_name):
        name, style, *rest = case.split(":")
        return run_case(name, style, DTYPES[dtype_name], others=rest == ["after"])
    return run_cases(one, DEVICE, "30")


if __name__ == "__main__":
    sys.exit(main())
