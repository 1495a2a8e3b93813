"""Derivation of the tilted laws of ``|ŵ|²`` behind the deterministic second-order constants
(:mod:`featureode.kernel.growth`): the averages ``E[ŵ^{2γ} Π_j P_{k_j} f(|ŵ|²)]``, ``P_k = Σ_i g_i^k ŵ_i²``.

Run ``python derivations/growth_algebra.py``. Steps (each printed, each checked):

1. Under ``ŵ^{2γ} e^{−t|ŵ|²}`` (ŵ_i ~ N(0, g_i) independent) each ``ŵ_i²`` is Gamma-distributed with shape
   ``γ_i + ½`` and scale ``2g_i/(1 + 2tg_i)``, so ``P_k`` is a sum of independent Gamma variables and the joint
   cumulant of ``(P_k)_{k∈B}`` is ``κ_B(t) = (|B|−1)! 2^{|B|−1} Σ_i (2γ_i + 1) g_i^{|B| + Σ_{k∈B} k} / (1 + 2tg_i)^{|B|}``;
   with the mass ``M_γ L_γ(t) = Π_i (2γ_i − 1)!! g_i^{γ_i} (1 + 2tg_i)^{−γ_i − ½}`` the moment–cumulant formula gives
   ``E[ŵ^{2γ} Π_j P_{k_j} e^{−t|ŵ|²}] = M_γ L_γ(t) Σ_{partitions π} Π_{B∈π} κ_B(t)``. Checked in SymPy (d = 2,
   symbolic g_0, g_1, t) against the direct expansion of the product into monomials, each averaged in closed form
   ``E[ŵ_i^{2m} e^{−tŵ_i²}] = (2m − 1)!! g_i^m (1 + 2tg_i)^{−m−½}``, for several γ and K.
2. The package's measures (``_TiltedLaws.measures``: the law on the kernel's grid by Talbot inversion of the formula
   of step 1) against the closed form of step 1 at numeric g (d = 6): ``E[ŵ^{2γ} Π P_k e^{−t|ŵ|²}]`` for t = 0.3, 1, 3
   and ``E[ŵ^{2γ} Π P_k |ŵ|²]`` (the mean, from the t-derivative at 0), to 1e-7 relative.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import sympy as sp
from sympy.utilities.iterables import multiset_partitions

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # this checkout's package, also when run as a script
from _checks import CHECKS, check  # noqa: E402  (derivations/_checks.py: this script's folder is on sys.path)


def dfact(n: int) -> int:
    """``n!!`` with ``(−1)!! = 1``."""
    return math.prod(range(n, 0, -2)) if n > 0 else 1


def direct(gamma: dict[int, int], ks: tuple[int, ...], g: list, t: sp.Expr) -> sp.Expr:
    """``E[ŵ^{2γ} Π_j P_{k_j} e^{−t|ŵ|²}]`` by expanding the product into monomials of the ``ŵ_i²``."""
    d = len(g)
    x = sp.symbols(f"x0:{d}")      # x_i stands for ŵ_i²
    poly = sp.Mul(*[x[i] ** n for i, n in gamma.items()])
    for k in ks:
        poly *= sum(g[i] ** k * x[i] for i in range(d))
    total = sp.Integer(0)
    for mono, coef in sp.Poly(sp.expand(poly), *x).terms():
        total += coef * sp.Mul(*[dfact(2 * m - 1) * g[i] ** m * (1 + 2 * t * g[i]) ** (-m - sp.Rational(1, 2))
                                 for i, m in enumerate(mono)])
    return total


def cumulant_formula(gamma: dict[int, int], ks: tuple[int, ...], g: list, t: sp.Expr) -> sp.Expr:
    """``M_γ L_γ(t) Σ_π Π_B κ_B(t)`` of the module docstring."""
    d = len(g)

    def kappa(block: list[int]) -> sp.Expr:
        n, s = len(block), sum(block)
        return (sp.factorial(n - 1) * 2 ** (n - 1)
                * sum((2 * gamma.get(i, 0) + 1) * g[i] ** (n + s) / (1 + 2 * t * g[i]) ** n for i in range(d)))

    mass = sp.Mul(*[dfact(2 * gamma.get(i, 0) - 1) * g[i] ** gamma.get(i, 0)
                    * (1 + 2 * t * g[i]) ** (-gamma.get(i, 0) - sp.Rational(1, 2)) for i in range(d)])
    if not ks:
        return mass
    # partitions of the positions 0..n−1 (the k's may repeat: partition positions, not values)
    parts = multiset_partitions(list(range(len(ks))))
    return mass * sum(sp.Mul(*[kappa([ks[p] for p in block]) for block in part]) for part in parts)


def main() -> int:
    print("Step 1: the tilted law of |ŵ|² — cumulants of the P_k against the direct expansion (d = 2, symbolic)")
    g0, g1, t = sp.symbols("g0 g1 t", positive=True)
    g = [g0, g1]
    for gamma, ks in [({}, (0,)), ({}, (1,)), ({0: 1}, (0,)), ({0: 1}, (1, 2)), ({1: 2}, (0, 0)),
                      ({0: 1, 1: 1}, (1, 1, 2)), ({}, (0, 1, 1, 3))]:
        diff = sp.simplify(direct(gamma, ks, g, t) - cumulant_formula(gamma, ks, g, t))
        check(diff == 0, f"E[ŵ^(2γ) Π P_k e^(−t|ŵ|²)] = M_γ L_γ(t) Σ_π Π κ_B(t) for γ = {gamma}, K = {list(ks)}")

    print("Step 2: the package's tilted laws on the kernel's grid against the closed form (d = 6, numeric g)")
    from featureode.kernel.growth import _TiltedLaws
    from featureode.kernel.initlaw import q_law

    gnum = [0.3, 0.2, 0.15, 0.1, 0.08, 0.05]
    law = q_law(tuple(gnum))
    tilted = _TiltedLaws(law)
    gs = [sp.Float(x, 30) for x in gnum]
    for gamma, ks in [({0: 1}, (1,)), ({}, (0, 2)), ({2: 1}, (1, 1)), ({0: 2, 1: 1}, (0, 1, 3))]:
        gam = tuple(sorted(gamma.items()))
        power = sum(gamma.values()) + len(ks)
        mass, w, rows = tilted.measures(gam, [(tuple(sorted(ks)), float(power))])[0]
        Q = law.Q[rows]
        for tv in (0.3, 1.0, 3.0):
            got = mass * float(np.sum(w * np.exp(-tv * Q)))
            want = float(cumulant_formula(gamma, ks, gs, sp.Float(tv, 30)))
            check(abs(got - want) <= 1e-7 * abs(want),
                  f"γ = {gamma}, K = {list(ks)}: E[… e^(−{tv}|ŵ|²)] on the grid = closed form to 1e-7 "
                  f"({got:.12g} vs {want:.12g})")
        tt = sp.Symbol("tt")
        want_mean = float(-sp.diff(cumulant_formula(gamma, ks, gs, tt), tt).subs(tt, 0))
        got_mean = mass * float(np.sum(w * Q))
        check(abs(got_mean - want_mean) <= 1e-7 * abs(want_mean),
              f"γ = {gamma}, K = {list(ks)}: E[… |ŵ|²] on the grid = closed form to 1e-7")
    print(f"SymPy checks passed ({len(CHECKS)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
