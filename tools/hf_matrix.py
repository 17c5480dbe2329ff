"""Every model case of issue 24 at the given CPU process counts, f32 and bf16, as a markdown table.

    PYTHONPATH=build/release/python python3 tools/hf_matrix.py 2,4 [cases]

Runs tests/python/torch/hf_worker.py under torchrun (as test_hf_models.py does) once per case and
world size, and prints per case and dtype what rank 0's explain says (partitions, boundaries,
copies the compiler added, partition inputs copied, whether every collective's input is produced
in symmetric memory), the largest difference of the compiled logits from the sharded model run
eagerly over all ranks, that of the sharded eager model from the unsharded one, the first call's
seconds (compile included), whether every rank was within tolerance and the collectives explain
lists. A few minutes per world size on two cores.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(HERE, "..", "tests", "python", "torch")
sys.path.insert(0, TESTS)
from test_torchrun import launch  # noqa: E402

CASES = ["llama:dtensor:mask", "llama:tp_plan:mask", "llama:sp:mask", "qwen2:dtensor:mask",
         "qwen2:tp_plan:mask", "qwen3:dtensor:mask", "qwen3:tp_plan:mask", "mistral:dtensor:mask",
         "mistral:tp_plan:mask", "gpt2:dtensor:mask", "mixtral:dtensor:mask",
         "qwen3_moe:dtensor:mask"]


def short(collectives):
    """explain's collective ops without their namespace: "fused_all_reduce_add_rms_norm, ..."."""
    return ", ".join(c.split("::")[-1] for c in collectives or []) or "-"


def main():
    worlds = [int(a) for a in (sys.argv[1] if len(sys.argv) > 1 else "2,4").split(",")]
    cases = sys.argv[2].split(",") if len(sys.argv) > 2 else CASES
    rows = []
    for nproc in worlds:
        for case in cases:
            start = time.time()
            rc, results, out = launch(nproc, case, "f32,bf16", timeout=900,
                                      worker=os.path.join(TESTS, "hf_worker.py"))
            by = {}
            for r in results:
                by.setdefault(r["dtype"], []).append(r)
            if not results:
                rows.append(f"| {case} | {nproc} | - | no result (exit {rc}) | | | | | | | | NO | |")
            for dt, rs in sorted(by.items()):
                r0 = min(rs, key=lambda r: r["rank"])
                ok = all(r["ok"] for r in rs) and len(rs) == nproc
                rows.append(
                    f"| {case} | {nproc} | {dt} | {r0.get('partitions')} | "
                    f"{len(r0.get('boundaries') or [])} | {r0.get('copies_added')} | "
                    f"{r0.get('input_copies')} | {r0.get('symm_inputs_produced')} | "
                    f"{max(r['max_err'] for r in rs):.3g} (tol {r0['tol']:.3g}) | "
                    f"{max(r['sharded_err'] for r in rs):.3g} | {r0.get('first_call_s', 0):.1f} | "
                    f"{'yes' if ok else 'NO'} | {short(r0.get('collectives'))} |")
            print(f"{case} at {nproc}: {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    print("| case | processes | dtype | partitions | boundaries | copies added | input copies | "
          "collective inputs symmetric | compiled vs eager, max | sharded vs unsharded eager | "
          "first call, s | equal | collectives |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
