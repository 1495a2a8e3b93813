"""The loss outside the basis that the mean-field flow itself predicts: ``meanfield`` against ``meanfield+tail``.

The MLP's test loss is ``E[(f − y)²]`` over every Hermite mode; an ODE on a basis sees only the basis' modes. On the
wide suite's base case the network carries 0.014 of ``L(0)`` outside the extended basis at its t10
(``out_of_basis.md``). ``ReducedFlow(tail=True)`` adds the loss on every mode in the target's directions T that the
basis leaves out: ``‖P_T f − y‖²`` by a Gauss–Hermite rule on ``z_T`` (the output averaged over the coordinates
outside T), minus the basis' part (:meth:`featureode.ode.meanfield.ReducedFlow.tail_loss`). Nothing is fitted: the
same flow, the same neurons, a fuller loss. Where two neighbouring rules disagree by more than
``TAIL_TOL`` the run stops there (its curve so far is kept and scored; a crossing it did not reach is "—").

Ratios are per seed (flow/MLP), then averaged over the case's seeds, as ``closure_scores.py`` does; each flow runs
to a loss of 0.05 or 3× the latest seed's t10 (6× its t50 without one), at most 3000 RK4 steps.

Run:  python docs/validation/tail_loss.py --suite wide [--cases 0,1] [--md FILE]
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from escape_oracle import case_runs  # noqa: E402
from multidriver_oracle import (case_config, case_label, crossing, fmt, picked_cases, stored_horizon,  # noqa: E402
                                suite_parser, write_report)
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import MeanFieldError, ReducedFlow  # noqa: E402


def main() -> int:
    args = suite_parser(__doc__.splitlines()[0]).parse_args()
    rows: list[list[str]] = []
    scores: dict[str, list] = {"`meanfield`": [], "`meanfield+tail`": []}
    for i, case in picked_cases(args):
        label = case_label(*case)
        seeds = [(m50, m10) for _, m50, m10 in case_runs(args.suite, case)]
        if not seeds or not any(math.isfinite(m50) for m50, _ in seeds):
            print(f"{label}: skipped (no stored run reached t50)", file=sys.stderr, flush=True)
            continue
        start = time.time()
        theory = kernel_theory(case_config(case), with_gram=True)
        t_max = stored_horizon(seeds)
        note, tail_at = "", math.nan
        try:
            flow = ReducedFlow.from_theory(theory, tail=True)
            ts, fs, error = flow.run(t_max, stop_loss=0.05, max_steps=3000)
            curves = {"`meanfield+tail`": (ts, flow.loss(ts, fs)),
                      "`meanfield`": (ts, ((flow.v_all - fs) ** 2).sum(1) / (flow.v_all**2).sum())}
            if error:
                note = ("tail not resolved from t = " + error.split("stopped at t = ")[1].split(":")[0]
                        if "not resolved" in error else error)
                if "not resolved" in error:   # the same flow without the tail runs on
                    plain = ReducedFlow.from_theory(theory)
                    ts0, fs0, _ = plain.run(t_max, stop_loss=0.05, max_steps=3000)
                    curves["`meanfield`"] = (ts0, plain.loss(ts0, fs0))
            pairs = {name: [(crossing(t, loss, 0.5) / m50, crossing(t, loss, 0.1) / m10) for m50, m10 in seeds]
                     for name, (t, loss) in curves.items()}
            ratios = {name: tuple(float(np.mean(x)) for x in zip(*v)) for name, v in pairs.items()}
            m10s = [m10 for _, m10 in seeds if math.isfinite(m10)]
            if m10s and flow.tail_path[0][-1] >= np.mean(m10s):
                tail_at = float(np.interp(np.mean(m10s), *flow.tail_path))
        except MeanFieldError as exc:
            ratios = {name: (math.nan, math.nan) for name in scores}
            note = f"failed: {exc}"
        if all(math.isfinite(m10) for _, m10 in seeds):
            for name in scores:
                scores[name].append(ratios[name])
        mean50 = float(np.nanmean([m50 for m50, _ in seeds]))
        crossed = any(math.isfinite(m10) for _, m10 in seeds)
        mean10 = float(np.nanmean([m10 for _, m10 in seeds])) if crossed else math.nan
        rows.append([f"{i}: {label}", f"{fmt(mean50)} / {fmt(mean10)}",
                     " / ".join(fmt(x) for x in ratios["`meanfield`"]),
                     " / ".join(fmt(x) for x in ratios["`meanfield+tail`"]),
                     "—" if not math.isfinite(tail_at) else f"{tail_at:.4f}", note])
        print(" | ".join(rows[-1]), f"({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    head = ["case", "MLP t50 / t10", "`meanfield` t50 / t10 ratio", "`meanfield+tail` t50 / t10 ratio",
            "tail at the MLP's t10 (of L(0))", "note"]
    write_report(head, rows, args.md, scores, counted="every stored run crossed both levels")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
