"""Where the product rules stop a ``meanfield+whole`` run: the tail and the drive by each rule at that state.

A case's flow is run with the product Gauss–Hermite ladder alone (:data:`TAIL_POINTS`, no Sobol' rungs) until its
tail is not certified (:class:`TailError`); the state there is kept (``--state``, ``.npz``). At that state each rule
on ``z_T`` — product rules of 18³..40³ points and scrambled Sobol' rules of 2^14..2^16 points (two scrambles each) —
gives:

* the tail in units of L(0), in the full form ``‖P_T f − y‖² − Σ_S (v − f)²`` (the target by the rule) and in the
  form the Sobol' rungs use, ``‖P_T f‖² − Σ_S f²`` (the target's part exact);
* the whole drive's velocity (full form, the package's for a product rule), its relative distance to the
  2^16-point rule's (first scramble), and what it moves: ``df/dt`` on the basis (``f`` by Stein's form, a central
  difference along the velocity) and the basis loss' rate ``dL/dt``.

Run:  python docs/validation/sharp_ridges.py --suite wide2 --case 12 [--state FILE.npz] [--md FILE]
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from multidriver_oracle import case_config, case_label, suite_cases  # noqa: E402

from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import ReducedFlow, TailError, _sobol_rule, _tail_rule  # noqa: E402


def stop_state(flow: ReducedFlow, t_max: float) -> tuple[tuple, float]:
    """Run ``flow`` on the product rules alone until its tail is not certified; the state there and its t."""
    flow.tail_sobol = ()
    seen: dict = {}
    plain = flow.tail_loss

    def watched(state: tuple) -> float:
        try:
            return plain(state)
        except TailError:
            seen["state"] = state
            raise

    flow.tail_loss = watched  # type: ignore[method-assign]
    ts, _, error = flow.run(t_max, stop_loss=0.05, max_steps=5000)
    if "state" not in seen:
        raise SystemExit(f"sharp_ridges: the product rules certified the tail to t = {ts[-1]:.4g} ({error})")
    return seen["state"], float(ts[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", required=True, choices=("wide", "wide2"))
    p.add_argument("--case", type=int, required=True)
    p.add_argument("--state", type=Path, help="keep (or read, when it exists) the stop state here")
    p.add_argument("--md", type=Path, help="write the table here too")
    args = p.parse_args()
    case = suite_cases(args.suite)[args.case]
    theory = kernel_theory(case_config(case), with_gram=True)
    flow = ReducedFlow.from_theory(theory, drive="whole")
    if args.state is not None and args.state.exists():
        z = np.load(args.state)
        state, t_stop = tuple(z[f"arr_{k}"] for k in range(4)), float(z["t"])
    else:
        state, t_stop = stop_state(flow, 1500.0)
        if args.state is not None:
            np.savez(args.state, *state, t=t_stop)
    T, norm2 = flow.T, float((flow.v_all**2).sum())
    basis = float(((flow.v - flow.f(state)) ** 2).sum())
    fS = flow.f(state)
    rules: list[tuple[str, Any]]
    rules = [(f"Gauss–Hermite {n}^{len(T)}", lambda n=n: _tail_rule(T, flow._tail_target, n)) for n in (18, 24, 32, 40)]
    rules += [(f"Sobol' 2^{m}, scramble {s}", lambda m=m, s=s: _sobol_rule(T, flow._tail_target, m, seed=s))
              for m in (14, 15, 16) for s in (1, 2)]
    rows, velocities, rates = [], {}, {}
    for name, make in rules:
        start = time.process_time()
        rule = make()
        flow.tail_points, flow.tail_sobol = (0,), ()
        flow._tail_rules = {0: (rule, flow._ridge_mean(flow.state0, rule[0]))}
        flow._rung, flow._whole = 0, None
        (Z, wq, y), F0 = flow._tail_rules[0]
        PTf = (flow._ridge_mean(state, Z) - F0) / flow.gamma
        full = (float(wq @ (PTf - y) ** 2) - basis) / norm2
        exact = (float(wq @ PTf**2) - float((fS**2).sum())) / norm2
        velocity = flow.velocity(state)
        eps = 1e-4
        flow._last = None
        df = (flow.f_all(tuple(x + eps * v for x, v in zip(state, velocity)))
              - flow.f_all(tuple(x - eps * v for x, v in zip(state, velocity)))) / (2 * eps)
        flow._last = None
        velocities[name], rates[name] = velocity, df
        dL = -2 * float((flow.v_all - flow.f_all(state)) @ df) / norm2
        rows.append([name, f"{Z.shape[0]}", f"{full:.5f}", f"{exact:.5f}", f"{dL:.6f}",
                     f"{time.process_time() - start:.0f}"])
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    ref_name = "Sobol' 2^16, scramble 1"

    def rel(x: tuple, y: tuple) -> float:
        return math.sqrt(sum(float(((a - b) ** 2).sum()) for a, b in zip(x, y)) / sum(float((b**2).sum()) for b in y))

    for row, (name, _) in zip(rows, rules):
        row[5:5] = [f"{rel(velocities[name], velocities[ref_name]):.3f}",
                    f"{np.linalg.norm(rates[name] - rates[ref_name]) / np.linalg.norm(rates[ref_name]):.3f}"]
    head = ["rule on z_T", "nodes", "tail, full form (of L(0))", "tail, target exact", "dL/dt on the basis",
            "velocity: rel. distance to 2^16 (1)", "df/dt on the basis: rel. distance", "CPU s"]
    text = [f"{case_label(*case)}: the state where the product rules stopped (the step from t = {t_stop:.4g}).", "",
            "| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    print("\n".join(text))
    if args.md:
        intro = ["# Sharp ridges: product rules against Sobol' rules", "",
                 "A `meanfield+whole` run integrates its tail and its drive over `z_T` by a rule. As the neurons grow",
                 "inside the target's directions and shrink outside them, their ridges sharpen, and two neighbouring",
                 "product Gauss–Hermite rules stop agreeing. At the state where they stopped a run, this page compares",
                 "the rules (`python docs/validation/sharp_ridges.py --suite SUITE --case N --md FILE`; the script's",
                 "docstring says what each column is). The package's ladder (`featureode.ode.meanfield.TAIL_SOBOL`)",
                 "goes on after the product rules with the Sobol' rules, in the form with the target's part exact.", ""]
        args.md.write_text("\n".join(intro + text) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
