"""The closure's law along the exact flow's own path: which modes' growth it misses, and by how much.

``multidriver_oracle.py`` compares whole loss curves; where ``rational`` misses and the exact multi-driver flow does
not, this script says which eigenvalue the law gets wrong. It integrates the same flow (4000 sampled init neurons,
every extended-basis mode driving; ``multidriver_oracle.Flow``) and, at the MLP's t50 and t10, sets side by side for
the modes that carry the largest residual:

- the exact growth ``ρ_β = K_ββ(t)/K_ββ(0)`` of the sampled Gram along the flow;
- the eigenvalue laws of ``rational``, ``second_order`` and ``resummed`` evaluated at the flow's *own* integrated
  residuals ``D_α(t) = ∫_0^t R_α`` (trapezoid per RK4 step) by the package's own generated code of each variant, with
  its exact constants as the ODE has them (the target's modes drive), so each law is tested on the path, not on its
  own trajectory;
- ``γ max_α |D_α|``, the size of the drive the law is continued to (second order is exact as ``γD → 0``);

and, for the most correlated off-diagonal pairs, ``K_αβ(t)/K_αβ(0)`` against the ODE's coupling law
``sqrt(ρ_α ρ_β)`` (:data:`featureode.ode.terms.MODE_COUPLING`), both with the exact ``ρ``.

Run:  python docs/validation/growth_along_flow.py --suite wide --cases 1,2 [--md FILE]
(case numbers as in ``multidriver_oracle.py --suite``, 0-based).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from multidriver_oracle import Flow, case_label, suite_cases  # noqa: E402
from escape_oracle import mlp_times  # noqa: E402
from multidriver_oracle import case_config  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.compile import compile_system  # noqa: E402
from featureode.ode.solve import system_inputs  # noqa: E402
from featureode.ode.variants import Variant  # noqa: E402


def along(flow: Flow, v: np.ndarray, times: list[float], h_max: float = 2.0, c: float = 0.5
          ) -> list[tuple[float, np.ndarray, np.ndarray, np.ndarray]]:
    """RK4 of ``flow`` to each of ``times`` (steps as the oracle's, cut to land on them): ``(t, R, D, K)`` there."""
    theta, t, D = flow.theta, 0.0, np.zeros_like(v)
    out, steps, h = [], 0, h_max
    for target in sorted(times):
        while t < target - 1e-12:
            if steps % 10 == 0:
                h = min(h_max, c / float(np.linalg.eigvalsh(flow.gram(theta)).max()))
            step = min(h, target - t)
            R0 = v - flow.f(theta)
            theta = flow.step(theta, step)
            R1 = v - flow.f(theta)
            if not np.all(np.isfinite(R1)):
                raise SystemExit(f"the flow became non-finite at t = {t:.4g}; lower the step")
            D += step * (R0 + R1) / 2
            t += step
            steps += 1
        out.append((t, v - flow.f(theta), D.copy(), flow.gram(theta)))
    return out


#: the eigenvalue laws set beside the exact growth
LAWS = ("rational", "second_order", "resummed")


def law_evaluators(theory: Any) -> dict[str, Callable[..., np.ndarray]]:
    """Per law of :data:`LAWS`, ``(f, D) ↦ ρ_β``: the package's own generated ``observe`` of that variant's system on
    the extended basis (its inputs from :func:`featureode.ode.solve.system_inputs`: the exact constants, driven by the
    target's modes, as the ODE has them), divided by ``λ_β(0)``; ``inf`` where the law overflows."""
    lam0 = np.asarray(theory.lambda0("exact"), float)
    out = {}
    for name in LAWS:
        inputs, system = system_inputs(theory, Variant(name), "exact", "extended")
        observe = compile_system(system, "numpy").observe

        def rho(f: np.ndarray, D: np.ndarray, observe: Any = observe, inputs: Any = inputs) -> np.ndarray:
            with np.errstate(all="ignore"):
                lam = np.asarray(observe(np.concatenate([f, D]), *inputs)[2], float) / lam0
            return np.where(np.isfinite(lam), lam, np.inf)

        out[name] = rho
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=["wide", "wide2"], required=True)
    p.add_argument("--cases", required=True, help="comma-separated case numbers (0-based) of the suite")
    p.add_argument("--n", type=int, default=4000, help="sampled init neurons")
    p.add_argument("--modes", type=int, default=5, help="modes listed per time (largest residual first)")
    p.add_argument("--pairs", type=int, default=3, help="off-diagonal pairs listed per time (most correlated)")
    p.add_argument("--md", type=Path, help="append the tables to this file (default: print them)")
    args = p.parse_args()
    cases = suite_cases(args.suite)
    try:
        picked = [cases[int(i)] for i in args.cases.split(",")]
    except (ValueError, IndexError):
        p.error(f"--cases must be comma-separated numbers below {len(cases)}, got {args.cases!r}")
    text = []
    for case in picked:
        suite, act, target, d, expo, off, gamma, sb, width = case
        label = case_label(*case)
        m50, m10 = mlp_times(suite, target, d, expo, off, gamma, sb, width, act)
        times = [x for x in (m50, m10) if math.isfinite(x)]
        if not times:
            print(f"{label}: skipped (the network never reached t50)", file=sys.stderr)
            continue
        th = kernel_theory(case_config(case), with_gram=True)
        modes, v = list(th.modes), np.asarray(th.target, float)
        laws = law_evaluators(th)
        c0 = time.process_time()
        flow = Flow(np.asarray(th.g, float), modes, v, gamma, sb, args.n, act)
        K0 = flow.gram(flow.theta)
        text += [f"### {label}", "", "| t (MLP) | loss | mode β | R_β | exact ρ_β | at the flow's D: `rational` | "
                 "`second_order` | `resummed` | γ max\\|D\\| |", "|---|---|---|---|---|---|---|---|---|"]
        snaps = along(flow, v, times)
        off_rows = []
        pairs = sorted(((abs(K0[a, b]) / math.sqrt(K0[a, a] * K0[b, b]), a, b)
                        for a in range(len(modes)) for b in range(a + 1, len(modes))), reverse=True)[:args.pairs]
        for (t, R, D, K), name in zip(snaps, ("t50", "t10")):
            rho, law = np.diag(K) / np.diag(K0), {k: ev(v - R, D) for k, ev in laws.items()}
            loss = float((R**2).sum() / (v**2).sum())
            for j in np.argsort(-np.abs(R))[:args.modes]:
                text.append(f"| {name} = {t:.1f} | {loss:.3f} | {modes[j]} | {R[j]:+.3f} | {rho[j]:.2f} | "
                            + " | ".join(f"{law[k][j]:.3g}" for k in LAWS)
                            + f" | {gamma * float(np.abs(D).max()):.1f} |")
            for _, a, b in pairs:
                off_rows.append(f"| {name} | {modes[a]}, {modes[b]} | {K0[a, b] / math.sqrt(K0[a, a] * K0[b, b]):+.2f} "
                                f"| {K[a, b] / K0[a, b]:.2f} | {math.sqrt(rho[a] * rho[b]):.2f} |")
        text += ["", "| at | pair | correlation at t = 0 | exact K_αβ(t)/K_αβ(0) | sqrt(ρ_α ρ_β) (exact ρ) |",
                 "|---|---|---|---|---|"] + off_rows
        text += ["", f"({len(modes)} modes, {args.n} neurons, {time.process_time() - c0:.0f} s of CPU.)", ""]
        print("\n".join(text[-12:]), file=sys.stderr, flush=True)
    out = "\n".join(text) + "\n"
    if args.md:
        with open(args.md, "a") as fh:
            fh.write(out)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
