"""Kernel theory at initialization (DESIGN §3–4): exact infinite-width NTK eigenvalues, HEA, closure constants.

Network (DESIGN §3): ``f(x) = (1/(γN)) Σ_k a_k σ(u_k) − f_init``, ``u_k = w_k·x + b_k = ŵ_k·z + b_k`` with
``ŵ_i = sqrt(g_i) w_i ~ N(0, g_i)``, ``b ~ N(0, σ_b²)``, ``a ~ N(0, 1)``. Its infinite-width NTK is
``Θ(x, x') = E_k[σ(u)σ(u') + a² σ'(u)σ'(u')(x·x' + 1)]``.

Exact projections (per neuron, DESIGN §2, ``p = |β|``, ``m_k = m_k(b, |ŵ|)``)::

    A_β    = E_x[h_β σ(u)]     = ŵ^β m_p     / sqrt(β!)                               (readout)
    H_β    = E_x[h_β σ'(u)]    = ŵ^β m_{p+1} / sqrt(β!)                               (bias)
    G_{βi} = E_x[h_β σ'(u) x_i] = sqrt(g_i) (ŵ^β ŵ_i m_{p+2} + β_i ŵ^{β−e_i} m_p) / sqrt(β!)   (weights)

(the last from ``z_i h_n(z_i) = sqrt(n+1) h_{n+1} + sqrt(n) h_{n−1}``), and the Gram matrix
``K_{αβ} = E[h_α Θ h_β] = E_k[A_α A_β + a²(Σ_i G_{αi} G_{βi} + H_α H_β)]``. Summing over i, with
``P = Σ_i g_i ŵ_i²``, ``p = |α|``, ``q = |β|`` and ``α·g = Σ_i α_i g_i``::

    sqrt(α!β!) Σ_i G_{αi}G_{βi} = ŵ^{α+β} [P m_{p+2}m_{q+2} + (β·g) m_{p+2}m_q + (α·g) m_p m_{q+2}]
                                  + Σ_i g_i α_i β_i ŵ^{α+β−2e_i} m_p m_q.

Every term is ``ŵ^{2γ} F(b, |ŵ|²)`` or ``ŵ^{2γ} P F(b, |ŵ|²)`` (``K_{αβ} = 0`` unless ``α ≡ β`` mod 2 in every
coordinate). The weight ``ŵ^{2γ}`` size-biases the law of ``Q = |ŵ|²``: ``E[ŵ^{2γ} F(Q)] = M_γ E[F(Σ_i g_i X_i)]``
with ``X_i ~ χ²_{1+2γ_i}`` independent and ``M_γ = Π_i (2γ_i−1)!! g_i^{γ_i}``, whose Laplace transform is
``Π_i (1 + 2t g_i)^{−(1/2+γ_i)}``; the extra factor ``P`` multiplies it by ``Σ_i (2γ_i+1) g_i²/(1 + 2t g_i)``. Each
average is therefore a deterministic two-dimensional integral over ``(b, Q)`` whatever the dimension or the
modes' support: the density of ``Q`` comes from its exact Laplace transform (Talbot inversion) on a logarithmic
grid, and ``b`` is integrated by Gauss–Hermite or, for non-smooth σ, a sinh-mapped trapezoidal rule
(:class:`_Integrator`). ``E[a²] = 1`` is used exactly.
HEA (DESIGN §4): on the unit sphere, Mehler's formula gives ``Θ(ρ) = Σ_l Λ_l ρ^l / l!`` with
``Λ_l = (l+1) E_b[m_l(b, 1)²] + E_b[m_{l+1}(b, 1)²]``, and ``λ_β^HEA = Λ_{|β|} g^β``.
Closure constants: ``c_l = E_k[a² m_l(b, |ŵ|)²]``, ``κ = γ² c_1 / Λ_1²``.
"""
from __future__ import annotations

import itertools
import math
import time
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import mpmath
import numpy as np
import sympy as sp
from scipy.linalg import eigh_tridiagonal

from .activations import B, S, Activation, ActivationError, get_activation
from .data import Spectrum
from .hermite import Mode

__all__ = [
    "KernelError", "KernelTheory", "exact_eigenvalues", "gram_matrix", "level_coefficients",
    "level_coefficient_exprs", "hea_eigenvalues", "closure_constants", "extended_basis", "kernel_theory",
    "kernel_report", "compare_exact_hea", "exact_vs_hea_figure",
]

#: Step of the logarithmic grid in ``Q = |ŵ|²`` (and of the sinh-mapped grid in ``b``); halving it changes
#: results by ~1e-12 relative (see ``theory_tests/test_kernel.py``).
STEP = 0.1
#: Highest derivative order ``m_k`` the kernel layer evaluates (mode degree + 2).
MAX_ORDER = 24
#: Largest number of candidate modes :func:`extended_basis` enumerates.
MAX_CANDIDATES = 200_000
#: Measured cost (seconds) of one mode pair of a Gram matrix, used in the cost estimates of error messages.
_PAIR_COST_S = 1e-2


class KernelError(ValueError):
    """Kernel quantities that cannot be computed as asked (budget too large, inconsistent inputs)."""


class KernelWarning(UserWarning):
    """A kernel quantity that is valid but makes the feature ODE degenerate (e.g. a target mode with λ_β(0) = 0)."""


