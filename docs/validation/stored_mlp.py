"""The MLP crossing times of the committed validation suites, per case and seed, as one CSV each:
``docs/validation/mlp_crossings_SUITE.csv`` (the suite's varied keys, ``seed``, ``mlp_t50``, ``mlp_t10``).

The trainings are deterministic (same config and seed → bit-identical run), so these numbers stand for the MLP runs
themselves: a new closure is scored against them with an ODE-only sweep (``rescore.py``), without training again.

- ``wide``, ``wide2`` (and any suite with a ``results.csv``): read from the sweep's own table.
- ``standard``: its committed summary (``standard_closures_target_basis.json``) stores per-seed ratios ODE/MLP, not
  the MLP times; the MLP time of a seed is recovered as ``t_ODE / ratio`` of the lazy ODE (or, where it did not cross,
  displacement) solved again (unchanged code; its crossing times are read off the solver's output grid, which depends on the
  horizon, so the recovered seed means agree with the stored MLP means to ~2e-4 relative, checked at 1e-3).

    python docs/validation/stored_mlp.py standard
    python docs/validation/stored_mlp.py wide --results docs/validation/wide_results_target_basis.csv
    python docs/validation/stored_mlp.py wide2 --results OUT/results.csv
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))   # this checkout's package, also when run as a script

from featureode.workflow.grid import load_grid, suite_path  # noqa: E402


def from_results(suite: str, results: Path, partial: bool = False) -> pd.DataFrame:
    """Per (case, seed) MLP t50/t10 from a sweep's results.csv (the same on every variant row; checked); ``partial``
    accepts a sweep that has not finished every run (the table then holds the finished ones only)."""
    grid = load_grid(suite_path(suite))
    df = pd.read_csv(results)
    keys = list(grid.keys)
    cols = keys + ["seed"]
    per = df.groupby(cols, dropna=False)[["mlp_t50", "mlp_t10"]]
    spread = per.nunique(dropna=False).max().max()
    if spread > 1:
        raise SystemExit(f"{results}: one (case, seed) has several MLP values")
    out = per.first().reset_index()
    expect = grid.size * len(grid.seeds)
    if len(out) != expect and not (partial and len(out) < expect):
        raise SystemExit(f"{results}: {len(out)} (case, seed) rows, the suite has {expect}")
    return out


def standard(summary: Path) -> pd.DataFrame:
    """Per (case, seed) MLP t50/t10 of the standard suite from its committed summary (see the module docstring)."""
    from featureode.kernel.theory import kernel_theory
    from featureode.ode.solve import solve_variant
    from featureode.workflow.sweeps import point_config

    grid = load_grid(suite_path("standard"))
    data = json.loads(summary.read_text())
    rows = []
    for point in grid.points():
        case = data[point.name]
        cfg = point_config(grid, point.name, 0)
        theory = kernel_theory(cfg, basis="target")
        solved = {name: solve_variant(theory, name, cfg.training.t_max) for name in ("lazy", "displacement")}
        for metric in ("t50", "t10"):
            # the first unchanged variant whose ODE crossed and whose stored ratio is known, seed by seed (the lazy
            # ODE may not reach t10 within the horizon where the MLP does)
            mlp: list[float | None] = [None] * len(case["seeds"])
            for name, traj in solved.items():
                t_ode = getattr(traj, metric)
                ratios = case["variants"][name][f"{metric}_ratio"]["values"]
                mlp = [m if m is not None else (None if r is None or t_ode is None else t_ode / r)
                       for m, r in zip(mlp, ratios)]
            known = [m for m in mlp if m is not None]
            stored = case["mlp"][metric]
            if known and stored is not None and len(known) == len(mlp):
                if not math.isclose(sum(known) / len(known), stored, rel_tol=1e-3):
                    raise SystemExit(f"{point.name}: recovered MLP {metric} mean {sum(known) / len(known)} "
                                     f"!= stored {stored}")
            for seed, m in zip(case["seeds"], mlp):
                rows.append({**point.values, "seed": seed, f"mlp_{metric}": m})
    df = pd.DataFrame(rows)
    keys = list(grid.keys) + ["seed"]
    return df.groupby(keys, dropna=False, sort=False).first().reset_index()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suite")
    p.add_argument("--results", type=Path, help="the suite's results.csv (wide, wide2, …)")
    p.add_argument("--out", type=Path, help="default: docs/validation/mlp_crossings_SUITE.csv")
    p.add_argument("--partial", action="store_true", help="accept a sweep that has not finished (fewer rows)")
    args = p.parse_args(argv)
    if args.suite == "standard" and args.results is None:
        df = standard(HERE / "standard_closures_target_basis.json")
    elif args.results is not None:
        df = from_results(args.suite, args.results, args.partial)
    else:
        raise SystemExit("give --results for this suite")
    out = args.out or HERE / f"mlp_crossings_{args.suite}.csv"
    df.to_csv(out, index=False, float_format="%.17g")
    print(f"wrote {out}: {len(df)} (case, seed) rows")


if __name__ == "__main__":
    main()
