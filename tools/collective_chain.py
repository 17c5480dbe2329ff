"""Writes a graph of N chained one-shot all-reduces of a 4-element f32 tensor: the CPU run path's
per-step cost with nothing else in it (Note [prepared collectives] in
src/kernels/cpu/collectives/args.hpp, docs/architecture.md).

    python3 tools/collective_chain.py 64 > /tmp/ar64.sf
    build/release/bin/symmflow run /tmp/ar64.sf --ranks 1 --iters 5000
"""
import sys


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    if n < 1:
        sys.exit("collective_chain.py: N must be at least 1")
    lines = ["group tp", f"graph ar{n}(x: f32[4]) {{", "  h0 = aten::mul(x, 2.0)"]
    lines += [f'  h{i + 1} = symm_mem::one_shot_all_reduce(h{i}, "sum", "tp")' for i in range(n)]
    lines += [f"  return h{n}", "}"]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
