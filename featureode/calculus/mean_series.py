"""Exact derivative means at a point, ``m_0(b, s) … m_N(b, s)``, by Taylor recurrences (theory §2).

``m_k(b, s) = ∂_b^k m_0(b, s) = k! [ε^k] m_0(b + ε, s)``. Every closed form of :mod:`featureode.calculus.activations`
is a sum of terms ``c · B^p · T(B)`` with ``T = 1``, ``T = erf(αB + β)`` or ``T = exp(q_2 B² + q_1 B + q_0)``, whose
Taylor coefficients at ``B = b`` follow from linear recurrences instead of N symbolic differentiations:

* ``exp(q(b + ε)) = e^{q(b)} Σ e_n ε^n`` with ``e_0 = 1``, ``(n+1) e_{n+1} = a e_n + 2c e_{n−1}``,
  ``a = 2 q_2 b + q_1``, ``c = q_2`` (from ``E' = (a + 2cε) E``);
* ``erf(l + αε) = erf(l) + (2α/√π) e^{−l²} Σ_n e_n ε^{n+1}/(n+1)`` with the ``e_n`` of ``exp(−2lαε − α²ε²)``;
* ``(b + ε)^p`` by the binomial theorem.

Coefficients are kept as exact rationals (per transcendental prefactor), so the cost is ``O(N p)`` rational
operations: degree 200 takes well under a second where repeated symbolic differentiation took minutes.
"""
from __future__ import annotations

import math

import sympy as sp

__all__ = ["point_means"]

_Series = dict[sp.Expr, list[sp.Expr]]   # prefactor (a SymPy constant) -> coefficients of ε^0 … ε^N


def _exp_series(a: sp.Expr, c: sp.Expr, n_max: int) -> list[sp.Expr]:
    e = [sp.Integer(1)] + [sp.Integer(0)] * n_max
    for n in range(n_max):
        e[n + 1] = (a * e[n] + (2 * c * e[n - 1] if n else 0)) / (n + 1)
    return e


def _add(out: _Series, pref: sp.Expr, coeffs: list[sp.Expr]) -> None:
    """``out += pref · Σ coeffs_i ε^i``, grouping prefactors up to a rational factor."""
    rat, rest = sp.sympify(pref).as_coeff_Mul()
    row = out.setdefault(rest, [sp.Integer(0)] * len(coeffs))
    for i, c in enumerate(coeffs):
        if c != 0:
            row[i] = row[i] + rat * c


def _times_poly(series: list[sp.Expr], b: sp.Expr, p: int) -> list[sp.Expr]:
    """``(b + ε)^p · series``, truncated to the series' length."""
    if p == 0:
        return series
    poly = [sp.binomial(p, i) * b ** (p - i) for i in range(p + 1)]
    n = len(series)
    return [sp.Add(*[poly[i] * series[k - i] for i in range(min(p, k) + 1)]) for k in range(n)]


def point_means(mean0: sp.Expr, B: sp.Symbol, S: sp.Symbol, b: sp.Expr, s: sp.Expr,
                n_max: int) -> list[sp.Expr] | None:
    """``[m_0(b, s), …, m_{n_max}(b, s)]`` exactly (``None`` when ``m_0`` is not of the supported form)."""
    expr = sp.expand(sp.sympify(mean0).subs(S, s))
    out: _Series = {}
    n = n_max + 1
    for term in sp.Add.make_args(expr):
        coeff, power, erf_arg, exp_arg = sp.Integer(1), 0, None, sp.Integer(0)
        for f in sp.Mul.make_args(term):
            base, e = f.as_base_exp()
            if not f.has(B):
                coeff *= f
            elif base == B and e.is_Integer and e >= 0:
                power += int(e)
            elif isinstance(f, sp.exp):
                exp_arg += f.args[0]
            elif isinstance(f, sp.erf) and erf_arg is None:
                erf_arg = f.args[0]
            else:
                return None
        poly = sp.Poly(sp.expand(exp_arg), B) if exp_arg != 0 else None
        if poly is not None and poly.degree() > 2:
            return None
        if erf_arg is not None:
            lin = sp.Poly(sp.expand(erf_arg), B)
            if exp_arg != 0 or lin.degree() != 1:
                return None
            alpha, beta = lin.coeff_monomial(B), lin.coeff_monomial(1)
            l0 = sp.expand(alpha * b + beta)
            e = _exp_series(sp.expand(-2 * l0 * alpha), sp.expand(-alpha**2), n - 1)
            _add(out, coeff * sp.erf(l0), _times_poly([sp.Integer(1)] + [sp.Integer(0)] * (n - 1), b, power))
            tail = [sp.Integer(0)] + [e[k] / (k + 1) for k in range(n - 1)]
            _add(out, coeff * 2 * alpha / sp.sqrt(sp.pi) * sp.exp(-l0**2), _times_poly(tail, b, power))
        elif poly is not None:
            q2, q1, q0 = (poly.coeff_monomial(B**2), poly.coeff_monomial(B), poly.coeff_monomial(1))
            e = _exp_series(sp.expand(2 * q2 * b + q1), q2, n - 1)
            _add(out, coeff * sp.exp(sp.expand(q2 * b**2 + q1 * b + q0)), _times_poly(e, b, power))
        else:
            _add(out, coeff, _times_poly([sp.Integer(1)] + [sp.Integer(0)] * (n - 1), b, power))
    return [sp.Add(*[math.factorial(k) * row[k] * pref for pref, row in out.items() if row[k] != 0])
            for k in range(n)]
