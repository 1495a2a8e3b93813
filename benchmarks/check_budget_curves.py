"""Regression check of the theory path across a speed-up (not a test: it compares the code against its own earlier
output). ``--save FILE`` stores, for every registered closure and a set of configs, the kernel theory's numbers
(``λ_β(0)``, the Gram matrix, ``c_k``) and every curve (``t50``, ``t10``, ``L/L(0)``, ``f_β``); ``--compare FILE``
recomputes them and reports the largest relative differences: kernel numbers against ``--rtol-kernel`` (default
1e-10), curves against ``--rtol`` (default 1e-8, the "every curve unchanged" bar of issue 19).

The configs: the three budget cases of ``bench_budgets.py`` on a fixed fresh spectrum (exponent 1.50013, offset
3.00071) and variations: relu/erf/tanh, target and extended basis, σ_b = 0 and 0.5, d = 8/16/64.

Run:  PYTHONPATH=. python benchmarks/check_budget_curves.py --save before.npz   (then, after the change)
      PYTHONPATH=. python benchmarks/check_budget_curves.py --compare before.npz
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from featureode.config import load_config  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.solve import solve_variant  # noqa: E402
from featureode.ode.variants import Variant, closure_names  # noqa: E402

#: (tag, dim, basis, activation, bias_std, exponent, offset)
CASES = [("budget-target-d16", 16, "target", "relu", 0.5, 1.50013, 3.00071),
         ("budget-ext-d16", 16, "extended", "relu", 0.5, 1.50013, 3.00071),
         ("budget-ext-d64", 64, "extended", "relu", 0.5, 1.50013, 3.00071),
         ("erf-target-d16", 16, "target", "erf", 0.5, 1.2501, 2.0),
         ("tanh-ext-d16", 16, "extended", "tanh", 0.5, 0.9001, 3.0),
         ("relu-ext-d8-sb0", 8, "extended", "relu", 0.0, 1.7001, 3.0),
         ("erf-ext-d16-sb0", 16, "extended", "erf", 0.0, 1.5001, 3.0),
         ("tanh-target-d64", 64, "target", "tanh", 0.3, 1.1001, 4.0)]


def compute(closures: list[str], kernel_only: bool = False) -> tuple[dict[str, np.ndarray], dict[str, str], float]:
    out: dict[str, np.ndarray] = {}
    kind: dict[str, str] = {}
    cpu = 0.0
    for tag, dim, basis, act, sb, expo, off in CASES:
        cfg = load_config().replace(data={"dim": dim, "exponent": expo, "offset": off}, ode={"basis": basis},
                                    network={"activation": act, "bias_std": sb})
        t0 = time.process_time()
        theory = kernel_theory(cfg, with_gram=basis == "extended")
        for name, arr in (("lambda0", theory.lambda0("exact")), ("c", theory.c),
                          ("gram", theory.gram if theory.gram is not None else np.zeros(0))):
            out[f"{tag}/{name}"], kind[f"{tag}/{name}"] = np.asarray(arr, dtype=float), "kernel"
        t_min = min(cfg.training.t_min, cfg.training.t_max / 10)
        for cl in [] if kernel_only else closures:
            try:
                tr = solve_variant(theory, Variant(cl), cfg.training.t_max, cfg.ode.eigenvalues, basis=basis,
                                   rtol=cfg.ode.rtol, atol=cfg.ode.atol, n_points=cfg.ode.n_points, t_min=t_min,
                                   compile=True)
            except Exception as exc:  # noqa: BLE001 — a failing closure is recorded as such
                out[f"{tag}/{cl}/failed"], kind[f"{tag}/{cl}/failed"] = np.array([1.0]), "curve"
                print(f"  {tag} {cl}: {type(exc).__name__}: {str(exc)[:120]}", file=sys.stderr)
                continue
            curves: list[tuple[str, Any]] = [("t50", [np.nan if tr.t50 is None else tr.t50]),
                                             ("t10", [np.nan if tr.t10 is None else tr.t10]), ("loss", tr.loss),
                                             ("f", tr.f)]
            for name, arr in curves:
                out[f"{tag}/{cl}/{name}"], kind[f"{tag}/{cl}/{name}"] = np.asarray(arr, dtype=float), "curve"
        cpu += time.process_time() - t0
    return out, kind, cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", type=Path)
    g.add_argument("--compare", type=Path)
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--rtol-kernel", type=float, default=1e-10)
    ap.add_argument("--kernel-only", action="store_true", help="compare the kernel numbers only (no solves)")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    vals, kind, cpu = compute(list(closure_names()), args.kernel_only)
    print(f"CPU {cpu:.2f} s for {len(CASES)} configs")
    if args.save:
        np.savez(args.save, **vals)  # type: ignore[arg-type]  # numpy's stub types savez(**kwds) as its flag
        print(f"saved {len(vals)} arrays to {args.save}")
        return 0
    ref = np.load(args.compare)
    worst = {"kernel": 0.0, "curve": 0.0}
    bad = 0
    keys = set(ref.files) | set(vals)
    if args.kernel_only:
        keys = {k for k in keys if k in vals or k.rsplit("/", 1)[-1] in ("lambda0", "c", "gram")}
    for key in sorted(keys):
        if key not in vals or key not in ref.files:
            print(f"MISSING {key} ({'new' if key in vals else 'old'} only)")
            bad += 1
            continue
        arr, r = vals[key], ref[key]
        if arr.shape != r.shape:
            print(f"MISMATCH {key}: shape {arr.shape} vs {r.shape}")
            bad += 1
            continue
        if not np.array_equal(np.isnan(arr), np.isnan(r)):
            print(f"MISMATCH {key}: NaN pattern differs")
            bad += 1
            continue
        a, b = np.nan_to_num(arr), np.nan_to_num(r)
        scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 1e-300)
        err = float(np.max(np.abs(a - b))) / scale if b.size else 0.0
        k = kind[key]
        worst[k] = max(worst[k], err)
        if err > (args.rtol_kernel if k == "kernel" else args.rtol):
            print(f"MISMATCH {key}: relative {err:.3e}")
            bad += 1
    print(f"largest relative difference: kernel {worst['kernel']:.3e} (rtol {args.rtol_kernel:g}), curves "
          f"{worst['curve']:.3e} (rtol {args.rtol:g}); {bad} mismatches")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
