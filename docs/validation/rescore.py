"""Score closures on a committed validation suite without training again: an ODE-only sweep of the suite's grid
with the chosen variants and basis, joined with the suite's stored MLP crossing times
(``docs/validation/mlp_crossings_SUITE.csv``, written by ``stored_mlp.py``), then scored by ``closure_scores.py``.

The ODE does not depend on the training seed, so it is solved once per case (seed 0) and compared with every seed's
MLP run; its horizon ``t_max = "auto"`` is the suite's own rule (lazy and displacement ODEs only), hence the same as
in the trained sweep. A variant that fails on a case (e.g. a state that became non-finite) is counted outside both
bands and listed as a failure.

    python docs/validation/rescore.py SUITE --variants lazy,displacement,second_order --basis target \
        --out OUT [--jobs 2] [--title TEXT] [--md FILE.md]
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

from closure_scores import markdown, scores  # noqa: E402

from featureode.workflow.grid import load_grid, suite_path  # noqa: E402


def ode_grid(suite: str, variants: list[str], basis: str):
    """The suite's grid with ``ode.variants``/``ode.basis`` set and a single seed."""
    grid = load_grid(suite_path(suite))
    base = {sec: dict(vals) for sec, vals in grid.base.items()}
    base.setdefault("ode", {})["variants"] = list(variants)
    base["ode"]["basis"] = basis
    return dataclasses.replace(grid, base=base, seeds=(0,))


def rescored(suite: str, ode_results: pd.DataFrame, mlp_csv: "Path | None" = None) -> pd.DataFrame:
    """``ode_results`` (an ODE-only results table, seed 0) joined with the stored MLP times of every seed
    (``mlp_csv``, default ``mlp_crossings_SUITE.csv``; a partial table scores the cases it has); the columns of a
    trained sweep's results.csv (ratios ODE/MLP recomputed)."""
    mlp = pd.read_csv(mlp_csv or HERE / f"mlp_crossings_{suite}.csv")
    keys = [c for c in mlp.columns if c not in ("seed", "mlp_t50", "mlp_t10")]
    ode = ode_results.drop(columns=[c for c in ("seed", "mlp_t50", "mlp_t10", "t50_ratio", "t10_ratio", "log_rms")
                                    if c in ode_results.columns])
    df = ode.merge(mlp, on=keys, how="inner", validate="many_to_many")
    n_cases = mlp[keys].drop_duplicates().shape[0]
    got = df[keys].drop_duplicates().shape[0]
    if got != n_cases:
        raise SystemExit(f"{suite}: ODE results cover {got} of the {n_cases} cases of the stored MLP table")
    df["t50_ratio"] = df["t50"] / df["mlp_t50"]
    df["t10_ratio"] = df["t10"] / df["mlp_t10"]
    df["log_rms"] = float("nan")
    return df


def failures(df: pd.DataFrame) -> pd.DataFrame:
    """Per variant, the cases whose ODE failed (status other than ok)."""
    keys = [c for c in df.columns if c.startswith(("network.", "target.", "data.", "training.", "ode."))]
    bad = df[df["status"] != "ok"].drop_duplicates(keys + ["variant"])
    return bad[["variant", *keys, "status"]]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suite")
    p.add_argument("--variants", required=True, help="comma-separated closure names")
    p.add_argument("--basis", choices=("target", "extended"), default="target")
    p.add_argument("--out", type=Path, required=True, help="folder of the ODE-only sweep")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--title", default=None)
    p.add_argument("--mlp", type=Path, default=None,
                   help="stored MLP crossings (default docs/validation/mlp_crossings_SUITE.csv)")
    p.add_argument("--md", type=Path, help="write the score table (and failures) as Markdown here")
    args = p.parse_args(argv)
    from featureode.workflow.executors import make_executor
    from featureode.workflow.sweeps import run_sweep

    grid = ode_grid(args.suite, args.variants.split(","), args.basis)
    executor = make_executor("local", args.jobs) if args.jobs > 1 else None
    run_sweep(grid, args.out, executor=executor, ode_only=True, yes=True)
    df = rescored(args.suite, pd.read_csv(args.out / "results.csv"), args.mlp)
    df.to_csv(args.out / "rescored.csv", index=False)
    title = args.title or f"{args.suite}, {args.basis} basis (ODE-only against the stored MLP runs)"
    text = markdown(scores(df), title)
    bad = failures(df)
    if len(bad):
        text += "\nFailed ODE solves (counted outside both bands):\n\n"
        text += "\n".join(f"- {r.variant}: " + ", ".join(f"{k}={r[k]}" for k in bad.columns[1:-1])
                          + f" — {r.status}" for _, r in bad.iterrows()) + "\n"
    if args.md:
        args.md.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
