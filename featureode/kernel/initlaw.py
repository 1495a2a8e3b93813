"""The init law of a neuron's pre-activation scale (theory §3–4): the law of ``Q = |ŵ|²`` and the bias rule.

Under ``ŵ_i ~ N(0, g_i)`` the kernel averages are ``E[ŵ^{2γ} (P) F(Q)]`` with ``P = Σ_i g_i ŵ_i²``. The weight
``ŵ^{2γ}`` size-biases the law of ``Q``: ``E[ŵ^{2γ} F(Q)] = M_γ E[F(Σ_i g_i X_i)]`` with ``X_i ~ χ²_{1+2γ_i}``
independent and ``M_γ = Π_i (2γ_i−1)!! g_i^{γ_i}``, whose Laplace transform is ``Π_i (1 + 2t g_i)^{−(1/2+γ_i)}``;
the extra factor ``P`` multiplies it by ``Σ_i (2γ_i+1) g_i²/(1 + 2t g_i)``.

* :class:`QLaw` (one per spectrum ``g``): the measure ``ν_γ(dQ)`` discretised on a logarithmic grid (density by
  Talbot inversion of the exact Laplace transform) or, where that cancels badly, by a Gauss rule from the exact
  cumulants. Measures are cached per ``(γ, weighted)``; they do not depend on the activation or on ``σ_b``.
* :class:`BiasRule` (one per ``σ_b`` and smoothness of σ): nodes and weights in ``b ~ N(0, σ_b²)`` for each ``Q``.
* :class:`QGrid`: the logarithmic grid ``Q_j = e^{y_0 + j·step}``; spectra with the same ``Σ g`` share it, so the
  activation's means on it are shared too (:mod:`featureode.kernel.theory`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Sequence

import mpmath
import numpy as np
from scipy.linalg import eigh_tridiagonal

from featureode.core.errors import FeatureODEError

__all__ = ["STEP", "MAX_ORDER", "Gamma", "Measure", "QGrid", "QLaw", "BiasRule", "InitLawError", "q_law",
           "tilt_factor", "bias_rule"]

#: Step of the logarithmic grid in ``Q = |ŵ|²`` (and of the sinh-mapped grid in ``b``); halving it changes
#: results by ~1e-12 relative (see ``theory_tests/test_kernel.py``).
STEP = 0.1
#: Highest derivative order ``m_k`` the kernel layer evaluates (mode degree + 2).
MAX_ORDER = 24

Gamma = tuple[tuple[int, int], ...]   # sparse half multi-index γ: ((dim, γ_i), …), γ_i ≥ 1


class InitLawError(FeatureODEError, ValueError):
    """A discretisation of the init law that cannot be trusted (reported, never silently used)."""


@lru_cache(maxsize=None)
def _double_factorial(n: int) -> int:
    return math.prod(range(n, 0, -2)) if n > 0 else 1


# ----------------------------------------------------------------------------------------------------------------
# the grid
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QGrid:
    """``Q_j = exp(y_0 + j·step)`` (``np.arange`` from ``y_0``), ``j = 0 … n−1``; trapezoidal weights ``step·Q_j``.

    ``y_0 = log(Q_MIN Σg)``, with ``Σg`` within 1e-12 of 1 taken as 1 (the float sum of a normalised spectrum), so
    every normalised spectrum has the same grid and shares the activation's mean table."""

    y0: float
    step: float
    n: int

    Q_MIN = 1e-24          # lower end of the Q grid, relative to Σg
    TAIL = 120.0           # upper end: Σg + (TAIL + 4·MAX_ORDER) g_0

    @classmethod
    def for_spectrum(cls, g: np.ndarray, step: float) -> "QGrid":
        total, top = float(g.sum()), float(g.max())
        y0 = math.log(cls.Q_MIN * (1.0 if abs(total - 1) <= 1e-12 else total))
        n = np.arange(y0, math.log(total + (cls.TAIL + 4 * MAX_ORDER) * top), step).size
        return cls(y0, float(step), int(n))

    @cached_property
    def Q(self) -> np.ndarray:
        return np.exp(np.arange(self.y0, self.y0 + (self.n - 0.5) * self.step, self.step)[: self.n])