@dataclass(frozen=True)
class KernelTheory:
    """Everything the feature ODE needs from the kernel at initialization, for one config.

    ``modes``: the ODE's mode set B (the target's support, or an extended basis); ``target``: ``v_β`` on B (0 for
    modes outside the target's support); ``g``: spectrum; ``gamma``: richness γ; ``lambda_exact``/``lambda_hea``:
    ``λ_β(0)`` (exact infinite-width Rayleigh quotient / ``Λ_{|β|} g^β``) with the standard error of the exact one
    (0 when deterministic); ``level_coefficients``: ``Λ_0 … Λ_L``; ``c``: ``c_0 … c_L`` with
    ``c_l = E_k[a_k² m_l(b_k, |ŵ_k|)²]``; ``gram``: ``K_{αβ}(0) = E[h_α Θ h_β]`` on B (``None`` unless asked);
    ``kappa``: the derived AGOP constant ``γ² c_1 / Λ_1²``. ``gram_parts``: the readout (NNGP), weights and bias
    parts of ``gram`` (``None`` when ``gram`` is); ``activation``, ``bias_std``: the network they belong to.
    """

    modes: tuple[Mode, ...]
    target: np.ndarray
    g: np.ndarray
    gamma: float
    lambda_exact: np.ndarray
    lambda_exact_stderr: np.ndarray
    lambda_hea: np.ndarray
    level_coefficients: np.ndarray
    c: np.ndarray
    gram: np.ndarray | None = None
    gram_parts: dict[str, np.ndarray] | None = field(default=None, compare=False)
    activation: str = ""
    bias_std: float = 0.0

    @property
    def kappa(self) -> float:
        """Derived AGOP constant ``κ = γ² c_1 / Λ_1²`` (DESIGN §4)."""
        return float(self.gamma**2 * self.c[1] / self.level_coefficients[1] ** 2)

    def lambda0(self, which: str = "exact") -> np.ndarray:
        """``λ_β(0)`` by ``"exact"`` or ``"hea"``."""
        if which == "exact":
            return self.lambda_exact
        if which == "hea":
            return self.lambda_hea
        raise ValueError(f"eigenvalues must be 'exact' or 'hea', got {which!r}")


# ----------------------------------------------------------------------------------------------------------------
# the integrator: averages E_k[ŵ^{2γ} (P) m_j(b, |ŵ|) m_k(b, |ŵ|)] over the init law
# ----------------------------------------------------------------------------------------------------------------
Gamma = tuple[tuple[int, int], ...]   # sparse half multi-index γ: ((dim, γ_i), …), γ_i ≥ 1


def _double_factorial(n: int) -> int:
    return math.prod(range(n, 0, -2)) if n > 0 else 1


@lru_cache(maxsize=64)
def _power_sums(g: tuple[float, ...], n_max: int, dps: int) -> tuple[mpmath.mpf, ...]:
    """``p_n = Σ_i g_i^n`` for ``n = 0 … n_max`` at ``dps`` digits."""
    with mpmath.workdps(dps):
        gm = [mpmath.mpf(x) for x in g]
        out, powers = [], [mpmath.mpf(1)] * len(gm)
        for _ in range(n_max + 1):
            out.append(mpmath.fsum(powers))
            powers = [p * x for p, x in zip(powers, gm)]
        return tuple(out)


def _cumulants(g: tuple[float, ...], gamma: Gamma, weighted: bool, n_max: int, dps: int) -> list[mpmath.mpf]:
    """Cumulants ``κ_0 = 0, κ_1 … κ_{n_max}`` of the normalised measure ``ŵ^{2γ} (P) dP`` on ``Q = |ŵ|²``.

    ``log E[ŵ^{2γ} e^{tQ}] = const + Σ_n t^n 2^{n−1}/n · Σ_i (2γ_i+1) g_i^n``; the factor ``P`` adds
    ``log Σ_n (2t)^n s_{n+2}/s_2`` with ``s_n = Σ_i (2γ_i+1) g_i^n``.
    """
    p = _power_sums(g, n_max + 2, dps)
    with mpmath.workdps(dps):
        def s(n: int) -> mpmath.mpf:
            return p[n] + mpmath.fsum(2 * k * mpmath.mpf(g[i]) ** n for i, k in gamma)

        kappa = [mpmath.mpf(0)] + [mpmath.factorial(n - 1) * mpmath.mpf(2) ** (n - 1) * s(n)
                                   for n in range(1, n_max + 1)]
        if weighted:
            a = [mpmath.mpf(2) ** n * s(n + 2) / s(2) for n in range(n_max + 1)]
            log = [mpmath.mpf(0)] * (n_max + 1)   # series of log A(t), A = Σ a_n t^n, a_0 = 1
            for n in range(1, n_max + 1):
                log[n] = a[n] - mpmath.fsum(k * log[k] * a[n - k] for k in range(1, n)) / n
            kappa = [kappa[n] + mpmath.factorial(n) * log[n] for n in range(n_max + 1)]
        return kappa


