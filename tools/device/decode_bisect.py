"""Debugging aid (not a benchmark): the StaticCache prefill of the small test models on GPUs under
symmflow with each fusion skipped in turn, against eager; and, with --inductor-only, inductor
reduce-overhead's decode alone in a fresh process.

    torchrun --nproc-per-node 2 tools/device/decode_bisect.py [--inductor-only]
"""
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "pytorch"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python", "torch"))
os.environ.setdefault("SYMMFLOW_TEST_DEVICE", "cuda")
import hf_models  # noqa: E402
import symmflow.torch as sft  # noqa: E402
import decode_worker  # noqa: E402


def prefill(model, prompt):
    from transformers import StaticCache
    cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=15)
    out = model(input_ids=prompt, past_key_values=cache,
                cache_position=torch.arange(prompt.shape[1], device=prompt.device))
    keys = [layer.keys.clone() for layer in cache.layers] if hasattr(cache, "layers") else []
    return out.logits.float(), keys


def main():
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("cpu:gloo,cuda:nccl")
    sft.init()
    rank = dist.get_rank()
    dev = torch.device("cuda", torch.cuda.current_device())
    if "--inductor-only" in sys.argv:
        full = hf_models.make_model("llama", torch.float32).to(dev)
        prompt = hf_models.make_input_ids()[:1, :8].to(dev)
        with torch.no_grad():
            sharded = hf_models.sharded_copy(full, "llama", "dtensor")
            want, picks = decode_worker.decode(sharded, prompt, None)
            try:
                got, p2 = decode_worker.decode(torch.compile(sharded, mode="reduce-overhead"),
                                               prompt, picks[:-1])
                err = max((g - w).abs().max().item() for g, w in zip(got, want))
                print(f"BISECT rank {rank} inductor-ro alone: err {err:.2e} tokens {p2 == picks}")
            except Exception as e:  # noqa: BLE001
                print(f"BISECT rank {rank} inductor-ro alone raised: {type(e).__name__}: {e}")
        dist.destroy_process_group()
        return
    skips = ["", "raise_rms_norm", "raise_rotary", "fuse_pointwise", "raise_gqa",
             "raise_rms_norm,raise_rotary,raise_gqa,fuse_allreduce_rmsnorm,fuse_pointwise,"
             "decompose_collective_matmul"]
    for name in ("qwen3", "llama"):
        for dtype in (torch.float32, torch.bfloat16):
            full = hf_models.make_model(name, dtype).to(dev)
            prompt = hf_models.make_input_ids()[:1, :8].to(dev)
            with torch.no_grad():
                sharded = hf_models.sharded_copy(full, name, "dtensor")
                want, want_keys = prefill(sharded, prompt)
                for skip in skips:
                    os.environ["SYMMFLOW_SKIP_PASSES"] = skip
                    for graphs in ("1", "0"):
                        os.environ["SYMMFLOW_TORCH_CUDA_GRAPH"] = graphs
                        torch._dynamo.reset()
                        try:
                            got, keys = prefill(torch.compile(sharded, backend="symmflow"),
                                                prompt)
                            err = (got - want).abs().max().item()
                            kerr = [f"{(k - w).abs().max().item():.1e}"
                                    for k, w in zip(keys, want_keys)]
                            text = f"logits err {err:.2e} key caches {kerr}"
                        except Exception as e:  # noqa: BLE001
                            text = f"raised {type(e).__name__}: {str(e)[:300]}"
                        if rank == 0:
                            print(f"BISECT {name} {dtype} skip=[{skip}] graphs={graphs}: {text}",
                                  flush=True)
            os.environ.pop("SYMMFLOW_SKIP_PASSES", None)
            os.environ.pop("SYMMFLOW_TORCH_CUDA_GRAPH", None)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