# ----------------------------------------------------------------------------------------------------------------
# the law of Q
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Measure:
    """``ν(dQ) = E[ŵ^{2γ} (P); |ŵ|² ∈ dQ] ≈ mass · Σ_j w_j δ_{Q_j}``: on the grid (``rows`` into it) or at the
    nodes of a Gauss rule (``rows`` is ``None``)."""

    mass: float
    Q: np.ndarray
    w: np.ndarray
    rows: np.ndarray | None


class QLaw:
    """The measures ``ν_γ`` of ``Q = |ŵ|²`` for one spectrum ``g`` (see the module docstring).

    * Density method (default): ``ν̂`` by inverse Laplace transform on a fixed Talbot contour (``talbot`` nodes)
      at the points of the logarithmic grid, and the trapezoidal rule in ``y = log Q``. Convergence is geometric
      (the integrand is analytic in a strip of the ``y`` plane, and the power laws at ``Q → 0`` become exponential
      decay in ``y``). It is accepted only if the grid reproduces the exact mass, mean and second moment of ``ν̂``
      to ``CHECK``.
    * Gauss rule (fallback, for laws concentrated far from 0, where the Talbot sum cancels badly): ``N_GAUSS``
      nodes from the exact moments (:func:`gauss_rule`).

    The Talbot terms of ``γ`` are ``base · Π_i (1 + 2 z g_i)^{−γ_i}``: the base (the ``γ = 0`` law times the
    contour weights) is computed once per row; the per-direction factors are multiplied in, not re-exponentiated,
    for every γ of a batch in one pass (:meth:`measures`, :mod:`featureode.kernel.loops`).
    """

    N_GAUSS = 24
    CHECK = 1e-7

    def __init__(self, g: "tuple[float, ...]", step: float = STEP, talbot: int = 24,
                 p_weights: "tuple[float, ...] | None" = None):
        self.g = np.asarray(g, dtype=float)
        # P = Σ_i h_i ŵ_i² (h = g, except on an exponentially tilted law, whose g differs from the data's)
        self.h = self.g if p_weights is None else np.asarray(p_weights, dtype=float)
        self.grid = QGrid.for_spectrum(self.g, step)
        self.talbot = talbot
        Q = self.grid.Q
        self.wq = step * Q
        # fixed Talbot contour z_k = r θ_k (cot θ_k + i), θ_k = kπ/M, r = 2M/(5Q); column 0 is the real point z = r
        th = np.arange(1, talbot) * math.pi / talbot
        cot = 1 / np.tan(th)
        r = 2 * talbot / (5 * Q)
        self.z = np.concatenate([r[:, None] + 0j, r[:, None] * (th * (cot + 1j))[None, :]], axis=1)
        coef = np.concatenate([[0.5 + 0j], 1 + 1j * (th + (th * cot - 1) * cot)])
        self._coef, self._r = coef, r
        # the contour terms of the γ = 0 law, computed per row on first use (rows of negligible weight never are)
        self._base = np.empty(self.z.shape, dtype=complex)
        self._p_base = np.empty(self.z.shape, dtype=complex)
        self._ready = np.zeros(Q.size, dtype=bool)
        # log of the bound ν̂_0(Q) ≤ Q^{d/2−1} / (Γ(d/2) Π_i sqrt(2 g_i)) (each g_i X_i has density ≤ q^{−1/2}/…)
        self._log_q = np.log(Q)
        self._log_bound0 = ((self.dim / 2 - 1) * self._log_q - math.lgamma(self.dim / 2)
                            - 0.5 * float(np.sum(np.log(2 * self.g))))
        total = float(self.g.sum())
        self._bulk = np.flatnonzero((Q >= total / 8) & (Q <= 8 * total))   # rows around the mean of Q
        self._gf = [float(x) for x in self.g]   # Python floats: the per-γ scalar sums below are Python arithmetic
        self._hf = [float(x) for x in self.h]
        self._top = float(self.g.max())
        self._psum = [float(np.sum(self.g**n)) for n in range(5)]
        self._hsum = [float(np.sum(self.h * self.g ** (n - 1))) if n else 0.0 for n in range(5)]
        self._rows: dict[float, int] = {}
        self._bulk_log: "tuple[np.ndarray, np.ndarray] | None" = None
        self._measures: dict[tuple[Gamma, bool], tuple[int, Measure]] = {}

    @property
    def dim(self) -> int:
        return int(self.g.size)

    @property
    def Q(self) -> np.ndarray:
        return self.grid.Q

    def sums(self, gamma: Gamma, n: int) -> float:
        """``s_n = Σ_i (2γ_i + 1) g_i^n``."""
        g = self._gf
        return self._psum[n] + sum(2 * k * g[i] ** n for i, k in gamma)

    def p_sums(self, gamma: Gamma, n: int) -> float:
        """``Σ_i (2γ_i + 1) h_i g_i^{n−1}`` (``= s_n`` when ``h = g``), ``n ≥ 1``: the sums the factor ``P`` brings."""
        g, h = self._gf, self._hf
        return self._hsum[n] + sum(2 * k * h[i] * g[i] ** (n - 1) for i, k in gamma)

    #: rows whose a-priori bound (below) is under this fraction of the integrand's bulk are not computed
    ROW_FLOOR = 1e-40

    def _rows_ready(self, lo: int, hi: int) -> None:
        """Compute the contour terms of rows ``lo:hi`` not computed yet."""
        todo = np.flatnonzero(~self._ready[lo:hi]) + lo
        if not todo.size:
            return
        z, Q = self.z[todo], self.Q[todo]
        # e^{Qz} = e^{Re Qz} e^{i Im Qz}: its size joins the product's logarithm inside the loop (alone it can underflow
        # where Π_i (1 + 2 z g_i)^{−1/2} overflows, at large d), its phase stays here
        qz = Q[:, None] * z
        kern = (self._r[todo] / self.talbot)[:, None] * self._coef[None, :] * np.exp(1j * qz.imag)
        from featureode.kernel.loops import contour_factors

        with np.errstate(all="ignore"):
            base, self._p_base[todo] = contour_factors(np.ascontiguousarray(z), self.g, self.h, qz.real)
            self._base[todo] = kern * base
        self._ready[todo] = True

    def base(self, lo: int, hi: int) -> np.ndarray:
        """Contour terms ``kern · Π_i (1 + 2 z g_i)^{−1/2}`` of the γ = 0 law on rows ``lo:hi``."""
        self._rows_ready(lo, hi)
        return self._base[lo:hi]

    def p_base(self, lo: int, hi: int) -> np.ndarray:
        """``Σ_i h_i g_i/(1 + 2 z g_i)`` on rows ``lo:hi`` (the Laplace factor of ``P``)."""
        self._rows_ready(lo, hi)
        return self._p_base[lo:hi]

    def first_row(self, gamma: Gamma, weighted: bool, singular: int) -> int:
        """First grid row that can matter for ``ν_γ`` (times ``P`` when ``weighted``) against an integrand
        ``≤ Q^{−singular/2}`` (:meth:`_first_row`)."""
        return self._first_row(sum(n for _, n in gamma) + bool(weighted) - singular / 2)

    def _first_row(self, power: float) -> int:
        """First grid row that can matter for ``ν_γ`` against an integrand ``≤ Q^{−e/2}``: since
        ``ŵ^{2γ} ≤ Q^{|γ|}`` and ``P ≤ g_0 Q``, ``ν_γ(dQ) ≤ Q^{|γ| (+1)} ν_0(dQ)``, and ``ν̂_0`` has the bound of
        ``_log_bound0``. Rows where ``Q^{power}`` times that bound (``power = |γ| (+1) − e/2``) is below
        ``ROW_FLOOR`` of the largest ``Q^{power} ν̂_0`` in the bulk of the law (a lower bound of its maximum)
        contribute less than that fraction."""
        if power in self._rows:
            return self._rows[power]
        lo = 0
        if self.dim / 2 - 1 + power > 0 and self._bulk.size:
            if self._bulk_log is None:   # log ν̂_0 and log Q on the bulk rows (finite ones), the same for every power
                rows = self._bulk
                with np.errstate(all="ignore"):
                    log_dens = np.log(np.abs(np.sum(self.base(int(rows[0]), int(rows[-1]) + 1), axis=1).real))
                keep = np.isfinite(log_dens)
                self._bulk_log = (log_dens[keep], self._log_q[rows][keep])
            log_dens, log_q = self._bulk_log
            top = log_dens + power * log_q
            top = top[np.isfinite(top)]
            if top.size:
                ok = self._log_bound0 + power * self._log_q >= math.log(self.ROW_FLOOR) + float(top.max())
                lo = int(np.argmax(ok)) if ok.any() else 0
        self._rows[power] = lo
        return lo

    def measure(self, gamma: Gamma, weighted: bool, singular: int = 0) -> Measure:
        """The discretised ``ν(dQ) = E[ŵ^{2γ} (P); |ŵ|² ∈ dQ]`` (density method, else Gauss rule), for integrands
        bounded by ``Q^{−singular/2}`` as ``Q → 0``."""
        return self.measures([(gamma, weighted, singular)])[0]

    def measures(self, requests: "Sequence[tuple[Gamma, bool, int]]") -> list[Measure]:
        """:meth:`measure` of each ``(γ, weighted, singular)`` of ``requests``; the ones not cached are computed
        together, in one compiled loop (:func:`~featureode.kernel.loops.talbot_densities`). A ``(γ, weighted)``
        asked several times is discretised once, on the rows the most singular of its integrands needs."""
        first: dict[tuple[Gamma, bool], int] = {}
        for gamma, weighted, singular in requests:
            key = (gamma, bool(weighted))
            lo = self.first_row(gamma, weighted, singular)
            first[key] = min(lo, first.get(key, lo))
        todo = []
        for key, lo in first.items():
            have = self._measures.get(key)
            if have is None or have[0] > lo:   # not computed on at least these rows
                todo.append((key[0], key[1], lo))
        if todo:
            self._densities(todo)
        return [self._measures[(gamma, bool(weighted))][1] for gamma, weighted, _ in requests]

    def _densities(self, todo: "list[tuple[Gamma, bool, int]]") -> None:
        """The density method for each ``(γ, weighted, lo)`` of ``todo`` on its rows ``lo:hi`` (``ν̂_γ`` = the Talbot
        sum of ``base · Π_i (1 + 2 z g_i)^{−γ_i}``, times the factor of ``P`` over its mass when weighted); the rows
        end at ``mean + 12 sd + 80 g_0`` of the law. A law whose grid does not reproduce its exact mass, mean and
        second moment to ``CHECK`` gets the Gauss rule."""
        G = len(todo)
        counts = [len(t[0]) for t in todo]
        own = np.repeat(np.arange(G), counts)                     # the law each factor (i, γ_i) belongs to
        dims = np.array([i for t in todo for i, _ in t[0]], dtype=np.int64)
        exps = np.array([n for t in todo for _, n in t[0]], dtype=np.int64)
        weighted = np.array([t[1] for t in todo], dtype=bool)
        gd, hd = self.g[dims], self.h[dims]

        def s(n: int) -> np.ndarray:          # Σ_i (2γ_i + 1) g_i^n of every law
            return self._psum[n] + 2 * np.bincount(own, weights=exps * gd**n, minlength=G)

        def ps(n: int) -> np.ndarray:         # Σ_i (2γ_i + 1) h_i g_i^{n−1} (the sums of the factor P)
            return self._hsum[n] + 2 * np.bincount(own, weights=exps * hd * gd ** (n - 1), minlength=G)

        gf = self._gf
        mass = np.array([math.prod(_double_factorial(2 * n - 1) * gf[i] ** n for i, n in t[0]) for t in todo])
        mean, var = s(1), 2 * s(2)
        norm = np.where(weighted, ps(2), 1.0)
        # the factor P adds the cumulants of Σ_n (2t)^n s_{n+2}/s_2 (s_n → ps for P = Σ h_i ŵ_i²):
        # κ_1 += 2 s_3/s_2, κ_2 += 8 s_4/s_2 − 4 (s_3/s_2)²
        r3, r4 = ps(3) / norm, ps(4) / norm
        mean = np.where(weighted, mean + 2 * r3, mean)
        var = np.where(weighted, var + 8 * r4 - 4 * r3**2, var)
        mass = mass * norm
        lo = np.array([t[2] for t in todo], dtype=np.int64)
        hi = np.maximum(lo, np.searchsorted(self.Q, mean + 12 * np.sqrt(var) + 80 * self._top, side="right"))
        L, H = int(lo.min()), int(hi.max())
        used, slot = np.unique(dims, return_inverse=True)          # the directions any law has a factor in
        z = self.z[L:H]
        recip = 1 / (1 + 2 * self.g[used][:, None, None] * z[None]) if used.size else \
            np.ones((1,) + z.shape, dtype=complex)
        starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        wcoef = np.where(weighted[own], 2 * exps * hd * gd, 0.0)
        from featureode.kernel.loops import talbot_densities

        with np.errstate(all="ignore"):
            dens = talbot_densities(self.base(L, H), self.p_base(L, H), recip, lo - L, hi - L,
                                    slot.astype(np.int64), exps, starts, wcoef, np.where(weighted, norm, 0.0))
        dens[~np.isfinite(dens)] = 0.0
        Q = self.Q[L:H]
        wd = self.wq[L:H] * dens
        moments = np.stack([np.sum(wd, axis=1), wd @ Q, wd @ (Q * Q)], axis=1)
        exact = np.stack([np.ones(G), mean, var + mean**2], axis=1)
        ok = np.all(np.abs(moments - exact) <= self.CHECK * exact, axis=1)
        for n, (gamma, wt, low) in enumerate(todo):
            if ok[n]:
                nz = np.nonzero(dens[n])[0]
                out = Measure(float(mass[n]), Q[nz], wd[n, nz], nz + L)
            else:
                h = None if self.h is self.g else tuple(float(x) for x in self.h)
                nodes, weights = gauss_rule(tuple(self.g), gamma, wt, self.N_GAUSS, h)
                out = Measure(float(mass[n]), nodes, weights, None)
            self._measures[(gamma, wt)] = (low, out)


