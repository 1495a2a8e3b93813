"""Issue 14's closure scores from a sweep's ``results.csv``: per variant, the share of cases whose seed-mean t50 AND
t10 ratios (ODE/MLP, test loss) lie within ±10% and within ±20% of 1, and the worst case.

A case is one point of the grid (all its seeds); a ratio that is missing for some seed (a curve that ends before it
crosses: the ratio is only bounded) makes the case count as outside both bands, and the table says how many such
cases there are. No constant is fitted: these are the suites' own numbers.

    python docs/validation/closure_scores.py OUT/results.csv [OUT2/results.csv ...] [--title TEXT] [--out FILE.md]
                                             [--query PANDAS_QUERY]
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

KEYS = {"seed", "variant", "t50", "t10", "t50_ratio", "t10_ratio", "log_rms", "mlp_t50", "mlp_t10", "t_max", "status",
        "run"}


def scores(results: pd.DataFrame) -> pd.DataFrame:
    """One row per variant: cases, within ±10% / ±20% on both ratios, undecided cases, the worst case."""
    case_keys = [c for c in results.columns if c not in KEYS]
    rows = []
    for variant, sub in results.groupby("variant"):
        n = n10 = n20 = missing = 0
        worst, worst_case = -1.0, ""
        for key, case in sub.groupby(case_keys, dropna=False):
            n += 1
            if case["t50_ratio"].isna().any() or case["t10_ratio"].isna().any() or (case["status"] != "ok").any():
                missing += 1
                continue
            r50, r10 = float(case["t50_ratio"].mean()), float(case["t10_ratio"].mean())
            dev = max(abs(r50 - 1), abs(r10 - 1))
            n10 += dev <= 0.10
            n20 += dev <= 0.20
            if dev > worst:
                worst = dev
                label = ", ".join(f"{k}={v}" for k, v in zip(case_keys, key if isinstance(key, tuple) else (key,)))
                worst_case = f"{label}: {r50:.3g} / {r10:.3g}"
        rows.append({"variant": variant, "cases": n, "within ±10%": f"{n10}/{n} ({100 * n10 / n:.0f}%)",
                     "within ±20%": f"{n20}/{n} ({100 * n20 / n:.0f}%)", "no ratio (bounded)": missing,
                     "worst case (t50 / t10 ratio)": worst_case if not math.isinf(worst) else "—"})
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, title: str) -> str:
    """The score table as Markdown."""
    cols = list(table.columns)
    lines = [f"### {title}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for _, r in table.iterrows()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="+", type=Path, help="results.csv of one or more sweeps (concatenated)")
    p.add_argument("--title", default="closure scores", help="heading of the table")
    p.add_argument("--out", type=Path, help="write the Markdown here (default: print it)")
    p.add_argument("--query", help="score only the rows this pandas query selects, e.g. "
                   "'`network.richness` <= 0.01' (the lazy cases)")
    args = p.parse_args(argv)
    results = pd.concat([pd.read_csv(f) for f in args.results], ignore_index=True)
    if args.query:
        results = results.query(args.query)
        if results.empty:
            raise SystemExit(f"--query {args.query!r} selects no row")
    table = scores(results)
    text = markdown(table, args.title)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
