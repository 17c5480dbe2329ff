"""symmflow's cuda attention kernel beside PyTorch's scaled_dot_product_attention (issue 27, item 3:
attention for decode and short prefill near memory speed).

    torchrun --nproc-per-node 1 tools/device/attention_bench.py [--calls 20]

Shapes (bf16, head dim 128, grouped-query heads as the decoder layer's): the 16-token prefill of
the decoder layer at TP2 and at world 1 (causal), and decode (one query row) over 1024 to 32768
keys. symmflow's side is `F.scaled_dot_product_attention` compiled by the symmflow backend without
its own graph; PyTorch's is the same call eager (its flash / cuDNN / efficient kernels, whichever it
picks). Both are captured `--calls` times into one CUDA graph (graph_timing.time_graph); the
figure is µs a call, beside GB/s of q, k, v and the output moved. Every result is checked against
PyTorch's (bf16 tolerance). Prints a table last.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import symmflow.torch  # noqa: E402,F401  (registers the backend)
from graph_timing import join_gpu_world, time_graph  # noqa: E402

SHAPES = [  # (label, heads, kv heads, queries, keys, causal)
    ("prefill 16, TP2", 16, 4, 16, 16, True),
    ("prefill 16, world 1", 32, 8, 16, 16, True),
    ("prefill 128, TP2", 16, 4, 128, 128, True),
    ("decode, 1024 keys", 16, 4, 1, 1024, False),
    ("decode, 4096 keys", 16, 4, 1, 4096, False),
    ("decode, 32768 keys", 16, 4, 1, 32768, False),
]


def attend(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=20)
    args = p.parse_args()
    _, _, device = join_gpu_world()
    rows = []
    gen = torch.Generator(device=device).manual_seed(0)
    for label, heads, kv_heads, queries, keys, causal in SHAPES:
        def rand(h, n):
            return torch.randn(1, h, n, 128, device=device, dtype=torch.bfloat16, generator=gen)

        q, k, v = rand(heads, queries), rand(kv_heads, keys), rand(kv_heads, keys)
        torch._dynamo.reset()
        compiled = torch.compile(attend, backend="symmflow", options={"cuda_graph": False},
                                 dynamic=False)
        want = attend(q, k, v, causal)
        got = compiled(q, k, v, causal)
        err = (got.float() - want.float()).abs().max().item()
        ours = time_graph(lambda: compiled(q, k, v, causal), calls=args.calls)
        theirs = time_graph(lambda: attend(q, k, v, causal), calls=args.calls)
        moved = 2 * (2 * q.numel() + k.numel() + v.numel())
        rows.append((label, ours, theirs, moved / ours / 1e3, moved / theirs / 1e3, err))
    print(f"\nattention_bench on {torch.cuda.get_device_name(device)}, torch {torch.__version__}: "
          f"bf16, head dim 128, µs a call (a CUDA graph of {args.calls} calls, median)")
    print(f"  {'shape':<22}{'symmflow':>10}{'PyTorch':>10}{'ratio':>8}{'GB/s ours':>11}"
          f"{'GB/s torch':>12}{'max err':>9}")
    for label, ours, theirs, bw_ours, bw_theirs, err in rows:
        print(f"  {label:<22}{ours:10.2f}{theirs:10.2f}{theirs / ours:7.2f}x{bw_ours:11.0f}"
              f"{bw_theirs:12.0f}{err:9.3f}")
        if err > 0.05:
            print(f"  FAILED {label}: max error {err}")


if __name__ == "__main__":
    main()