@lru_cache(maxsize=8)   # a QLaw holds ~1–15 MB (contour arrays and per-direction powers)
def q_law(g: "tuple[float, ...]", step: float = STEP, tilt: float = 0.0) -> QLaw:
    """The shared :class:`QLaw` of a spectrum (configs that differ only in γ, target or activation share it).

    ``tilt = κ > 0``: the law tilted by ``e^{κQ}``, i.e. ``ŵ_i ~ N(0, g_i/(1 − 2κ g_i))`` with ``P = Σ_i g_i ŵ_i²``
    still weighted by the data's ``g``: ``E_g[ŵ^{2γ} (P) F(Q)] = tilt_factor(g, κ) · E_tilted[ŵ^{2γ} (P) F(Q) e^{−κQ}]``
    (the ratio of the Gaussian densities), for integrands ``F`` growing like ``e^{κQ}``."""
    if tilt == 0:
        return QLaw(g, step)
    g_arr = np.asarray(g, dtype=float)
    if not np.all(2 * tilt * g_arr < 1):
        raise InitLawError(f"the law of |ŵ|² cannot be tilted by e^{{{tilt:g} Q}}: E[e^{{κ|ŵ|²}}] diverges for "
                           f"2κ g_0 ≥ 1 (2κ g_0 = {2 * tilt * float(g_arr.max()):.6g})")
    return QLaw(tuple(float(x) for x in g_arr / (1 - 2 * tilt * g_arr)), step, p_weights=g)


