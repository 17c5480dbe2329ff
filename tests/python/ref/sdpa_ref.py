"""Reference values for tests/kernels/attention_test.cpp (TorchGolden), from torch eager.

Contract: prints a C++ initializer list of the f64 output of
torch.nn.functional.scaled_dot_product_attention on deterministic inputs
(element n of a tensor is sin(0.37 * n + offset)), causal, grouped KV heads 4:1 (enable_gqa),
q [1, 4, 3, 5], k/v [1, 1, 6, 5] (L < S: the causal mask is top-left aligned), and the same
for L > S (q [1, 2, 6, 3], k/v [1, 1, 4, 3], 2:1). The C++ test builds the same inputs, so it
checks the op's semantics against torch without needing Python at test time.
Run: python3 tests/python/ref/sdpa_ref.py
"""
import math

import torch


def pattern(shape: tuple[int, ...], offset: float) -> torch.Tensor:
    n = math.prod(shape)
    return torch.sin(torch.arange(n, dtype=torch.float64) * 0.37 + offset).reshape(shape)


def case(q_shape, kv_shape) -> list[float]:
    q = pattern(q_shape, 0.0)
    k = pattern(kv_shape, 1.0)
    v = pattern(kv_shape, 2.0)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True)
    return out.flatten().tolist()


for name, qs, kvs in (("kTorchShort", (1, 4, 3, 5), (1, 1, 6, 5)),
                      ("kTorchLong", (1, 2, 6, 3), (1, 1, 4, 3))):
    values = ", ".join(f"{x:.17g}" for x in case(qs, kvs))
    print(f"const double {name}[] = {{{values}}};")
