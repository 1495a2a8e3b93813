"""The one per-neuron formula of the kernel: each part of the Gram entry ``K_{αβ}`` as a sum of averages ``E_k[ŵ^{2γ}
(P) m_j m_k]`` (:func:`pair_terms`), the closure constants' terms, and the integrability checks that refuse averages
that do not exist."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from featureode.calculus.activations import Activation, ActivationError
from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.kernel.initlaw import MAX_ORDER, Gamma
from featureode.kernel.network import KernelError, checked_bias_std, checked_spectrum

#: Measured cost (seconds) of one mode pair of a Gram matrix (≈ 2.5e-4 s on a fresh spectrum, one core; rounded
#: up), used in the cost estimates of error messages.
_PAIR_COST_S = 5e-4
def _g_of(spectrum: "Spectrum | Sequence[float] | np.ndarray") -> tuple[float, ...]:
    return checked_spectrum(spectrum, KernelError)


def _bias_of(bias_std: float) -> float:
    return checked_bias_std(bias_std, KernelError)


def _modes_of(modes: Iterable["Mode | str"], d: int) -> list[Mode]:
    out = [m if isinstance(m, Mode) else Mode.parse(m) for m in modes]
    for m in out:
        m.check_dim(d)
    return out


def _estimate_cost_s(n_modes: int) -> float:
    """Rough cost of a Gram matrix on ``n_modes`` modes (every pair treated as coupled: an upper estimate)."""
    return n_modes * (n_modes + 1) // 2 * _PAIR_COST_S




# ----------------------------------------------------------------------------------------------------------------
# the per-neuron formula: K_{αβ} parts as sums of E[ŵ^{2γ} (P) m_j m_k]
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Term:
    """``coefficient · E_k[ŵ^{2γ} (P) m_j(b, |ŵ|) m_k(b, |ŵ|)]`` contributing to one part of ``K_{αβ}``."""

    part: str
    coefficient: float
    gamma: Gamma
    weighted: bool
    j: int
    k: int




def pair_terms(a: Mode, b: Mode, g: np.ndarray, readout_variance: float = 1.0) -> list[Term]:
    """The terms of ``K_{ab} = E[h_a Θ h_b]`` (module docstring), the ONE per-neuron formula that every averager
    (quadrature, Monte Carlo) evaluates; ``[]`` when ``a ≢ b`` mod 2 in some coordinate (then ``K_{ab} = 0``).

    ``readout = E[A_a A_b]``; ``bias = E[a²] E[H_a H_b]``; ``weights = E[a²] E[Σ_i G_{ai} G_{bi}]`` with the sum over
    ``i`` done in closed form (``ŵ^{2γ} P`` term, the ``(β·g)``/``(α·g)`` terms and the shared-direction terms
    ``g_i α_i β_i ŵ^{2γ − 2e_i}``)."""
    da, db = a.as_dict(), b.as_dict()
    dims = sorted(set(da) | set(db))
    for i in dims:
        if i >= g.size:
            raise KernelError(f"mode {a if i in da else b} uses dimension z{i} but d = {g.size}")
    if any((da.get(i, 0) + db.get(i, 0)) % 2 for i in dims):
        return []
    gamma: Gamma = tuple((i, (da.get(i, 0) + db.get(i, 0)) // 2) for i in dims)
    p, q = a.degree, b.degree
    norm = 1 / math.sqrt(a.factorial * b.factorial)
    ea = norm * readout_variance
    terms = [Term("readout", norm, gamma, False, p, q), Term("bias", ea, gamma, False, p + 1, q + 1),
             Term("weights", ea, gamma, True, p + 2, q + 2)]
    ag = sum(g[i] * n for i, n in da.items())
    bg = sum(g[i] * n for i, n in db.items())
    if bg:
        terms.append(Term("weights", ea * bg, gamma, False, p + 2, q))
    if ag:
        terms.append(Term("weights", ea * ag, gamma, False, p, q + 2))
    for i in sorted(set(da) & set(db)):
        lower = tuple((j, n - (j == i)) for j, n in gamma if n - (j == i) > 0)
        terms.append(Term("weights", ea * g[i] * da[i] * db[i], lower, False, p, q))
    return terms


def closure_term(level: int, readout_variance: float = 1.0) -> Term:
    """``c_l = E_k[a_k² m_l(b_k, |ŵ_k|)²] = E[a²] E[m_l²]``."""
    return Term("closure", readout_variance, (), False, level, level)


# ----------------------------------------------------------------------------------------------------------------
# integrability
# ----------------------------------------------------------------------------------------------------------------
def singular_power(act: Activation, bias_std: float, *orders: int) -> int:
    """``e`` with ``E_b[Π_o m_o](Q) = O(Q^{−e/2})`` as ``Q → 0`` for the derivative means of ``orders`` (two for a
    kernel entry ``m_j m_k``; any number for the second-order growth); 0 for smooth σ.

    Beyond the classical order ``r`` of σ, ``m_k(b, s) ~ s^{−(k−r)}`` near ``b = 0``; averaging the product over
    ``b`` (σ_b > 0) gains one power of ``s``.
    """
    r = act.classical_order
    if r is None or (bias_std == 0 and any(act.vanishes_at_zero_bias(o) for o in orders)):
        return 0
    return max(0, sum(max(0, o - r) for o in orders) - (1 if bias_std > 0 else 0))


def check_integrable(act: Activation, bias_std: float, dim: int, term: Term) -> int:
    """Raise when ``E[ŵ^{2γ} (P) m_j m_k]`` does not exist (or exceeds :data:`MAX_ORDER`); else return the singular
    power ``e`` (:func:`singular_power`). The measure has density ``~ Q^{d/2 + |γ| (+1) − 1}`` at 0."""
    j, k = term.j, term.k
    for order in (j, k):
        if order > MAX_ORDER:
            raise KernelError(
                f"the kernel needs derivative means up to m_{order}, above the supported order {MAX_ORDER} "
                f"(mode degree ≤ {MAX_ORDER - 2}); double precision no longer holds for such orders; use "
                "lower-degree modes")
    e = singular_power(act, bias_std, j, k)
    shape = dim / 2 + sum(n for _, n in term.gamma) + (1 if term.weighted else 0)
    if shape - e / 2 <= 0:
        o, r = max(j, k), act.classical_order
        raise ActivationError(
            f"activation {act.name!r}: the kernel needs the derivative mean m_{o}(b, s) = E[σ^({o})(u)] at "
            f"order {o}, beyond the classical order {r} of {act.name}; it grows like s^-{o - r} as the "  # type: ignore[operator]  # reached only for activations with a classical order
            f"neuron scale s = |ŵ| → 0 and its average over the init law (d = {dim}, σ_b = {bias_std}) "
            f"diverges, so this kernel entry does not exist; use a smoother activation or lower-degree modes")
    return e


def check_growth(act: Activation, g: np.ndarray, fourth: bool = False) -> float:
    """The tilt ``κ`` the averages of ``act`` need over the init law of spectrum ``g`` (0: none), or raise
    :class:`ActivationError` saying why they do not exist or cannot be certified.

    Exponential-polynomial σ (``Σ c u^p e^{a u}``): ``E_b[m_j m_k](Q) = O(poly(Q) e^{κQ})`` with ``κ = max Re(a²)``,
    and ``E[e^{κ|ŵ|²}] = Π_i (1 − 2κ g_i)^{−1/2}``: the averages exist iff ``2κ g_0 < 1`` (for σ = e^{cu}:
    ``κ = c²``, so ``E[σ(u)²]`` diverges for ``2c²g_0 ≥ 1``). ``fourth``: the fourth moment a Monte Carlo standard
    error needs (``4κ g_0 < 1``). Other σ growing exponentially (``e^{c|u|}``, measured) have no closed-form bias
    average and are refused."""
    g0 = float(np.max(g))
    if act.exp_terms:
        kappa = act.q_growth
        factor = 4 if fourth else 2
        if kappa > 0 and factor * kappa * g0 >= 1:
            what = "the Monte Carlo variance (E[σ(u)⁴])" if fourth else "E[σ(u)²]"
            raise ActivationError(
                f"activation {act.name!r}: {what} over the init law diverges for {factor}c²g_0 ≥ 1, and here "
                f"c² = {kappa:.6g} (the growth rate of E_b[m_k²] in |ŵ|²) and g_0 = {g0:.6g} give "
                f"{factor}c²g_0 = {factor * kappa * g0:.6g}; lower the growth of σ (e.g. exp(c u) with "
                f"c < {math.sqrt(1 / (factor * g0)):.4g}) or the top eigenvalue g_0")
        return kappa   # < 0 (sin, cos): the tilt concentrates the law where F lives
    rate = max(act.exp_rate)
    if rate > 0:
        raise ActivationError(
            f"activation {act.name!r}: σ(u) = {act.expr} grows like e^{{{rate / 1.1:.3g}|u|}} and has no "
            "closed-form Gaussian mean, so its kernel averages over the init law cannot be certified (the "
            "quadrature would not converge); write it as a sum of c·u^p·exp(a·u) terms (exp, sinh, cosh, sin, cos "
            "and polynomials), whose means are exact, or use an activation of slower growth")
    return 0.0