def tilt_factor(g: "tuple[float, ...]", tilt: float) -> float:
    """``E_g[e^{κ|ŵ|²}] = Π_i (1 − 2κ g_i)^{−1/2}``, the mass the tilted law of :func:`q_law` leaves out."""
    return float(np.prod((1 - 2 * tilt * np.asarray(g, dtype=float)) ** -0.5)) if tilt else 1.0


# ----------------------------------------------------------------------------------------------------------------
# Gauss rule from the exact cumulants
# ----------------------------------------------------------------------------------------------------------------
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


def _cumulants(g: tuple[float, ...], gamma: Gamma, weighted: bool, n_max: int, dps: int,
               h: "tuple[float, ...] | None" = None) -> list[mpmath.mpf]:
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
            if h is None:
                ps = s
            else:   # P = Σ h_i ŵ_i²: s_n → Σ_i (2γ_i+1) h_i g_i^{n−1}
                gam = dict(gamma)

                def ps(n: int) -> mpmath.mpf:
                    return mpmath.fsum((1 + 2 * gam.get(i, 0)) * mpmath.mpf(h[i]) * mpmath.mpf(g[i]) ** (n - 1)
                                       for i in range(len(g)))
            a = [mpmath.mpf(2) ** n * ps(n + 2) / ps(2) for n in range(n_max + 1)]
            log = [mpmath.mpf(0)] * (n_max + 1)   # series of log A(t), A = Σ a_n t^n, a_0 = 1
            for n in range(1, n_max + 1):
                log[n] = a[n] - mpmath.fsum(k * log[k] * a[n - k] for k in range(1, n)) / n
            kappa = [kappa[n] + mpmath.factorial(n) * log[n] for n in range(n_max + 1)]
        return kappa


