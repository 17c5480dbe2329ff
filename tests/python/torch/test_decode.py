"""KV-cache decode under symmflow (issue 37 item 1): transformers' Llama, Qwen3 and Mistral with a
StaticCache, made tensor-parallel with DTensor, a prompt then greedy one-token steps compiled with
torch.compile(backend="symmflow") on 2 CPU processes, and Llama and Mistral on 4 (the KV heads
split over four ranks, and the sliding window; CI's time) (decode_worker.py). The cache update
`cache[:, :, pos] = k` (index_put with None entries, Note [index lists with None] in
_fx_state.py) stays in symmflow and writes the caller's cache in place (Note [the KV cache in
place]): the prefill and the decode step each compile to one partition with no boundary and no
copy of the cache, and every step's logits equal eager's.
Mistral's sliding window too: its decode step's cache length is a Python int that changes every
step, a SymInt input with int arithmetic (Note [ints that change every call] in _fx_state.py).
"""
from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("transformers")

from test_torchrun import check_all_ok, expected_runs, launch  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decode_worker.py")


@pytest.mark.parametrize("nproc,cases", [
    (2, ["llama:dtensor", "qwen3:dtensor", "mistral:dtensor"]),
    (4, ["llama:dtensor", "mistral:dtensor"])])
def test_static_cache_decode_is_one_partition_and_equals_eager(nproc, cases):
    rc, results, out = launch(nproc, ",".join(cases), "f32", timeout=900, worker=WORKER)
    check_all_ok(nproc, results, out, expected_runs(cases, "f32"))
    assert rc == 0, out[-4000:]
    for r in results:
        assert r["graphs"] >= 2, json.dumps(r)  # the prefill's and the decode step's
        assert all(p == 1 for p in r["partitions"]), json.dumps(r)
        assert all(b == [] for b in r["boundaries"]), json.dumps(r)
        assert r["tokens_equal"], json.dumps(r)
        # every step after a graph's first called it without AOT autograd's runtime wrappers
        # (Note [inference without AOT's wrappers]): the DTensor shards unwrapped by the plan
        assert all(d == "taken" for d in r["direct_call"]), json.dumps(r)
        # transformers' generate with the compiled forward: eager's tokens, one partition a graph
        assert r["generate_equal"], json.dumps(r)
        assert r["generate_partitions"] and all(p == 1 for p in r["generate_partitions"]), \
            json.dumps(r)
        if r["case"].startswith("mistral"):
            # The sliding window's step rolls each layer's window (index_select, then the new
            # token into its last slot) and copies it into the cache, as eager's `copy_` does:
            # one write-back of the window per layer's K and V, nothing else.
            decode = r["copies"][-1]
            assert decode and all(k == "writeback" for k, _ in decode), json.dumps(r)
            assert len({b for _, b in decode}) == 1 and len(decode) % 2 == 0, json.dumps(r)
            assert r["copies"][0] == [], json.dumps(r)
            continue
        # No copy at all: the decode step writes each layer's K and V into the caller's cache in
        # place (Note [the KV cache in place]), and StaticCache's length counters
        # (`cumulative_length += n`) are advanced in the caller's tensors too (Note [counters in
        # place]: they were 8-byte write-backs).
        assert all(cs == [] for cs in r["copies"]), json.dumps(r)
        assert r["cache_writes_in_place"][-1] >= 2, json.dumps(r)  # K and V of every layer
        assert r["cache_writes_copied"][-1] == 0, json.dumps(r)