@lru_cache(maxsize=4096)
def _gauss_rule(g: tuple[float, ...], gamma: Gamma, weighted: bool, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss rule ``(nodes, weights)`` with ``n`` nodes for the normalised ``ν(dQ) ∝ E[ŵ^{2γ} (P); |ŵ|² ∈ dQ]``.

    Moments of the standardised ``y = (Q − κ_1)/sqrt(κ_2)`` come from the exact cumulants; the Chebyshev algorithm
    turns them into the three-term recurrence (mpmath, ``40 + 3n`` digits, ample for the Hankel conditioning) and
    Golub–Welsch gives nodes and weights (float64, well conditioned).
    """
    dps = 40 + 3 * n
    kappa = _cumulants(g, gamma, weighted, 2 * n, dps)
    with mpmath.workdps(dps):
        sd = mpmath.sqrt(kappa[2])
        kt = [mpmath.mpf(0), mpmath.mpf(0)] + [kappa[j] / sd**j for j in range(2, 2 * n + 1)]
        mom = [mpmath.mpf(1)]
        for m in range(1, 2 * n):
            mom.append(mpmath.fsum(mpmath.binomial(m - 1, k - 1) * kt[k] * mom[m - k] for k in range(1, m + 1)))
        alpha, beta = [mpmath.mpf(0)] * n, [mpmath.mpf(0)] * n
        alpha[0], beta[0] = mom[1], mom[0]
        prev, cur = [mpmath.mpf(0)] * (2 * n), list(mom)
        for k in range(1, n):
            new = [mpmath.mpf(0)] * (2 * n)
            for j in range(k, 2 * n - k):
                new[j] = cur[j + 1] - alpha[k - 1] * cur[j] - beta[k - 1] * prev[j]
            alpha[k] = new[k + 1] / new[k] - cur[k] / cur[k - 1]
            beta[k] = new[k] / cur[k - 1]
            prev, cur = cur, new
        y, vec = eigh_tridiagonal(np.array([float(v) for v in alpha]),
                                  np.sqrt(np.array([float(v) for v in beta[1:]])))
        nodes = float(kappa[1]) + float(sd) * y
    if np.any(nodes <= 0):
        raise KernelError(f"the Gauss rule for |ŵ|² produced a non-positive node ({nodes.min():.3g}); the density "
                          "method should have been used — please report this spectrum")
    return nodes, vec[0] ** 2


@dataclass(frozen=True)
class _Measure:
    """``ν(dQ) = E[ŵ^{2γ} (P); |ŵ|² ∈ dQ] ≈ mass · Σ_j w_j δ_{Q_j}``: on the log grid (``rows`` into it) or at the
    nodes of a Gauss rule (``rows`` is ``None``)."""

    mass: float
    Q: np.ndarray
    w: np.ndarray
    rows: np.ndarray | None


class _Integrator:
    """Deterministic averages over the init law of one network (activation, spectrum ``g``, ``σ_b``).

    ``E[ŵ^{2γ} (P) F(Q)] = mass · ∫ F(Q) ν̂(Q) dQ`` with ``ν̂`` the normalised law of ``Q = |ŵ|²`` under the
    measure, whose Laplace transform is ``L(z) = Π_i (1 + 2 z g_i)^{−(1/2 + γ_i)}`` (times
    ``Σ_i (2γ_i+1) g_i²/(1 + 2 z g_i)``, normalised, for the factor ``P``).

    * Density method (default): ``ν̂`` by inverse Laplace transform on a fixed Talbot contour (``talbot`` nodes)
      at the points of a universal logarithmic grid ``Q = e^y`` (step ``step``), and the trapezoidal rule in ``y``.
      Convergence is geometric (the integrand is analytic in a strip of the ``y`` plane, and the power laws at
      ``Q → 0`` — including the ``|ŵ| → 0`` singularities of non-smooth σ — become exponential decay in ``y``).
      It is accepted only if the grid reproduces the exact mass, mean and second moment of ``ν̂`` to 1e-7.
    * Gauss rule (fallback, for laws concentrated far from 0, where the Talbot sum cancels badly): ``N_GAUSS``
      nodes from the exact moments (cumulants ``κ_n = (n−1)! 2^{n−1} Σ_i (2γ_i+1) g_i^n``, plus the log of the
      ``P`` factor), Chebyshev algorithm in mpmath, Golub–Welsch.

    ``F(Q) = E_b[m_j m_k]`` is integrated over ``b ~ N(0, σ_b²)`` by Gauss–Hermite (``n_b`` nodes) for smooth σ, and
    for non-smooth σ (a classical order) by the trapezoidal rule in ``v`` with ``b = c sinh(v)``,
    ``c = min(|ŵ|, σ_b)/4``, which resolves the ``b``-structure of width ``|ŵ|`` around 0 at every ``Q``.
    """

    Q_MIN = 1e-24          # lower end of the Q grid, relative to Σg
    TAIL = 120.0           # upper end: Σg + (TAIL + 4·MAX_ORDER) g_0
    N_GAUSS = 24
    CHECK = 1e-7

    def __init__(self, act: Activation, g: Sequence[float], bias_std: float, step: float = STEP,
                 talbot: int = 24, n_b: int = 64):
        self.act, self.g, self.bias_std = act, np.asarray(g, dtype=float), float(bias_std)
        self.step, self.talbot, self.n_b = step, talbot, n_b
        total, top = float(self.g.sum()), float(self.g.max())
        y = np.arange(math.log(self.Q_MIN * total), math.log(total + (self.TAIL + 4 * MAX_ORDER) * top), step)
        self.Q = np.exp(y)
        self.wq = step * self.Q
        # fixed Talbot contour z_k = r θ_k (cot θ_k + i), θ_k = kπ/M, r = 2M/(5Q); column 0 is the real point z = r
        th = np.arange(1, talbot) * math.pi / talbot
        cot = 1 / np.tan(th)
        r = 2 * talbot / (5 * self.Q)
        self.z = np.concatenate([r[:, None] + 0j, r[:, None] * (th * (cot + 1j))[None, :]], axis=1)
        coef = np.concatenate([[0.5 + 0j], 1 + 1j * (th + (th * cot - 1) * cot)])
        self.kern = (r / talbot)[:, None] * coef[None, :] * np.exp(self.Q[:, None] * self.z)
        self.log_base = np.zeros(self.z.shape, dtype=complex)
        self.p_base = np.zeros(self.z.shape, dtype=complex)
        for gi in self.g:
            one = 1 + 2 * gi * self.z
            self.log_base -= 0.5 * np.log(one)
            self.p_base += gi * gi / one
        self.grid_b, self.grid_wb = self._b_rule(self.Q)
        self._mvals: dict[int, np.ndarray] = {}
        self._measures: dict[tuple[Gamma, bool], _Measure] = {}
        self._integrals: dict[tuple, float] = {}
        self._vanishing: dict[int, bool] = {}

    @property
    def dim(self) -> int:
        return int(self.g.size)

    # b ------------------------------------------------------------------------------------------------------------
    def _b_rule(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Nodes/weights in ``b`` for each ``Q``: shape ``(len(Q), n)``, or ``(1, n)`` when independent of ``Q``."""
        sb = self.bias_std
        if sb == 0:
            return np.zeros((1, 1)), np.ones((1, 1))
        if self.act.classical_order is None:
            x, w = np.polynomial.hermite_e.hermegauss(self.n_b)
            return sb * x[None, :], (w / math.sqrt(2 * math.pi))[None, :]
        c = np.minimum(np.sqrt(Q), sb) / 4
        vmax = np.arcsinh(12 * sb / c)
        n = int(2 * vmax.max() / self.step) | 1
        x = np.linspace(-1, 1, n)
        v = vmax[:, None] * x[None, :]
        b = c[:, None] * np.sinh(v)
        dens = np.exp(-0.5 * (b / sb) ** 2) / (sb * math.sqrt(2 * math.pi))
        return b, c[:, None] * np.cosh(v) * (vmax[:, None] * (x[1] - x[0])) * dens

    def _means(self, k: int, b: np.ndarray, Q: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            vals = self.act.mean_numpy(k)(b, np.sqrt(Q)[:, None] * np.ones_like(b))
        return np.where(np.isfinite(vals), vals, 0.0)

    def _m_grid(self, k: int, rows: np.ndarray) -> np.ndarray:
        """``m_k(b, sqrt(Q))`` on the ``(Q, b)`` nodes of grid rows ``rows`` (computed once, lazily)."""
        if k not in self._mvals:
            self._mvals[k] = np.full((self.Q.size, self.grid_b.shape[1]), np.nan)
        cache = self._mvals[k]
        todo = rows[np.isnan(cache[rows, 0])]
        if todo.size:
            b = self.grid_b[todo] if self.grid_b.shape[0] > 1 else np.broadcast_to(
                self.grid_b, (todo.size, self.grid_b.shape[1]))
            cache[todo] = self._means(k, b, self.Q[todo])
        return cache[rows]

    def F(self, j: int, k: int, measure: _Measure) -> np.ndarray:
        """``F_{jk}(Q) = E_b[m_j(b, sqrt(Q)) m_k(b, sqrt(Q))]`` at the measure's points."""
        if measure.rows is not None:
            rows = measure.rows
            mj, mk = self._m_grid(j, rows), self._m_grid(k, rows)
            wb = self.grid_wb[rows] if self.grid_wb.shape[0] > 1 else self.grid_wb
        else:
            b, wb = self._b_rule(measure.Q)
            b = np.broadcast_to(b, (measure.Q.size, b.shape[1]))
            mj, mk = self._means(j, b, measure.Q), self._means(k, b, measure.Q)
        with np.errstate(all="ignore"):
            vals = np.sum(mj * mk * wb, axis=1)
        return np.where(np.isfinite(vals), vals, 0.0)

    # Q ------------------------------------------------------------------------------------------------------------
    def _sums(self, gamma: Gamma, n: int) -> float:
        """``Σ_i (2γ_i + 1) g_i^n``."""
        return float(np.sum(self.g**n)) + sum(2 * k * self.g[i] ** n for i, k in gamma)

    def measure(self, gamma: Gamma, weighted: bool) -> _Measure:
        """The discretised ``ν(dQ) = E[ŵ^{2γ} (P); |ŵ|² ∈ dQ]`` (density method, else Gauss rule)."""
        key = (gamma, weighted)
        if key in self._measures:
            return self._measures[key]
        g = self.g
        mass = math.prod(_double_factorial(2 * n - 1) * g[i] ** n for i, n in gamma)
        logl = self.log_base.copy()
        for i, n in gamma:
            logl -= n * np.log(1 + 2 * g[i] * self.z)
        with np.errstate(all="ignore"):
            terms = self.kern * np.exp(logl)
        mean, var = self._sums(gamma, 1), 2 * self._sums(gamma, 2)
        if weighted:
            norm = self._sums(gamma, 2)
            extra = self.p_base.copy()
            for i, n in gamma:
                extra += 2 * n * g[i] ** 2 / (1 + 2 * g[i] * self.z)
            terms = terms * extra / norm
            mass *= norm
            # the factor P adds the cumulants of Σ_n (2t)^n s_{n+2}/s_2:  κ_1 += 2 s_3/s_2, κ_2 += 8 s_4/s_2 − 4 (s_3/s_2)²
            r3, r4 = self._sums(gamma, 3) / norm, self._sums(gamma, 4) / norm
            mean, var = mean + 2 * r3, var + 8 * r4 - 4 * r3**2
        dens = np.sum(terms, axis=1).real
        cut = mean + 12 * math.sqrt(var) + 80 * float(g.max())
        dens = np.where(np.isfinite(dens) & (self.Q <= cut), dens, 0.0)
        moments = [float(np.sum(self.wq * dens * self.Q**p)) for p in range(3)]
        exact = [1.0, mean, var + mean**2]
        if all(abs(a - b) <= self.CHECK * b for a, b in zip(moments, exact)):
            rows = np.nonzero(dens)[0]
            out = _Measure(mass, self.Q[rows], self.wq[rows] * dens[rows], rows)
        else:
            nodes, weights = _gauss_rule(tuple(g), gamma, weighted, self.N_GAUSS)
            out = _Measure(mass, nodes, weights, None)
        self._measures[key] = out
        return out

    # averages -----------------------------------------------------------------------------------------------------
    def _vanishes_at_zero_bias(self, k: int) -> bool:
        """``m_k(0, s) ≡ 0`` (exactly, from the closed form) — relevant only when ``σ_b = 0``."""
        if k not in self._vanishing:
            ex = self.act.mean_expr(k)
            self._vanishing[k] = ex is not None and sp.simplify(ex.subs(B, 0)) == 0
        return self._vanishing[k]

    def singular_power(self, j: int, k: int) -> int:
        """``e`` with ``E_b[m_j m_k](Q) = O(Q^{−e/2})`` as ``Q → 0`` (0 for smooth σ).

        Beyond the classical order ``r`` of σ, ``m_k(b, s) ~ s^{−(k−r)}`` near ``b = 0``; averaging the product over
        ``b`` (σ_b > 0) gains one power of ``s``.
        """
        r = self.act.classical_order
        if r is None or (self.bias_std == 0 and any(self._vanishes_at_zero_bias(o) for o in (j, k))):
            return 0
        return max(0, max(0, j - r) + max(0, k - r) - (1 if self.bias_std > 0 else 0))

    def check_order(self, j: int, k: int, gamma: Gamma, weighted: bool) -> int:
        """Raise when ``E[ŵ^{2γ} (P) m_j m_k]`` does not exist (or exceeds :data:`MAX_ORDER`); else return the
        singular power ``e`` (:meth:`singular_power`). The measure has density ``~ Q^{d/2 + |γ| (+1) − 1}`` at 0."""
        for order in (j, k):
            if order > MAX_ORDER:
                raise KernelError(
                    f"the kernel needs derivative means up to m_{order}, above the supported order {MAX_ORDER} "
                    f"(mode degree ≤ {MAX_ORDER - 2}); double precision no longer holds for such orders; use "
                    "lower-degree modes")
        e = self.singular_power(j, k)
        shape = self.dim / 2 + sum(n for _, n in gamma) + (1 if weighted else 0)
        if shape - e / 2 <= 0:
            o, r = max(j, k), self.act.classical_order
            raise ActivationError(
                f"activation {self.act.name!r}: the kernel needs the derivative mean m_{o}(b, s) = E[σ^({o})(u)] at "
                f"order {o}, beyond the classical order {r} of {self.act.name}; it grows like s^-{o - r} as the "
                f"neuron scale s = |ŵ| → 0 and its average over the init law (d = {self.dim}, σ_b = {self.bias_std}) "
                f"diverges, so this kernel entry does not exist; use a smoother activation or lower-degree modes")
        return e

    def integral(self, gamma: Gamma, weighted: bool, j: int, k: int) -> float:
        """``E_{b,ŵ}[ŵ^{2γ} (P) m_j(b, |ŵ|) m_k(b, |ŵ|)]`` (``P = Σ_i g_i ŵ_i²`` when ``weighted``).

        On the grid, points where the weight times the bound ``Q^{−e/2}`` on ``F`` is below ``1e-20`` of its maximum
        are skipped (they cannot contribute in double precision)."""
        j, k = min(j, k), max(j, k)
        key = (gamma, weighted, j, k)
        if key not in self._integrals:
            e = self.check_order(j, k, gamma, weighted)
            ms = self.measure(gamma, weighted)
            if ms.rows is not None:
                bound = np.abs(ms.w) * ms.Q ** (-e / 2)
                keep = bound > 1e-20 * bound.max()
                ms = _Measure(ms.mass, ms.Q[keep], ms.w[keep], ms.rows[keep])
            self._integrals[key] = ms.mass * float(np.sum(ms.w * self.F(j, k, ms)))
        return self._integrals[key]

    def pair(self, a: Mode, b: Mode) -> tuple[float, float, float]:
        """``(readout, weights, bias)`` parts of ``K_{ab} = E[h_a Θ h_b]`` (module docstring)."""
        da, db = a.as_dict(), b.as_dict()
        dims = sorted(set(da) | set(db))
        for i in dims:
            if i >= self.dim:
                raise KernelError(f"mode {a if i in da else b} uses dimension z{i} but d = {self.dim}")
        if any((da.get(i, 0) + db.get(i, 0)) % 2 for i in dims):
            return 0.0, 0.0, 0.0
        gamma: Gamma = tuple((i, (da.get(i, 0) + db.get(i, 0)) // 2) for i in dims)
        p, q = a.degree, b.degree
        norm = 1 / math.sqrt(a.factorial * b.factorial)
        readout = self.integral(gamma, False, p, q)
        bias = self.integral(gamma, False, p + 1, q + 1)
        ag = sum(self.g[i] * n for i, n in da.items())
        bg = sum(self.g[i] * n for i, n in db.items())
        weights = self.integral(gamma, True, p + 2, q + 2)
        if bg:
            weights += bg * self.integral(gamma, False, p + 2, q)
        if ag:
            weights += ag * self.integral(gamma, False, p, q + 2)
        for i in set(da) & set(db):
            lower = tuple((j, n - (j == i)) for j, n in gamma if n - (j == i) > 0)
            weights += self.g[i] * da[i] * db[i] * self.integral(lower, False, p, q)
        return norm * readout, norm * weights, norm * bias

    def closure(self, level: int) -> float:
        """``c_l = E[a² m_l(b, |ŵ|)²] = E[m_l²]`` (``E[a²] = 1``)."""
        return self.integral((), False, level, level)


@lru_cache(maxsize=4)
def _integrator(act: Activation, g: tuple[float, ...], bias_std: float, step: float) -> _Integrator:
    return _Integrator(act, g, bias_std, step=step)


def _g_of(spectrum: "Spectrum | Sequence[float] | np.ndarray") -> tuple[float, ...]:
    g = spectrum.g if isinstance(spectrum, Spectrum) else np.asarray(spectrum, dtype=float)
    if g.ndim != 1 or g.size == 0 or np.any(g <= 0) or not np.all(np.isfinite(g)):
        raise KernelError(f"spectrum must be a non-empty list of positive eigenvalues, got {g!r}")
    return tuple(float(x) for x in g)


def _bias_of(bias_std: float) -> float:
    b = float(bias_std)
    if not math.isfinite(b) or b < 0:
        raise KernelError(f"bias_std σ_b must be finite and ≥ 0, got {bias_std!r}")
    return b


def _modes_of(modes: Iterable["Mode | str"], d: int) -> list[Mode]:
    out = [m if isinstance(m, Mode) else Mode.parse(m) for m in modes]
    for m in out:
        m.check_dim(d)
    return out


def _estimate_cost_s(n_modes: int) -> float:
    """Rough cost of a Gram matrix on ``n_modes`` modes (every pair treated as coupled: an upper estimate)."""
    return n_modes * (n_modes + 1) // 2 * _PAIR_COST_S


# ----------------------------------------------------------------------------------------------------------------
# public API: exact eigenvalues and Gram matrices
# ----------------------------------------------------------------------------------------------------------------
def gram_matrix(modes: Iterable["Mode | str"], spectrum: "Spectrum | Sequence[float]",
                activation: "str | Activation", bias_std: float, parts: bool = False, *,
                step: float = STEP, max_cost_s: float = 600.0
                ) -> "np.ndarray | dict[str, np.ndarray]":
    """Infinite-width init Gram matrix ``K_{αβ} = E_{x,x'}[h_α(z) Θ(x, x') h_β(z')]`` on ``modes``.

    Split as ``K = readout + weights + bias`` with ``readout_{αβ} = E_k[A_α A_β]`` (the NNGP part),
    ``weights_{αβ} = E_k[a² Σ_i G_{αi} G_{βi}]`` and ``bias_{αβ} = E_k[a² H_α H_β]`` (module docstring);
    ``parts=True`` returns ``{"readout", "weights", "bias", "total"}``. Deterministic quadrature (grid ``step``,
    :class:`_Integrator`); raises :class:`KernelError` when the estimated cost exceeds ``max_cost_s``.
    """
    g = _g_of(spectrum)
    ms = _modes_of(modes, len(g))
    cost = _estimate_cost_s(len(ms))
    if cost > max_cost_s:
        raise KernelError(f"a Gram matrix on {len(ms)} modes needs ~{len(ms) * (len(ms) + 1) // 2} mode pairs, "
                          f"estimated {cost:.0f} s (limit {max_cost_s:.0f} s); lower the number of modes "
                          "(ode.extended_max_modes) or raise max_cost_s")
    act = get_activation(activation)
    integ = _integrator(act, g, _bias_of(bias_std), step)
    n = len(ms)
    out = {k: np.zeros((n, n)) for k in ("readout", "weights", "bias")}
    for i in range(n):
        for j in range(i, n):
            for name, v in zip(("readout", "weights", "bias"), integ.pair(ms[i], ms[j])):
                out[name][i, j] = out[name][j, i] = v
    out["total"] = out["readout"] + out["weights"] + out["bias"]
    return out if parts else out["total"]


def exact_eigenvalues(modes: Iterable["Mode | str"], spectrum: "Spectrum | Sequence[float]",
                      activation: "str | Activation", bias_std: float, *, method: str = "quadrature",
                      step: float = STEP, n_neurons: int = 200_000,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Exact infinite-width ``λ_β(0) = E_{x,x'}[h_β Θ h_β] = E_k[A_β² + a²(Σ_i G_{βi}² + H_β²)]`` per mode.

    Returns ``(values, stderr)``. ``method="quadrature"`` (default) is deterministic (stderr 0; grid ``step``);
    ``method="montecarlo"`` averages the exact per-neuron projections over ``n_neurons`` init neurons and returns
    the standard error of the mean (``E[a²] = 1`` used exactly).
    """
    g = _g_of(spectrum)
    ms = _modes_of(modes, len(g))
    act = get_activation(activation)
    if method == "quadrature":
        integ = _integrator(act, g, _bias_of(bias_std), step)
        vals = np.array([sum(integ.pair(m, m)) for m in ms])
        return vals, np.zeros(len(ms))
    if method == "montecarlo":
        return _montecarlo_eigenvalues(ms, np.asarray(g), act, _bias_of(bias_std), n_neurons, seed)
    raise KernelError(f"method must be 'quadrature' or 'montecarlo', got {method!r}")


def _montecarlo_eigenvalues(modes: Sequence[Mode], g: np.ndarray, act: Activation, bias_std: float,
                            n_neurons: int, seed: int, chunk: int = 50_000) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo over init neurons of ``A_β² + Σ_i G_{βi}² + H_β²`` (exact per-neuron projections)."""
    rng = np.random.default_rng(seed)
    sums, sq = np.zeros(len(modes)), np.zeros(len(modes))
    orders = sorted({o for m in modes for o in (m.degree, m.degree + 1, m.degree + 2)})
    fns = {o: act.mean_numpy(o) for o in orders}
    done = 0
    while done < n_neurons:
        n = min(chunk, n_neurons - done)
        w = rng.standard_normal((n, g.size)) * np.sqrt(g)
        b = rng.standard_normal(n) * bias_std
        s = np.sqrt(np.sum(w * w, axis=1))
        pw = np.sum(g * w * w, axis=1)
        mk = {o: fns[o](b, s) for o in orders}
        for idx, m in enumerate(modes):
            p, mono = m.degree, np.ones(n)
            for i, k in m.items:
                mono = mono * w[:, i] ** k
            wsq = mono**2 / m.factorial
            bg = sum(g[i] * k for i, k in m.items)
            val = wsq * (mk[p] ** 2 + mk[p + 1] ** 2 + pw * mk[p + 2] ** 2 + 2 * bg * mk[p + 2] * mk[p])
            for i, k in m.items:
                val = val + g[i] * k * k * (mono / w[:, i]) ** 2 / m.factorial * mk[p] ** 2
            sums[idx] += val.sum()
            sq[idx] += (val**2).sum()
        done += n
    mean = sums / n_neurons
    var = np.maximum(sq / n_neurons - mean**2, 0) / max(n_neurons - 1, 1)
    return mean, np.sqrt(var)


def closure_constants(activation: "str | Activation", spectrum: "Spectrum | Sequence[float]", bias_std: float,
                      max_level: int, *, step: float = STEP) -> np.ndarray:
    """``c_l = E_k[a_k² m_l(b_k, |ŵ_k|)²]`` for ``l = 0 … max_level`` (deterministic over ``|ŵ|²`` and ``b``)."""
    g = _g_of(spectrum)
    act = get_activation(activation)
    integ = _integrator(act, g, _bias_of(bias_std), step)
    return np.array([integ.closure(level) for level in range(int(max_level) + 1)])


# ----------------------------------------------------------------------------------------------------------------
# HEA level coefficients
# ----------------------------------------------------------------------------------------------------------------
def level_coefficients(activation: "str | Activation", bias_std: float, max_level: int,
                       n_b: int = 96) -> np.ndarray:
    """``Λ_l = (l+1) E_b[m_l(b, 1)²] + E_b[m_{l+1}(b, 1)²]``, ``l = 0 … max_level`` (``b ~ N(0, σ_b²)``).

    ``Λ_l = l! [ρ^l] Θ(ρ)`` for Θ on the unit sphere as a dot-product kernel in ``ρ = x·x'`` (Mehler's formula;
    see ``derivations/kernel_derivation.py``). Gauss–Hermite in ``b``; exact forms: :func:`level_coefficient_exprs`.
    """
    act = get_activation(activation)
    if _bias_of(bias_std) == 0:
        xb, wb = np.zeros(1), np.ones(1)
    else:
        x, w = np.polynomial.hermite_e.hermegauss(n_b)
        xb, wb = float(bias_std) * x, w / math.sqrt(2 * math.pi)
    sq = [float(wb @ act.mean_numpy(k)(xb, np.ones_like(xb)) ** 2) for k in range(int(max_level) + 2)]
    return np.array([(l + 1) * sq[l] + sq[l + 1] for l in range(int(max_level) + 1)])


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
    return [None if sq[l] is None or sq[l + 1] is None else sp.simplify((l + 1) * sq[l] + sq[l + 1])
            for l in range(int(max_level) + 1)]


def hea_eigenvalues(modes: Iterable["Mode | str"], spectrum: "Spectrum | Sequence[float]",
                    Lambda: Sequence[float]) -> np.ndarray:
    """HEA eigenvalues ``λ_β^HEA = Λ_{|β|} g^β`` (``Lambda = [Λ_0, Λ_1, …]``)."""
    g = np.asarray(_g_of(spectrum))
    ms = _modes_of(modes, g.size)
    top = max((m.degree for m in ms), default=0)
    if top >= len(Lambda):
        raise KernelError(f"HEA needs Λ_{top} but only Λ_0 … Λ_{len(Lambda) - 1} were given")
    return np.array([Lambda[m.degree] * float(m.g_power(g)) for m in ms])


def compare_exact_hea(modes: Iterable["Mode | str"], spectrum: "Spectrum | Sequence[float]",
                      activation: "str | Activation", bias_std: float) -> list[dict[str, Any]]:
    """Per mode: exact ``λ_β(0)``, HEA ``Λ_{|β|} g^β`` and their ratio HEA/exact (where HEA breaks, it shows;
    ``None`` where the exact eigenvalue is 0)."""
    g = _g_of(spectrum)
    ms = _modes_of(modes, len(g))
    exact, _ = exact_eigenvalues(ms, g, activation, bias_std)
    lam = level_coefficients(activation, bias_std, max((m.degree for m in ms), default=0))
    hea = hea_eigenvalues(ms, g, lam)
    return [{"mode": str(m), "degree": m.degree, "exact": float(e), "hea": float(h), "hea_over_exact": _ratio(h, e)}
            for m, e, h in zip(ms, exact, hea)]


def _ratio(num: float, den: float) -> float | None:
    """``num/den``, ``None`` for ``den = 0`` (JSON has no NaN)."""
    return float(num / den) if den != 0 else None


# ----------------------------------------------------------------------------------------------------------------
# extended basis
# ----------------------------------------------------------------------------------------------------------------
def _support_patterns(beta: Mode, budget: int) -> list[tuple[dict[int, int], int]]:
    """Orders on ``supp β`` with the same parity (``γ_i ≡ β_i`` mod 2), ``|γ_supp| ≤ budget``; with degree used."""
    choices = [[(i, v) for v in range(n % 2, budget + 1, 2)] for i, n in beta.items]
    out = []
    for combo in itertools.product(*choices):
        used = sum(v for _, v in combo)
        if used <= budget:
            out.append(({i: v for i, v in combo if v}, used))
    return out


def _count_candidates(beta: Mode, dim: int, degree: int) -> int:
    budget = beta.degree + degree
    free = dim - len(beta.items)
    return sum(math.comb(free + (budget - used) // 2, (budget - used) // 2)
               for _, used in _support_patterns(beta, budget))


def extended_basis(target_modes: Iterable["Mode | str"], dim: int, degree: int, max_modes: int,
                   g: "Sequence[float] | None" = None) -> list[Mode]:
    """The target's modes followed by the modes the init kernel couples to them, best first, ``max_modes`` in all.

    ``K_{γβ} ≠ 0`` only if ``γ ≡ β`` mod 2 in every coordinate (module docstring). Candidates: such ``γ`` for some
    target ``β`` with ``|γ| ≤ |β| + degree`` (lower-degree ones included, e.g. the constant for ``h2(z0)``). They
    are ranked by the coupling proxy ``max_β Π_i g_i^{|γ_i − β_i|/2}`` (lazy flow: a coupled mode picks up a
    coefficient ``~ K_{γβ}/max(λ_γ, λ_β) ~ g^{|γ−β|/2}``; without ``g`` a flat spectrum is assumed, lower dimension
    first), ties broken by degree and mode order. Raises :class:`KernelError` when the budget gives too many
    candidates.
    """
    targets = _modes_of(target_modes, dim)
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 0:
        raise KernelError(f"extended degree must be an integer ≥ 0, got {degree!r}")
    if isinstance(max_modes, bool) or not isinstance(max_modes, int) or max_modes < len(targets):
        raise KernelError(f"max_modes must be an integer ≥ the number of target modes ({len(targets)}), "
                          f"got {max_modes!r}")
    gv = np.ones(dim) if g is None else np.asarray(g, dtype=float)
    if gv.size != dim:
        raise KernelError(f"g has {gv.size} entries but dim = {dim}")
    count = sum(_count_candidates(t, dim, degree) for t in targets)
    if count > MAX_CANDIDATES:
        raise KernelError(
            f"extended basis: degree budget {degree} at d = {dim} gives ~{count} candidate modes (limit "
            f"{MAX_CANDIDATES}; estimated {count * 2e-5:.0f} s to enumerate and rank, and a Gram matrix on "
            f"{max_modes} of them ~{_estimate_cost_s(max_modes):.0f} s); lower ode.extended_degree")
    scores: dict[Mode, float] = {}
    for beta in targets:
        budget = beta.degree + degree
        db = beta.as_dict()
        free = [i for i in range(dim) if i not in db]
        for pattern, used in _support_patterns(beta, budget):
            for n_pairs in range((budget - used) // 2 + 1):
                for extra in itertools.combinations_with_replacement(free, n_pairs):
                    index = dict(pattern)
                    for i in extra:
                        index[i] = index.get(i, 0) + 2
                    gamma = Mode.from_dict(index)
                    score = math.prod(gv[i] ** (abs(gamma.order(i) - db.get(i, 0)) / 2)
                                      for i in set(index) | set(db))
                    scores[gamma] = max(scores.get(gamma, 0.0), score)
    target_set = set(targets)
    extra = sorted((m for m in scores if m not in target_set), key=lambda m: (-scores[m], m.sort_key()))
    return list(targets) + extra[: max_modes - len(targets)]


# ----------------------------------------------------------------------------------------------------------------
# config level
# ----------------------------------------------------------------------------------------------------------------
def kernel_theory(cfg: Any, basis: str | None = None, with_gram: bool = False) -> KernelTheory:
    """All init kernel quantities of a :class:`~featureode.config.Config` for the feature ODE.

    ``basis``: ``"target"`` (the target's modes) or ``"extended"`` (:func:`extended_basis` with
    ``ode.extended_degree``/``ode.extended_max_modes``; the Gram matrix is always included then); ``None`` takes
    ``cfg.ode.basis``. ``target`` holds ``v_β`` on the chosen modes.
    """
    basis = basis or cfg.ode.basis
    if basis not in ("target", "extended"):
        raise KernelError(f"basis must be 'target' or 'extended', got {basis!r}")
    spectrum = cfg.spectrum()
    target = cfg.target_obj(spectrum)
    act = get_activation(cfg.network.activation)
    bias = float(cfg.network.bias_std)
    if basis == "extended":
        modes = extended_basis(target.modes, spectrum.dim, cfg.ode.extended_degree, cfg.ode.extended_max_modes,
                               g=spectrum.g)
    else:
        modes = list(target.modes)
    coeffs = target.as_dict()
    v = np.array([coeffs.get(m, 0.0) for m in modes])
    top = max(1, max((m.degree for m in modes), default=0))
    lam = level_coefficients(act, bias, top)
    gram = parts = None
    if with_gram or basis == "extended":
        parts = gram_matrix(modes, spectrum, act, bias, parts=True)
        gram = parts["total"]
        exact, stderr = np.diag(gram).copy(), np.zeros(len(modes))
    else:
        exact, stderr = exact_eigenvalues(modes, spectrum, act, bias)
    c = closure_constants(act, spectrum, bias, top)
    # λ_β(0) is of order g^β c_{|β|} (HEA); "zero" is judged against g^β max_l c_l, a scale free of the mode's level
    dead = [str(m) for m, val, e in zip(modes, v, exact)
            if val != 0 and abs(e) <= 1e-10 * math.prod(spectrum.g[i] ** n for i, n in m.items) * float(np.max(c))]
    if dead:
        warnings.warn(f"target mode(s) {', '.join(dead)} have init NTK eigenvalue λ_β(0) = 0 with activation "
                      f"{act.name!r} (σ_b = {bias:g}): the kernel has no component along them, and the built-in "
                      "feature-ODE variants scale λ_β(0), so their coefficients stay at 0. Choose an activation whose "
                      "Hermite coefficients of those degrees do not vanish (e.g. relu), or a target without those "
                      "modes.",
                      KernelWarning, stacklevel=2)
    return KernelTheory(
        modes=tuple(modes), target=v, g=spectrum.g.copy(), gamma=float(cfg.network.richness),
        lambda_exact=exact, lambda_exact_stderr=stderr, lambda_hea=hea_eigenvalues(modes, spectrum, lam),
        level_coefficients=lam, c=c, gram=gram, gram_parts=parts,
        activation=act.name, bias_std=bias)


def kernel_report(cfg: Any) -> dict[str, Any]:
    """``featureode kernel CONFIG --json`` (DESIGN §6): init eigenvalues of the target's modes and closure constants.

    Keys: ``modes``, ``exact``, ``exact_stderr`` (0: deterministic quadrature), ``hea``, ``c``,
    ``level_coefficients``; extra: ``target``, ``hea_over_exact``, ``exact_quadrature_error`` (difference to a rule
    with more nodes), ``kappa``, ``activation``, ``bias_std``, ``dim``, ``seconds``.
    """
    t0 = time.perf_counter()
    kt = kernel_theory(cfg, basis="target")
    spectrum = cfg.spectrum()
    finer, _ = exact_eigenvalues(kt.modes, spectrum, cfg.network.activation, kt.bias_std, step=STEP / 2)
    return {
        "modes": [str(m) for m in kt.modes],
        "exact": kt.lambda_exact.tolist(),
        "exact_stderr": kt.lambda_exact_stderr.tolist(),
        "hea": kt.lambda_hea.tolist(),
        "c": kt.c.tolist(),
        "level_coefficients": kt.level_coefficients.tolist(),
        "target": kt.target.tolist(),
        "hea_over_exact": [_ratio(h, e) for h, e in zip(kt.lambda_hea, kt.lambda_exact)],
        "exact_quadrature_error": np.abs(finer - kt.lambda_exact).tolist(),
        "kappa": kt.kappa,
        "activation": kt.activation,
        "bias_std": kt.bias_std,
        "dim": spectrum.dim,
        "seconds": time.perf_counter() - t0,
    }


# ----------------------------------------------------------------------------------------------------------------
# figure
# ----------------------------------------------------------------------------------------------------------------
def exact_vs_hea_figure(path: "str | Path", activation: str = "relu", bias_std: float = 0.5,
                        dims: Sequence[int] = (8, 32, 128), exponent: float = 1.5, offset: float = 3.0,
                        max_level: int = 3) -> dict[str, Any]:
    """PNG comparing exact ``λ_β(0)`` with HEA ``Λ_{|β|} g^β`` per level and dimension; returns the plotted data.

    Modes per level ``l``: the product ``z0*…*z_{l−1}`` (solid) and the pure power ``h_l(z0)`` (dashed). Left:
    isotropic data (``g_i = 1/d``): for products HEA becomes exact as ``d`` grows; pure powers keep an O(1) error,
    because ``h_l(z0)`` overlaps with ``(|x|² − 1)·h_{l−2}(z0)`` and the radial dependence of Θ contributes at the
    same order ``d^{−l}`` as ``Λ_l g^β``. Right: the power-law spectrum ``g_i ∝ (i + offset)^(−exponent)``, whose
    effective dimension stays finite, so ``|x|²`` keeps fluctuating and HEA overestimates levels ≥ 2 at every d.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = range(1, max_level + 1)
    data: dict[str, Any] = {"dims": list(dims), "activation": activation, "bias_std": bias_std, "panels": {}}
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, (name, make) in zip(axes, [
            ("isotropic", lambda d: Spectrum.power_law(d, 0.0, 1.0)),
            (f"power law (i+{offset:g})^-{exponent:g}", lambda d: Spectrum.power_law(d, exponent, offset))]):
        panel: dict[str, list[float]] = {}
        for level in levels:
            for mode, style in ((Mode.from_dict({i: 1 for i in range(level)}), "-"),
                                (Mode.from_dict({0: level}), "--")):
                if level == 1 and style == "--":
                    continue
                ratios = [math.nan if r["hea_over_exact"] is None else r["hea_over_exact"] for d in dims
                          for r in compare_exact_hea([mode], make(d), activation, bias_std)]
                panel[str(mode)] = ratios
                ax.plot(dims, ratios, style, marker="o", color=f"C{level - 1}", label=f"{mode} (level {level})")
        data["panels"][name] = panel
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(dims), [str(d) for d in dims])
        ax.set_xlabel("dimension d")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("HEA / exact  λ_β(0)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"HEA vs exact infinite-width NTK eigenvalues at init ({activation}, σ_b = {bias_std:g})")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return data
