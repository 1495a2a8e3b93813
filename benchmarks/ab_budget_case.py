"""One budget case of ``bench_budgets.py`` (kernel + the six closures, CPU) in the featureode of ``PYTHONPATH``, for
side-by-side runs of two trees in alternating fresh processes (the machine's speed drifts between runs):

    git worktree add /tmp/old REV
    for i in 1 2 3; do for tree in /tmp/old .; do
        TREE=$tree PYTHONPATH=$tree OPENBLAS_NUM_THREADS=1 python benchmarks/ab_budget_case.py "target basis, d = 16 (default config)" $i
    done; done

Prints the median total and kernel CPU over ``REPS`` (default 25) fresh spectra, after one untimed call (numba code
compiled or loaded).
"""
from __future__ import annotations

import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.environ.get("TREE", "."), "benchmarks"))
# first: bench_budgets sets one BLAS/OpenMP/numba thread before NumPy is imported, as for the budgets themselves
import bench_budgets as B  # noqa: E402, I001

import numpy as np  # noqa: E402

import featureode  # noqa: E402

CLOSURES = list(B.closure_names())   # every registered closure, as bench_budgets times them


def main() -> int:
    name = sys.argv[1] if len(sys.argv) > 1 else "target basis, d = 16 (default config)"
    if name not in B.BUDGETS:
        raise SystemExit(f"error: unknown case {name!r}; one of: {', '.join(B.BUDGETS)}")
    rng = np.random.default_rng(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    B.kernel_and_closures(B.case_config(name, rng), CLOSURES)
    runs = [B.kernel_and_closures(B.case_config(name, rng), CLOSURES) for _ in range(int(os.environ.get("REPS", "25")))]
    total = statistics.median(sum(r[k] for k in ["kernel", *CLOSURES]) for r in runs)
    kernel = statistics.median(r["kernel"] for r in runs)
    print(f"{featureode.__file__}: {name}: total {total * 1e3:.2f} ms, kernel {kernel * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
