"""Closed-form Gaussian means of exponential-polynomial activations ``σ(u) = Σ_t c_t u^{p_t} e^{a_t u}``.

The family holds ``exp(c u)``, ``cosh``, ``sinh``, ``sin``, ``cos`` (complex ``a_t``), their products and
polynomial multiples (``u e^u``, ``e^u sin u``, ``sin(u)²`` …). For ``u = b + s ξ``, ``ξ ~ N(0, 1)``, every
Gaussian mean is a closed-form Gaussian integral:

* ``E[e^{a u} u^p] = e^{a b + a² s²/2} E[(b + a s² + s ξ)^p]`` (complete the square), so
  ``m_0(b, s) = Σ_t c_t e^{a_t b + a_t² s²/2} P_t(b, s²)`` with ``P_t`` a polynomial, and
  ``m_j = ∂_b^j m_0 = Σ_t c_t e^{a_t b + a_t² s²/2} Σ_i C(j, i) a_t^{j−i} ∂_b^i P_t``;
* the bias average ``F_{jk}(Q) = E_b[m_j(b, √Q) m_k(b, √Q)]``, ``b ~ N(0, σ_b²)``, by the same identity in ``b``:
  ``E[e^{α b} R(b)] = e^{α² σ_b²/2} E[R(α σ_b² + σ_b η)]``; it is ``Σ e^{β Q} poly(Q)`` with
  ``β = (a_t² + a_{t'}²)/2``.

The average over the init law, ``E[F(|ŵ|²)]``, exists iff ``2 κ g_0 < 1`` with ``κ = max_t Re(a_t²)`` (the growth
rate of ``F`` in ``Q``) and ``g_0`` the top eigenvalue: ``E[e^{κ|ŵ|²}] = Π_i (1 − 2κ g_i)^{−1/2}``. The kernel
averages it on the exponentially tilted law (:mod:`featureode.kernel.initlaw`), which needs ``F(Q) e^{−κQ}``
(:func:`bias_average`): every exponent there has a non-positive real part, so nothing overflows up to the
threshold.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np
import sympy as sp

__all__ = ["ExpTerm", "exp_terms", "mean0_complex", "mean0_real", "q_growth", "bias_average"]

ExpTerm = tuple[sp.Expr, int, sp.Expr]   # (c, p, a): c u^p e^{a u}

_XI = sp.Symbol("xi")
_Q = sp.Symbol("Q", positive=True)


def exp_terms(expr: sp.Expr, u: sp.Symbol) -> tuple[ExpTerm, ...] | None:
    """``((c, p, a), …)`` with ``expr = Σ c u^p e^{a u}`` (constants ``c``, ``a`` exact, possibly complex; equal
    ``(p, a)`` merged), or ``None`` when ``expr`` is not of that form."""
    if expr.has(sp.Piecewise, sp.Abs, sp.sign, sp.Heaviside, sp.Max, sp.Min):
        return None
    try:
        flat = sp.expand(sp.powsimp(sp.expand(expr.rewrite(sp.exp)), combine="exp"))
    except (TypeError, ValueError, NotImplementedError):
        return None
    merged: dict[tuple[int, sp.Expr], sp.Expr] = {}
    for term in sp.Add.make_args(flat):
        c, p, a = sp.Integer(1), 0, sp.Integer(0)
        for f in sp.Mul.make_args(term):
            base, e = f.as_base_exp()
            if not f.has(u):
                c *= f
            elif base == u and e.is_Integer and e >= 0:
                p += int(e)
            elif isinstance(f, sp.exp) or (f.is_Pow and not base.has(u)):
                arg = sp.expand(f.args[0] if isinstance(f, sp.exp) else e * sp.log(base))
                slope = sp.expand(arg / u)
                if slope.has(u) or not slope.is_number:
                    return None
                a += slope
            else:
                return None
        key = (p, sp.nsimplify(a) if a.is_Float else a)
        merged[key] = merged.get(key, sp.Integer(0)) + c
    out = tuple((c, p, a) for (p, a), c in merged.items() if c != 0)
    return out or None


def _gauss_poly(poly: sp.Expr, x: sp.Symbol, shift: sp.Expr, sd: sp.Expr) -> sp.Expr:
    """``E[poly(shift + sd ξ)]`` for a polynomial in ``x`` (``E[ξ^{2j}] = (2j−1)!!``, odd moments 0)."""
    p = sp.Poly(sp.expand(sp.sympify(poly).subs(x, shift + sd * _XI)), _XI)
    return sp.expand(sum(c * (sp.factorial2(n - 1) if n % 2 == 0 else 0) for (n,), c in p.terms()))


def _term_polys(terms: tuple[ExpTerm, ...], B: sp.Symbol) -> list[tuple[sp.Expr, sp.Expr, sp.Expr]]:
    """Per term ``(c, a, P(B, Q))`` with ``c e^{aB + a²Q/2} P`` its share of ``m_0(B, √Q)``."""
    return [(c, a, _gauss_poly(B**p, B, B + a * _Q, sp.sqrt(_Q))) for c, p, a in terms]


def mean0_complex(terms: tuple[ExpTerm, ...], B: sp.Symbol, S: sp.Symbol) -> sp.Expr:
    """``m_0(b, s) = Σ_t c_t e^{a_t b + a_t² s²/2} P_t(b, s²)`` with the (complex) exponentials as they are."""
    return sp.Add(*[c * sp.exp(a * B + a**2 * S**2 / 2) * P.subs(_Q, S**2) for c, a, P in _term_polys(terms, B)])


def mean0_real(terms: tuple[ExpTerm, ...], B: sp.Symbol, S: sp.Symbol) -> sp.Expr:
    """``m_0(b, s)`` in real form (``sin(100u) → sin(100 b) e^{−5000 s²}``)."""
    m = mean0_complex(terms, B, S)
    if all(a.is_real for _, _, a in terms) and all(c.is_real for c, _, _ in terms):
        return sp.simplify(m)
    return sp.simplify(sp.expand_complex(m))


def q_growth(terms: tuple[ExpTerm, ...]) -> float:
    """``κ = max_t Re(a_t²)``: ``F_{jk}(Q) = O(poly(Q) e^{κ Q})``."""
    return max(float(sp.re(sp.expand(a**2))) for _, _, a in terms)


def _derivative_polys(terms: tuple[ExpTerm, ...], B: sp.Symbol, j: int) -> list[tuple[sp.Expr, sp.Expr, sp.Expr]]:
    """Per term ``(c, a, P_j)`` with ``m_j = Σ c e^{aB + a²Q/2} P_j(B, Q)``."""
    out = []
    for c, a, P in _term_polys(terms, B):
        Pj = sp.expand(sum(sp.binomial(j, i) * a ** (j - i) * sp.diff(P, B, i) for i in range(j + 1)))
        out.append((c, a, Pj))
    return out


@lru_cache(maxsize=512)
def bias_average(terms: tuple[ExpTerm, ...], j: int, k: int, bias_std: float, tilt: float
                 ) -> Callable[[np.ndarray], np.ndarray]:
    """``Q ↦ F_{jk}(Q) e^{−tilt·Q}`` (NumPy, real) with ``F_{jk}(Q) = E_b[m_j(b, √Q) m_k(b, √Q)]``,
    ``b ~ N(0, σ_b²)``, in closed form (module docstring). ``σ_b`` is taken as the rational it was written as."""
    B = sp.Symbol("b", real=True)
    sb = sp.nsimplify(float(bias_std), rational=True)
    kap = sp.nsimplify(float(tilt), rational=True)
    dj, dk = _derivative_polys(terms, B, j), _derivative_polys(terms, B, k)
    pieces: dict[tuple[sp.Expr, sp.Expr], sp.Expr] = {}
    for c1, a1, P1 in dj:
        for c2, a2, P2 in dk:
            alpha = sp.expand(a1 + a2)
            if sb == 0:
                avg = sp.expand((P1 * P2).subs(B, 0))
                pref = c1 * c2
            else:
                avg = _gauss_poly(sp.expand(P1 * P2), B, alpha * sb**2, sb)
                pref = c1 * c2 * sp.exp(sp.expand(alpha**2 * sb**2 / 2))
            beta = sp.expand((a1**2 + a2**2) / 2 - kap)
            key = (beta, sp.Integer(1))
            pieces[key] = pieces.get(key, sp.Integer(0)) + pref * avg
    expr = sp.Add(*[sp.exp(beta * _Q) * sp.expand(poly) for (beta, _), poly in pieces.items()])
    f = sp.lambdify(_Q, expr, modules="numpy")

    def fn(Q: np.ndarray, _f=f) -> np.ndarray:
        Q = np.asarray(Q, dtype=float)
        with np.errstate(over="ignore", invalid="ignore"):
            val = np.asarray(_f(Q.astype(complex)), dtype=complex) * np.ones_like(Q)
        return val.real

    return fn
