"""The reduced per-neuron flow (variant ``meanfield``) on the wide suites: the exact multi-driver flow on a few coordinates per neuron.

``target_driven.md`` found that the neurons moved by the modes whose support lies in the target's directions ``T``
(the target and its companions) give the exact flow's loss within 0.01. With those drivers a neuron is
``(a, ŵ_T, b, C)``: the other coordinates of ``ŵ`` move as ``ŵ_i(0) e^{g_i C(t)}``. The package follows that flow
by a deterministic scrambled-Sobol' rule over the init law (:mod:`featureode.ode.meanfield`, whose docstring has the
derivation and the one approximation beyond the drivers, the Gamma law of ``Σ_{i∉T} ŵ_i(0)²``). This script runs
:class:`featureode.ode.meanfield.ReducedFlow` on every case of a suite, as ``multidriver_oracle.py`` runs the sampled
flow, and scores it against the stored MLP crossings beside ``rational``. The loss is ``Σ_{α∈S} R_α²/Σ v²`` on the
modes ``S`` it follows; the run stops at a loss of 0.05 or at 3× the MLP's t10. ``K(0)`` on ``S`` is checked
against ``kernel_theory``'s exact quadrature (largest deviation over the largest entry).

Run:  python docs/validation/reduced_flow.py --suite wide [--cases 0,1] [--m 12] [--check] [--md FILE]
(case numbers as in ``multidriver_oracle.py --suite``, 0-based; default every case of the suite).
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from escape_oracle import mlp_times  # noqa: E402
from multidriver_oracle import (case_config, case_label, crossing, fmt, picked_cases, ratio,  # noqa: E402
                                stored_horizon, suite_parser, write_report)
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import MeanFieldError, ReducedFlow  # noqa: E402
from featureode.ode.solve import solve_variant  # noqa: E402


def main() -> int:
    p = suite_parser(__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=12, help="2^m Sobol' init neurons (default 12: 4096)")
    p.add_argument("--check", action="store_true", help="also run with 2^(m+1) neurons (the rule's error)")
    p.add_argument("--h-max", type=float, default=5.0, help="largest RK4 step (the step is min(h_max, c/λ_max, …))")
    p.add_argument("--c", type=float, default=1.5, help="the step's bound c/λ_max(K) (the package's default 1.5)")
    p.add_argument("--max-steps", type=int, default=3000, help="stop a case after this many RK4 steps")
    args = p.parse_args()
    if not 4 <= args.m <= 20:
        p.error(f"--m must be in 4..20 (2^m init neurons), got {args.m}")
    rows: list[list[str]] = []
    scores: dict[str, list] = {"reduced flow": [], "rational": []}
    start = time.time()
    for i, case in picked_cases(args):
        suite, act, target, d, expo, off, gamma, sb, width = case
        label = case_label(*case)
        try:
            m50, m10 = mlp_times(suite, target, d, expo, off, gamma, sb, width, act)
        except MeanFieldError as exc:
            print(f"{label}: skipped ({exc})", file=sys.stderr, flush=True)
            continue
        if not math.isfinite(m50):
            print(f"{label}: skipped (the network never reached t50)", file=sys.stderr, flush=True)
            continue
        theory = kernel_theory(case_config(case), with_gram=True)
        modes, v, g = list(theory.modes), np.asarray(theory.target, float), np.asarray(theory.g, float)
        t_max = stored_horizon([(m50, m10)])
        rat = solve_variant(theory, "rational", t_max, basis="extended")
        rat_r = (ratio(rat.t50 or math.nan, m50), ratio(rat.t10 or math.nan, m10))
        cells = [f"{i}: {label}", f"{fmt(m50)} / {fmt(m10)}"]
        try:
            flow = ReducedFlow(g, modes, v, gamma, sb, act, m=args.m)
            K0 = flow.gram(flow.state0)
            exact = np.asarray(theory.gram, float)[np.ix_(flow.keep, flow.keep)]
            kerr = float(np.max(np.abs(K0 - exact)) / np.max(np.abs(exact)))
            c0 = time.process_time()
            ts, fs, stop = flow.run(t_max, h_max=args.h_max, c=args.c, max_steps=args.max_steps, stop_loss=0.05)
            loss, steps = ((flow.v_all - fs) ** 2).sum(1) / (flow.v_all**2).sum(), len(ts) - 1
            cpu = time.process_time() - c0
            red = (ratio(crossing(ts, loss, 0.5), m50), ratio(crossing(ts, loss, 0.1), m10))
            limit = f" ({stop})" if stop else ""
            cells += [f"{len(flow.T)} / {len(flow.modes)} of {len(modes)}", f"{kerr:.1e}",
                      f"{fmt(red[0])} / {fmt(red[1])}"]
            if args.check:
                f2 = ReducedFlow(g, modes, v, gamma, sb, act, m=args.m + 1)
                ts2, fs2, _ = f2.run(t_max, h_max=args.h_max, c=args.c, max_steps=args.max_steps, stop_loss=0.05)
                loss2 = ((f2.v_all - fs2) ** 2).sum(1) / (f2.v_all**2).sum()
                cells.append(f"{fmt(ratio(crossing(ts2, loss2, 0.5), m50))} / "
                             f"{fmt(ratio(crossing(ts2, loss2, 0.1), m10))}")
            cells.append(f"{steps} steps, {cpu:.1f} s{limit}")
        except MeanFieldError as exc:
            red = (math.nan, math.nan)
            cells += ["", "", f"failed: {exc}"] + ([""] if args.check else []) + [""]
        cells.append(f"{fmt(rat_r[0])} / {fmt(rat_r[1])}")
        if math.isfinite(m10):
            scores["reduced flow"].append(red)
            scores["rational"].append(rat_r)
        rows.append(cells)
        print(" | ".join(cells), f"({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    head = ["case", "MLP t50 / t10", "\\|T\\| / modes S of the basis", "max \\|K(0) − exact\\| / max \\|K\\|",
            f"reduced flow (2^{args.m}) t50 / t10 ratio"]
    if args.check:
        head.append(f"2^{args.m + 1} neurons")
    head += ["cost", "`rational` t50 / t10 ratio"]
    write_report(head, rows, args.md, scores)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
