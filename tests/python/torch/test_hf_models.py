"""Models users have (issue 24): small random-initialised Hugging Face transformers models, made
tensor-parallel with DTensor's parallelize_module, with transformers' own tp_plan and in DTensor's
sequence-parallel form, compiled with torch.compile(backend="symmflow") under torchrun on CPU
processes (gloo), 2 and 4 ranks, f32 and bf16.

Each rank (hf_worker.py) compares the compiled logits with the sharded model's eager logits on
every element, and the sharded eager logits with the unsharded model's; the tests then check
what explain says: one symmflow partition, no boundary, no copy added by the compiler (input
copies included), every collective's input produced in symmetric memory; the MoE models at most
two partitions.
"""
from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("transformers")

from test_torchrun import check_all_ok, expected_runs, launch  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_worker.py")


def _whole(results):
    for r in results:
        assert r["partitions"] == 1, json.dumps(r)
        assert r["boundaries"] == [], json.dumps(r)
        assert r["copies_added"] == 0 and r["input_copies"] == 0, json.dumps(r)
        assert r["symm_inputs_produced"] is True, json.dumps(r)
        if not r["case"].startswith("gpt2"):  # rotary models: q's and k's rotate_half chains of
            # every layer are one fused::rotary_embedding each (Note [rotary from its
            # decomposition]); GPT-2 has learned positions, no rotary
            assert r["rotary_steps"] >= 2 and r["rotary_steps"] % 2 == 0, json.dumps(r)


# CI's time is spent where the checks differ (about 6 s a case at 2 ranks, 17 s at 4 on two
# cores): every model and form at 2 ranks in f32, bf16 for one case of each form (DTensor's
# plan, transformers' tp_plan, sequence parallel) and for GPT-2 (no rotary); at 4 ranks each form
# once and bf16 once. tools/hf_matrix.py runs every case at 2 and 4 ranks in both dtypes.
DENSE_2 = ["llama:dtensor:mask", "llama:tp_plan:mask", "llama:sp:mask", "qwen2:dtensor",
           "qwen3:tp_plan:mask", "mistral:dtensor:mask", "gpt2:dtensor:mask",
           "qwen2:dtensor@bf16", "qwen3:tp_plan:mask@bf16", "llama:sp:mask@bf16",
           "gpt2:dtensor:mask@bf16"]
DENSE_4 = ["llama:sp:mask", "mistral:tp_plan:mask", "gpt2:dtensor:mask",
           "qwen3:dtensor:mask@bf16"]


@pytest.mark.parametrize("nproc,cases", [(2, DENSE_2), (4, DENSE_4)])
def test_dense_models_are_one_partition_and_equal_eager(nproc, cases):
    rc, results, out = launch(nproc, ",".join(cases), "f32", timeout=900, worker=WORKER)
    check_all_ok(nproc, results, out, expected_runs(cases, "f32"))
    assert rc == 0, out[-4000:]
    _whole(results)


def test_moe_models_are_at_most_two_partitions_and_equal_eager():
    """Mixtral and Qwen3-MoE: the routing (topk, sort, histc, floor division) and transformers'
    grouped expert matmul are symmflow's too; each boundary, if any, names its op and reason."""
    cases = ["mixtral:dtensor:mask", "qwen3_moe:dtensor:mask"]
    rc, results, out = launch(2, ",".join(cases), "f32", timeout=600, worker=WORKER)
    check_all_ok(2, results, out, len(cases))
    assert rc == 0, out[-4000:]
    for r in results:
        assert r["partitions"] <= 2, json.dumps(r)
        assert all(" at node " in b and "(symmflow_" in b for b in r["boundaries"]), r