@lru_cache(maxsize=4096)
def gauss_rule(g: tuple[float, ...], gamma: Gamma, weighted: bool, n: int,
               h: "tuple[float, ...] | None" = None) -> tuple[np.ndarray, np.ndarray]:
    """Gauss rule ``(nodes, weights)`` with ``n`` nodes for the normalised ``ν(dQ) ∝ E[ŵ^{2γ} (P); |ŵ|² ∈ dQ]``.

    Moments of the standardised ``y = (Q − κ_1)/sqrt(κ_2)`` come from the exact cumulants; the Chebyshev algorithm
    turns them into the three-term recurrence (mpmath, ``40 + 3n`` digits, ample for the Hankel conditioning) and
    Golub–Welsch gives nodes and weights (float64, well conditioned).
    """
    dps = 40 + 3 * n
    kappa = _cumulants(g, gamma, weighted, 2 * n, dps, h)
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
        raise InitLawError(f"the Gauss rule for |ŵ|² produced a non-positive node ({nodes.min():.3g}); the density "
                           "method should have been used — please report this spectrum")
    return nodes, vec[0] ** 2


# ----------------------------------------------------------------------------------------------------------------
# the bias rule
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BiasRule:
    """Nodes and weights in ``b ~ N(0, σ_b²)`` at each ``Q``: shape ``(len(Q), n)``, or ``(1, n)`` when independent
    of ``Q``.

    ``σ_b = 0``: the single node 0. Smooth σ (``smooth``): Gauss–Hermite with ``n_b`` nodes. Non-smooth σ (a
    classical order): the trapezoidal rule in ``v`` with ``b = c sinh(v)``, ``c = min(|ŵ|, σ_b)/4``, which resolves
    the ``b``-structure of width ``|ŵ|`` around 0 at every ``Q``; the number of nodes is set by the smallest ``Q``
    of the grid the rule is first used on (``n_sinh``)."""

    bias_std: float
    smooth: bool
    step: float = STEP
    n_b: int = 64

    def nodes(self, Q: np.ndarray, n_sinh: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(b, w)`` for the points ``Q``; ``n_sinh`` fixes the node count of the sinh rule (default: from ``Q``)."""
        sb = self.bias_std
        if sb == 0:
            return np.zeros((1, 1)), np.ones((1, 1))
        if self.smooth:
            x, w = np.polynomial.hermite_e.hermegauss(self.n_b)
            return sb * x[None, :], (w / math.sqrt(2 * math.pi))[None, :]
        c = np.minimum(np.sqrt(Q), sb) / 4
        vmax = np.arcsinh(12 * sb / c)
        n = n_sinh if n_sinh is not None else self.sinh_count(Q)
        x = np.linspace(-1, 1, n)
        v = vmax[:, None] * x[None, :]
        b = c[:, None] * np.sinh(v)
        dens = np.exp(-0.5 * (b / sb) ** 2) / (sb * math.sqrt(2 * math.pi))
        return b, c[:, None] * np.cosh(v) * (vmax[:, None] * (x[1] - x[0])) * dens

    def sinh_count(self, Q: np.ndarray) -> int:
        """Node count of the sinh rule resolving the smallest ``Q``."""
        c = np.minimum(np.sqrt(Q), self.bias_std) / 4
        return int(2 * np.arcsinh(12 * self.bias_std / c).max() / self.step) | 1


@lru_cache(maxsize=64)
def bias_rule(bias_std: float, smooth: bool, step: float = STEP) -> BiasRule:
    """The shared :class:`BiasRule` of one ``σ_b``."""
    return BiasRule(float(bias_std), bool(smooth), float(step))
