"""What each approximation of a closure costs on the loss curve: ``df/dt = K R`` with ``K`` from sampled neurons.

Every closure of the package makes the kernel a function of the integrated residuals ``D_α`` of the target's modes
(the drivers): ``K(t) = K(D_T(t))``. ``multidriver_oracle.py`` integrates the exact flow, in which *every* mode's
residual moves the neurons. This script integrates the flow a target-driven closure describes, with no law at all:

    dθ_i/dt = γ P ∇_θ (a_i Σ_{α∈T} R_α(t) A_α(ŵ_i, b_i))        (only the target's modes T move the neurons)
    df/dt   = K(θ(t)) R,    R = v − f                             (every mode of the extended basis B)

with ``K_βα(θ) = E_i[⟨P^{1/2}∇(a A_β), P^{1/2}∇(a A_α)⟩]`` the exact sampled Gram of the moved neurons (the same
neurons, modes and quadrature as the oracle: :class:`multidriver_oracle.Flow`). ``K`` is then exactly the kernel
along the target-driven per-neuron flow, at the ODE's own residuals: the limit a closure ``K(D_T)`` reaches if its
eigenvalue and coupling laws were exact. Two forms are integrated:

- ``full``: ``df/dt = K(θ) R`` with the whole sampled Gram;
- ``diagonal``: the package's coupling law on top: ``K_βα = K_βα(0) sqrt(ρ_β ρ_α)``, ``ρ_β = K_ββ(θ)/K_ββ(0)``
  (:data:`featureode.ode.terms.MODE_COUPLING`), so only the exact eigenvalue growth enters.

The neurons can be driven by the target's modes (``target``), by every mode whose support lies in the target's
directions (``support``: the target's companions such as ``h3(z0)*z1`` for ``z0*z1``, not ``h2(z5)``), or by every
mode (``all``: with ``full``, the exact multi-driver flow).

Where ``target/full`` matches the exact flow, a closure whose laws follow the per-neuron flow of the target's modes
(continued to the γD the network reaches) can get the case; where it does not, the other modes' residuals move the
neurons enough that no function of ``D_T`` can. ``target/diagonal`` and ``all/diagonal`` show what the coupling law
costs on top of exact eigenvalues. The findings are in ``target_driven.md``.

Run:  python docs/validation/target_driven.py --suite wide --cases 0,1 [--forms target/full,all/diagonal,…]
      [--max-steps N] [--md FILE]
(case numbers as in ``multidriver_oracle.py --suite``, 0-based).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from escape_oracle import mlp_times  # noqa: E402
from multidriver_oracle import (Flow, MeanTable, Modes, case_config, case_label, crossing, fmt, ratio, suite_cases,  # noqa: E402
                                write_report)
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.solve import solve_variant  # noqa: E402

FORMS = ("full", "diagonal")
DRIVERS = ("target", "support", "all")


class TargetDriven(Flow):
    """:class:`multidriver_oracle.Flow` with the neurons moved by the residuals of ``drivers`` (``target``,
    ``support`` or ``all``) and the function carried as its own state ``f`` (``df/dt = K(θ) R``, ``form`` ``full`` or
    ``diagonal``, as in the module docstring)."""

    def __init__(self, g: np.ndarray, modes: list, v: np.ndarray, gamma: float, bias_std: float, n: int,
                 activation: str = "relu", seed: int = 3, form: str = "full", drivers: str = "target") -> None:
        super().__init__(g, modes, v, gamma, bias_std, n, activation, seed)
        if form not in FORMS or drivers not in DRIVERS:
            raise SystemExit(f"--forms: unknown form {drivers}/{form}; use DRIVERS/FORM with DRIVERS one of "
                             f"{', '.join(DRIVERS)} and FORM one of {', '.join(FORMS)}")
        self.form = form
        support = {i for m, x in zip(modes, self.v) if x != 0.0 for i in m.support}
        self.drivers = [k for k, (m, x) in enumerate(zip(modes, self.v))
                        if x != 0.0 or drivers == "all" or (drivers == "support" and set(m.support) <= support)]
        self.driver_basis = Modes([modes[k] for k in self.drivers], activation)
        self.K0 = self.gram(self.theta)
        self.k0 = np.sqrt(np.diag(self.K0))

    def gram(self, theta: tuple) -> np.ndarray:
        """:meth:`Flow.gram` as one BLAS product (the same sum, in another order)."""
        u = self._u(theta)
        return np.tensordot(u, u, axes=([0, 2], [0, 2])) / u.shape[0]

    def kernel(self, theta: tuple) -> np.ndarray:
        K = self.gram(theta)
        return K if self.form == "full" else self.coupled(K)

    def coupled(self, K: np.ndarray) -> np.ndarray:
        """The coupling law ``K(0)_βα sqrt(ρ_β ρ_α)`` on the exact ``ρ_β = K_ββ/K_ββ(0)`` of ``K``."""
        rho = np.diag(K) / self.k0**2
        return self.K0 * np.sqrt(np.outer(rho, rho))

    def velocity(self, state: tuple) -> tuple[np.ndarray, ...]:
        """``d(a, ŵ, b, f)/dt`` (the inherited :meth:`Flow.step` integrates it: RK4 on the 4-tuple)."""
        a, W, b, f = state
        R = self.v - f
        RT = R[self.drivers]
        A, dW, db = self.driver_basis.with_gradients(W, b)
        return (self.gamma * (A @ RT), self.gamma * a[:, None] * np.einsum("nkd,k->nd", dW, RT) * self.g,
                self.gamma * a * (db @ RT), self.kernel((a, W, b)) @ R)

    def coupling_rate(self, state: tuple) -> float:
        """``R·K_c R / R·K R``: the loss' decay rate ``−d|R|²/dt = 2 R·K R`` with the coupling law
        ``K_c = K(0) sqrt(ρρ)`` (the exact ``ρ`` of ``state``) over the rate with the exact ``K``."""
        K = self.gram(state[:3])
        R = self.v - state[3]
        return float(R @ self.coupled(K) @ R) / float(R @ K @ R)

    def run(self, t_max: float, h_max: float = 1.0, c: float = 0.5, every: int = 10, max_steps: int = 10**9,
            on_step: "Callable[[float, tuple], None] | None" = None,
            rates: list | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """Loss ratio ``Σ R²/Σ v²`` on the steps' times, as :meth:`Flow.run` (``on_step(t, state)`` after each
        step); with ``rates`` (a list), also :meth:`coupling_rate` after every step, appended to it."""
        state = (*self.theta, np.zeros_like(self.v))
        t, steps, h = 0.0, 0, h_max
        ts, loss = [0.0], [1.0]
        if rates is not None:
            rates.append(self.coupling_rate(state))
        norm = float((self.v**2).sum())
        while t < t_max and loss[-1] > 0.05 and steps < max_steps:
            if steps % every == 0:
                lam = float(np.linalg.eigvalsh(self.kernel(state[:3])).max())
                h = min(h_max, c / lam, t_max - t)
            state = self.step(state, h)
            t += h
            steps += 1
            if on_step is not None:
                on_step(t, state)
            R = self.v - state[3]
            if rates is not None:
                rates.append(self.coupling_rate(state))
            ts.append(t)
            loss.append(float((R**2).sum()) / norm)
            if not math.isfinite(loss[-1]):
                raise SystemExit(f"the target-driven flow became non-finite at t = {t:.4g}; lower the step (c)")
        return np.array(ts), np.array(loss), steps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", choices=["wide", "wide2"], required=True)
    p.add_argument("--cases", required=True, help="comma-separated case numbers (0-based, as multidriver_oracle)")
    p.add_argument("--forms", default="target/full,target/diagonal",
                   help="which flows to integrate, DRIVERS/FORM: target or all drivers, full or diagonal kernel "
                        "(all/full is the exact multi-driver flow: a check against multidriver_oracle.md)")
    p.add_argument("--n", type=int, default=4000, help="sampled init neurons per case")
    p.add_argument("--h-max", type=float, default=2.0, help="largest RK4 step (the step is min(h_max, 0.5/λ_max))")
    p.add_argument("--max-steps", type=int, default=3000, help="stop a case after this many RK4 steps")
    p.add_argument("--md", type=Path, help="write the Markdown table here (default: print it)")
    args = p.parse_args()
    forms = [x.strip() for x in args.forms.split(",") if x.strip()]
    for form in forms:
        if form.count("/") != 1 or form.split("/")[0] not in DRIVERS or form.split("/")[1] not in FORMS:
            p.error(f"--forms: {form!r} is not DRIVERS/FORM; DRIVERS is one of {', '.join(DRIVERS)} and FORM one of "
                    f"{', '.join(FORMS)} (e.g. target/full)")
    MeanTable.span(8.0, 10.0)
    cases = suite_cases(args.suite)
    rows = []
    start = time.time()
    for i in (int(x) for x in args.cases.split(",")):
        case = cases[i]
        suite, act, target, d, expo, off, gamma, sb, width = case
        label = case_label(*case)
        m50, m10 = mlp_times(suite, target, d, expo, off, gamma, sb, width, act)
        cfg = case_config(case)
        theory = kernel_theory(cfg, with_gram=True)
        modes, v, g = list(theory.modes), np.asarray(theory.target, float), np.asarray(theory.g, float)
        t_max = 3.0 * (m10 if math.isfinite(m10) else 2 * m50)
        rat = solve_variant(theory, "rational", t_max, basis="extended")
        cells = [f"{i}: {label}", f"{fmt(m50)} / {fmt(m10)}"]
        for form in forms:
            try:
                drivers, kind = form.split("/") if "/" in form else ("", form)
                flow = TargetDriven(g, modes, v, gamma, sb, args.n, act, form=kind, drivers=drivers)
                rates: list | None = [] if form == "all/full" else None
                c0 = time.process_time()
                ts, loss, steps = flow.run(t_max, h_max=args.h_max, max_steps=args.max_steps, rates=rates)
                cpu = time.process_time() - c0
                r50, r10 = ratio(crossing(ts, loss, 0.5), m50), ratio(crossing(ts, loss, 0.1), m10)
                limit = " (step limit)" if steps >= args.max_steps else ""
                cells.append(f"{fmt(r50)} / {fmt(r10)} ({steps} steps, {cpu:.0f} s{limit})")
                if rates is not None:    # the coupling law's decay rate on the exact path, at the MLP's t50, t10
                    at = [float(np.interp(m, ts, rates)) if math.isfinite(m) and m <= ts[-1] else math.nan
                          for m in (m50, m10)]
                    cells.append(f"{fmt(at[0])} / {fmt(at[1])}")
            except SystemExit as exc:
                cells.append(f"failed: {exc}")
        cells.append(f"{fmt(ratio(rat.t50 or math.nan, m50))} / {fmt(ratio(rat.t10 or math.nan, m10))}")
        rows.append(cells)
        print(" | ".join(cells), f"({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    head = ["case", "MLP t50 / t10"]
    for f in forms:
        head.append(f"{f}: t50 / t10 ratio")
        if f == "all/full":
            head.append("R·K_c R / R·K R at the MLP's t50 / t10")
    head.append("`rational` t50 / t10 ratio")
    write_report(head, rows, args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
