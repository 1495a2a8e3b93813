"""Where the CPU time of issue 19's theory budgets goes: the kernel and the ``second_order`` / ``resummed``
closures on the cases of ``bench_budgets.py`` (fresh non-rational spectrum each repeat), split by stage.

Each stage is timed by wrapping the method that runs it (``time.process_time`` inclusive of what it calls, so nested
stages overlap: ``Averager.evaluate`` contains the ``QLaw.measure`` and ``_TiltedLaws.measures`` calls the
constants make). The closures' solves are timed whole. The wrappers add a few µs per call (~2000 calls per config),
so the totals run above ``bench_budgets.py``'s (by how much was not separated from the machine's own speed: compare
shares within one run). A profiling tool, not a budget check.

Run:  python benchmarks/profile_budgets.py [--repeat 3] [--out benchmarks/results/profile_budgets.md]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

# first: bench_budgets sets one BLAS/OpenMP/numba thread before NumPy is imported, as for the budgets themselves
from bench_budgets import BUDGETS, case_config, load, solve_closure  # noqa: E402, I001

import numpy as np  # noqa: E402

import featureode.kernel.averagers as AV  # noqa: E402
import featureode.kernel.growth as G  # noqa: E402
import featureode.kernel.initlaw as IL  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402

STAGES = [(IL.QLaw, "measure", "QLaw.measure (Talbot measures of |ŵ|²)"),
          (G._TiltedLaws, "measures", "_TiltedLaws.measures (tilted laws)"),
          (AV.MeanTable, "products", "MeanTable.products (E_b[Π m_j])"),
          (G.Averager, "evaluate", "Averager.evaluate (all averages)"),
          (G.Averager, "request_dot", "Averager.request_dot (recording)"),
          (G.Algebra, "lie_vector", "Algebra.lie_vector (flow algebra)"),
          (AV.QuadratureAverager, "value", "QuadratureAverager.value (Gram entries)")]
_acc: dict[str, float] = {}


def _wrap(cls: type, name: str, label: str) -> None:
    f = getattr(cls, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        c0 = time.process_time()
        try:
            return f(*args, **kwargs)
        finally:
            _acc[label] = _acc.get(label, 0.0) + time.process_time() - c0

    setattr(cls, name, timed)


def one(cfg: Any) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    _acc.clear()
    c0 = time.process_time()
    theory = kernel_theory(cfg, with_gram=cfg.ode.basis == "extended")
    out["kernel"] = {"total": time.process_time() - c0, **_acc}
    for v in ("second_order", "resummed"):
        _acc.clear()
        c0 = time.process_time()
        solve_closure(theory, cfg, v)
        out[v] = {"total": time.process_time() - c0, **_acc}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "profile_budgets.md")
    args = ap.parse_args()
    for cls, name, label in STAGES:
        _wrap(cls, name, label)
    rng = np.random.default_rng()
    lines = ["# Where the theory budgets' CPU time goes (`benchmarks/profile_budgets.py`)", "",
             f"{os.uname().machine}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}; load at the start: "
             f"{load()}. Median over {args.repeat} fresh spectra per case (after one untimed warm-up), ms of CPU. "
             "Stages are inclusive and nested (see the script's docstring); the wrappers add a few µs a call.", ""]
    for case in BUDGETS:
        print(f"{case} ...", flush=True)
        one(case_config(case, rng))
        runs = [one(case_config(case, rng)) for _ in range(args.repeat)]
        lines += [f"## {case}", "", "| part | stage | ms |", "|---|---|---:|"]
        for part in runs[0]:
            keys = list(dict.fromkeys(k for r in runs for k in r[part]))
            for k in keys:
                ms = 1e3 * float(np.median([r[part].get(k, 0.0) for r in runs]))
                lines.append(f"| {part} | {k} | {ms:.1f} |")
        lines.append("")
    lines.append(f"Load at the end: {load()}.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
