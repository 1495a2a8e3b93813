"""The Hermite eigenvalue approximation on the unit sphere: level coefficients ``Λ_l = (l+1) E_b[m_l(b, 1)²] +
E_b[m_{l+1}(b, 1)²]`` (numeric and exact SymPy forms) and ``λ_β^HEA = Λ_{|β|} g^β``."""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Sequence

import numpy as np
import sympy as sp

from featureode.calculus.activations import Activation, B, S, get_activation
from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.kernel.initlaw import BiasRule
from featureode.kernel.network import KernelError
from featureode.kernel.perneuron import _bias_of, _g_of, _modes_of


# ----------------------------------------------------------------------------------------------------------------
# HEA level coefficients
# ----------------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=64)
def _level_coefficients(act: Activation, bias_std: float, max_level: int, n_b: int) -> np.ndarray:
    if act.exp_terms:   # exponential-polynomial σ: E_b[m_k(b, 1)²] in closed form
        sq = [float(act.bias_average(k, k, bias_std)(np.ones(1))[0]) for k in range(max_level + 2)]
    else:
        b, w = BiasRule(bias_std, True, n_b=n_b).nodes(np.ones(1))   # Gauss–Hermite in b (0 for σ_b = 0)
        xb, wb = b[0], w[0]
        sq = [float(wb @ act.mean_numpy(k)(xb, np.ones_like(xb)) ** 2) for k in range(max_level + 2)]
    out = np.array([(l + 1) * sq[l] + sq[l + 1] for l in range(max_level + 1)])
    out.setflags(write=False)
    return out


def level_coefficients(activation: "str | Activation", bias_std: float, max_level: int,
                       n_b: int = 96) -> np.ndarray:
    """``Λ_l = (l+1) E_b[m_l(b, 1)²] + E_b[m_{l+1}(b, 1)²]``, ``l = 0 … max_level`` (``b ~ N(0, σ_b²)``).

    ``Λ_l = l! [ρ^l] Θ(ρ)`` for Θ on the unit sphere as a dot-product kernel in ``ρ = x·x'`` (Mehler's formula;
    see ``derivations/kernel_derivation.py``). Gauss–Hermite in ``b``; exact forms: :func:`level_coefficient_exprs`.
    """
    return _level_coefficients(get_activation(activation), _bias_of(bias_std), int(max_level), int(n_b)).copy()


def level_coefficient_parts(activation: "str | Activation", bias_std: float, max_level: int,
                            n_b: int = 96) -> np.ndarray:
    """The readout, weights and bias parts of ``Λ_l`` (rows in the order of
    :data:`featureode.kernel.parametrization.PARTS`, columns ``l = 0 … max_level``): ``E_b[m_l²]`` (``σσ'``),
    ``l E_b[m_l²]`` (``σ'σ' ρ``) and ``E_b[m_{l+1}²]`` (``σ'σ'``), with ``E[a²] = 1`` in the last two; they sum to
    :func:`level_coefficients`. A gradient flow with per-group learning rates has ``Λ_l = Σ_g η_g part_g``."""
    act, sb = get_activation(activation), _bias_of(bias_std)
    b, w = BiasRule(sb, True, n_b=int(n_b)).nodes(np.ones(1))
    xb, wb = b[0], w[0]
    sq = np.array([float(wb @ act.mean_numpy(k)(xb, np.ones_like(xb)) ** 2) for k in range(int(max_level) + 2)])
    levels = np.arange(int(max_level) + 1)
    return np.stack([sq[:-1], levels * sq[:-1], sq[1:]])


def _gaussian_mean_exact(expr: sp.Expr, sigma: sp.Expr) -> sp.Expr | None:
    """Exact ``E[expr(b)]``, ``b ~ N(0, σ²)``, for sums of ``c b^n exp(−a b² + c0)`` and ``c erf(k b)^e`` (e ≤ 2).

    ``E[b^n e^{−a b²}] = (τ/σ) (n−1)!! τ^n`` (n even) with ``τ² = 1/(1/σ² + 2a)``;
    ``E[erf(k b)²] = (2/π) arcsin(2k²σ²/(1 + 2k²σ²))`` (an orthant probability). ``None`` for other terms.
    """
    if sigma == 0:
        return sp.simplify(expr.subs(B, 0))
    total = sp.Integer(0)
    for term in sp.Add.make_args(sp.expand(sp.powsimp(sp.expand(expr), combine="exp"))):
        coeff, power, exparg, erfs = sp.Integer(1), 0, sp.Integer(0), []
        for f in sp.Mul.make_args(term):
            base, e = f.as_base_exp()
            if not f.has(B):
                coeff *= f
            elif base == B and e.is_Integer:
                power += int(e)
            elif isinstance(f, sp.exp):
                exparg += f.args[0]
            elif isinstance(base, sp.erf) and e.is_Integer:
                erfs.append((base.args[0], int(e)))
            else:
                return None
        if erfs:
            if power or exparg != 0 or len(erfs) != 1:
                return None
            arg, e = erfs[0]
            k = sp.simplify(arg / B)
            if k.has(B) or e > 2:
                return None
            if e == 2:
                r = 2 * k**2 * sigma**2
                total += coeff * 2 / sp.pi * sp.asin(r / (1 + r))
            continue
        poly = sp.Poly(sp.expand(exparg), B)
        if poly.degree() > 2 or poly.coeff_monomial(B) != 0:
            return None
        a, c0 = -poly.coeff_monomial(B**2), poly.coeff_monomial(1)
        if power % 2:
            continue
        tau = 1 / sp.sqrt(1 / sigma**2 + 2 * a)
        total += coeff * sp.exp(c0) * tau / sigma * sp.factorial2(power - 1) * tau**power
    return sp.simplify(total)


def level_coefficient_exprs(activation: "str | Activation", bias_std: "float | sp.Expr",
                            max_level: int) -> list[sp.Expr | None]:
    """Exact ``Λ_l = (l+1) E_b[m_l(b,1)²] + E_b[m_{l+1}(b,1)²]`` as SymPy expressions (``None`` where no closed
    form is found). ``bias_std`` may be a number (made rational) or a SymPy symbol."""
    act = get_activation(activation)
    sigma = sp.nsimplify(bias_std) if isinstance(bias_std, (int, float)) else sp.sympify(bias_std)
    sq: list[sp.Expr | None] = []
    for k in range(int(max_level) + 2):
        m = act.mean_expr(k)
        sq.append(None if m is None else _gaussian_mean_exact(m.subs(S, 1) ** 2, sigma))
    return [None if sq[l] is None or sq[l + 1] is None else sp.simplify((l + 1) * sq[l] + sq[l + 1])  # type: ignore[operator]  # None excluded just before
            for l in range(int(max_level) + 1)]


def hea_eigenvalues(modes: Iterable["Mode | str"], spectrum: "Spectrum | Sequence[float] | np.ndarray",
                    Lambda: "Sequence[float] | np.ndarray") -> np.ndarray:
    """HEA eigenvalues ``λ_β^HEA = Λ_{|β|} g^β`` (``Lambda = [Λ_0, Λ_1, …]``)."""
    g = np.asarray(_g_of(spectrum))
    ms = _modes_of(modes, g.size)
    top = max((m.degree for m in ms), default=0)
    if top >= len(Lambda):
        raise KernelError(f"HEA needs Λ_{top} but only Λ_0 … Λ_{len(Lambda) - 1} were given")
    return np.array([Lambda[m.degree] * float(m.g_power(g)) for m in ms])




