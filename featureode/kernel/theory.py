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
(:mod:`featureode.kernel.initlaw`). ``E[a²]`` is the parametrization's readout variance, used exactly.

Layout: :func:`pair_terms` is the one per-neuron formula (each part of ``K_{αβ}`` as a sum of
``E[ŵ^{2γ} (P) m_j m_k]``); :class:`QuadratureAverager` (law of ``Q`` × :class:`MeanTable` of ``E_b[m_j m_k]``) and
:class:`MonteCarloAverager` evaluate it; :func:`check_integrable` refuses averages that do not exist; a
:class:`~featureode.kernel.network.Network` carries the shared quadrature state.
HEA (DESIGN §4): on the unit sphere, Mehler's formula gives ``Θ(ρ) = Σ_l Λ_l ρ^l / l!`` with
``Λ_l = (l+1) E_b[m_l(b, 1)²] + E_b[m_{l+1}(b, 1)²]``, and ``λ_β^HEA = Λ_{|β|} g^β``.
Closure constants: ``c_l = E_k[a² m_l(b, |ŵ|)²]``, ``κ = γ² c_1 / Λ_1²``.
"""
from __future__ import annotations

import itertools
import math
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import sympy as sp

from featureode.calculus.activations import B, S, Activation, ActivationError, get_activation
from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.kernel.initlaw import MAX_ORDER, STEP, BiasRule, Gamma, QGrid, bias_rule, gauss_rule, q_law
from featureode.kernel.network import Network, checked_bias_std, checked_spectrum
from featureode.kernel.parametrization import PARTS

__all__ = [
    "KernelError", "KernelTheory", "Network", "Term", "pair_terms", "exact_eigenvalues", "gram_matrix",
    "level_coefficients", "level_coefficient_exprs", "hea_eigenvalues", "closure_constants", "extended_basis",
    "kernel_theory", "kernel_theory_batch", "kernel_report", "compare_exact_hea", "exact_vs_hea_figure",
    "network_gram", "network_eigenvalues", "network_closure", "clear_caches", "STEP", "MAX_ORDER",
]

#: Largest number of candidate modes :func:`extended_basis` enumerates.
MAX_CANDIDATES = 200_000
#: Measured cost (seconds) of one mode pair of a Gram matrix (≈ 2.5e-4 s on a fresh spectrum, one core; rounded
#: up), used in the cost estimates of error messages.
_PAIR_COST_S = 5e-4


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
    parts of ``gram`` (``None`` when ``gram`` is); ``activation``, ``bias_std``: the network they belong to, and
    ``network`` the :class:`~featureode.kernel.network.Network` itself (``None`` for hand-built theories).
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
    network: Network | None = field(default=None, compare=False, repr=False)

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
def singular_power(act: Activation, bias_std: float, j: int, k: int) -> int:
    """``e`` with ``E_b[m_j m_k](Q) = O(Q^{−e/2})`` as ``Q → 0`` (0 for smooth σ).

    Beyond the classical order ``r`` of σ, ``m_k(b, s) ~ s^{−(k−r)}`` near ``b = 0``; averaging the product over
    ``b`` (σ_b > 0) gains one power of ``s``.
    """
    r = act.classical_order
    if r is None or (bias_std == 0 and any(act.vanishes_at_zero_bias(o) for o in (j, k))):
        return 0
    return max(0, max(0, j - r) + max(0, k - r) - (1 if bias_std > 0 else 0))


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
            f"order {o}, beyond the classical order {r} of {act.name}; it grows like s^-{o - r} as the "
            f"neuron scale s = |ŵ| → 0 and its average over the init law (d = {dim}, σ_b = {bias_std}) "
            f"diverges, so this kernel entry does not exist; use a smoother activation or lower-degree modes")
    return e


# ----------------------------------------------------------------------------------------------------------------
# averagers: quadrature over (Q, b), Monte Carlo over neurons
# ----------------------------------------------------------------------------------------------------------------
def _finite_means(act: Activation, k: int, b: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``m_k(b, s)`` with non-finite values (``s → 0`` corners of non-smooth σ) set to 0."""
    with np.errstate(all="ignore"):
        vals = act.mean_numpy(k)(b, s)
    return np.where(np.isfinite(vals), vals, 0.0)


class MeanTable:
    """``F_{jk}(Q) = E_b[m_j(b, sqrt(Q)) m_k(b, sqrt(Q))]`` of one activation and bias rule on a :class:`QGrid`
    (rows computed lazily, kept for every spectrum whose grid starts at the same ``y_0``)."""

    def __init__(self, act: Activation, rule: BiasRule, y0: float, step: float):
        self.act, self.rule = act, rule
        n = int(math.ceil((math.log(1 + QGrid.TAIL + 4 * MAX_ORDER) - math.log(QGrid.Q_MIN)) / step)) + 2
        self.grid = QGrid(y0, step, n)
        Q = self.grid.Q
        self.b, self.wb = rule.nodes(Q, rule.sinh_count(Q[:1]) if rule.bias_std > 0 and not rule.smooth else None)
        self._m: dict[int, np.ndarray] = {}
        self._F: dict[tuple[int, int], np.ndarray] = {}

    def _rows_b(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.b.shape[0] > 1:
            return self.b[rows], self.wb[rows]
        return np.broadcast_to(self.b, (rows.size, self.b.shape[1])), self.wb

    def m(self, k: int, rows: np.ndarray) -> np.ndarray:
        """``m_k(b, sqrt(Q))`` on the ``(Q, b)`` nodes of rows ``rows``."""
        cache = self._m.get(k)
        if cache is None:
            cache = self._m[k] = np.full((self.grid.n, self.b.shape[1]), np.nan)
        todo = rows[np.isnan(cache[rows, 0])]
        if todo.size:
            b, _ = self._rows_b(todo)
            cache[todo] = _finite_means(self.act, k, b, np.sqrt(self.grid.Q[todo])[:, None] * np.ones_like(b))
        return cache[rows]

    def F(self, j: int, k: int, rows: np.ndarray) -> np.ndarray:
        """``F_{jk}`` at grid rows ``rows``."""
        cache = self._F.get((j, k))
        if cache is None:
            cache = self._F[(j, k)] = np.full(self.grid.n, np.nan)
        todo = rows[np.isnan(cache[rows])]
        if todo.size:
            _, wb = self._rows_b(todo)
            with np.errstate(all="ignore"):
                vals = np.sum(self.m(j, todo) * self.m(k, todo) * wb, axis=1)
            cache[todo] = np.where(np.isfinite(vals), vals, 0.0)
        return cache[rows]

    def F_at(self, j: int, k: int, Q: np.ndarray) -> np.ndarray:
        """``F_{jk}`` at arbitrary points ``Q`` (nodes of a Gauss rule)."""
        b, wb = self.rule.nodes(Q)
        b = np.broadcast_to(b, (Q.size, b.shape[1]))
        s = np.sqrt(Q)[:, None] * np.ones_like(b)
        with np.errstate(all="ignore"):
            mj = _finite_means(self.act, j, b, s)
            mk = mj if k == j else _finite_means(self.act, k, b, s)
            vals = np.sum(mj * mk * wb, axis=1)
        return np.where(np.isfinite(vals), vals, 0.0)


@lru_cache(maxsize=8)   # a table holds m_k on up to ~600 × 630 nodes per order k
def _mean_table(act: Activation, rule: BiasRule, y0: float, step: float) -> MeanTable:
    return MeanTable(act, rule, y0, step)


class QuadratureAverager:
    """Deterministic ``E[ŵ^{2γ} (P) m_j m_k] = mass · Σ_Q w(Q) F_{jk}(Q)`` over the init law of a :class:`Network`:
    the measure from the network's :class:`~featureode.kernel.initlaw.QLaw`, ``F`` from the shared :class:`MeanTable`.

    On the grid, points where the weight times the bound ``Q^{−e/2}`` on ``F`` is below ``1e-20`` of its maximum
    are skipped (they cannot contribute in double precision)."""

    def __init__(self, net: Network):
        self.net = net
        self.law = net.q_law
        self.table = _mean_table(net.activation, net.bias_rule, self.law.grid.y0, net.step)
        self._integrals: dict[tuple[Gamma, bool, int, int], float] = {}

    def integral(self, gamma: Gamma, weighted: bool, j: int, k: int) -> float:
        """``E_{b,ŵ}[ŵ^{2γ} (P) m_j(b, |ŵ|) m_k(b, |ŵ|)]`` (``P = Σ_i g_i ŵ_i²`` when ``weighted``)."""
        j, k = min(j, k), max(j, k)
        key = (gamma, weighted, j, k)
        val = self._integrals.get(key)
        if val is None:
            e = check_integrable(self.net.activation, self.net.bias_std, self.net.dim,
                                 Term("", 1.0, gamma, weighted, j, k))
            ms = self.law.measure(gamma, weighted, e)
            if ms.rows is not None:
                w = ms.w
                bound = np.abs(w) * ms.Q ** (-e / 2) if e else np.abs(w)
                keep = bound > 1e-20 * bound.max()
                val = ms.mass * float(np.sum(w[keep] * self.table.F(j, k, ms.rows[keep])))
            else:
                val = ms.mass * float(np.sum(ms.w * self.table.F_at(j, k, ms.Q)))
            self._integrals[key] = val
        return val

    def value(self, terms: Sequence[Term]) -> dict[str, float]:
        """``Σ coefficient · integral`` per part (the most singular integrands first, so that each measure is
        discretised once, on the most rows any of them needs)."""
        for t in sorted(terms, key=lambda t: -(t.j + t.k)):
            self.integral(t.gamma, t.weighted, t.j, t.k)
        out: dict[str, float] = {}
        for t in terms:
            out[t.part] = out.get(t.part, 0.0) + t.coefficient * self.integral(t.gamma, t.weighted, t.j, t.k)
        return out


class MonteCarloAverager:
    """Monte Carlo over ``n_neurons`` init neurons ``(ŵ, b)`` of the same terms (mean and standard error of the
    mean of each sum of terms, per neuron; ``E[a²]`` enters through the terms' coefficients, exactly)."""

    def __init__(self, net: Network, n_neurons: int, seed: int, chunk: int = 50_000):
        self.net, self.n, self.seed, self.chunk = net, int(n_neurons), int(seed), int(chunk)

    def values(self, groups: Sequence[Sequence[Term]]) -> tuple[np.ndarray, np.ndarray]:
        """For each group of terms: the Monte Carlo mean of ``Σ coefficient · ŵ^{2γ} (P) m_j m_k`` and its standard
        error."""
        g, act = self.net.g, self.net.activation
        rng = np.random.default_rng(self.seed)
        sums, sq = np.zeros(len(groups)), np.zeros(len(groups))
        orders = sorted({o for grp in groups for t in grp for o in (t.j, t.k)})
        done = 0
        while done < self.n:
            n = min(self.chunk, self.n - done)
            w = rng.standard_normal((n, g.size)) * np.sqrt(g)
            b = rng.standard_normal(n) * self.net.bias_std
            s = np.sqrt(np.sum(w * w, axis=1))
            pw = np.sum(g * w * w, axis=1)
            mk = {o: act.mean_numpy(o)(b, s) for o in orders}
            for idx, grp in enumerate(groups):
                val = np.zeros(n)
                for t in grp:
                    mono = np.ones(n)
                    for i, e in t.gamma:
                        mono = mono * w[:, i] ** (2 * e)
                    if t.weighted:
                        mono = mono * pw
                    val = val + t.coefficient * mono * mk[t.j] * mk[t.k]
                sums[idx] += val.sum()
                sq[idx] += (val**2).sum()
            done += n
        mean = sums / self.n
        var = np.maximum(sq / self.n - mean**2, 0) / max(self.n - 1, 1)
        return mean, np.sqrt(var)


# ----------------------------------------------------------------------------------------------------------------
# shared state: one averager per network
# ----------------------------------------------------------------------------------------------------------------
_AVERAGERS: "OrderedDict[tuple, QuadratureAverager]" = OrderedDict()
_AVERAGERS_MAX = 16


def quadrature(net: Network) -> QuadratureAverager:
    """The (shared, bounded-cache) quadrature averager of a network: networks with equal :meth:`Network.key`
    share their integrals."""
    key = net.key()
    avg = _AVERAGERS.get(key)
    if avg is None:
        avg = _AVERAGERS[key] = QuadratureAverager(net)
        while len(_AVERAGERS) > _AVERAGERS_MAX:
            _AVERAGERS.popitem(last=False)
    else:
        _AVERAGERS.move_to_end(key)
    return avg


def clear_caches() -> None:
    """Forget every shared quadrature state (laws of ``|ŵ|²``, bias rules, mean tables, integrals)."""
    _AVERAGERS.clear()
    for f in (_mean_table, q_law, bias_rule, gauss_rule, _level_coefficients):
        f.cache_clear()


def _g_of(spectrum: "Spectrum | Sequence[float] | np.ndarray") -> tuple[float, ...]:
    return checked_spectrum(spectrum, KernelError)


def _bias_of(bias_std: float) -> float:
    return checked_bias_std(bias_std, KernelError)


def _network(spectrum: "Spectrum | Sequence[float]", activation: "str | Activation", bias_std: float,
             step: float = STEP) -> Network:
    return Network.build(activation, _g_of(spectrum), _bias_of(bias_std), step=step)


def _modes_of(modes: Iterable["Mode | str"], d: int) -> list[Mode]:
    out = [m if isinstance(m, Mode) else Mode.parse(m) for m in modes]
    for m in out:
        m.check_dim(d)
    return out


def _estimate_cost_s(n_modes: int) -> float:
    """Rough cost of a Gram matrix on ``n_modes`` modes (every pair treated as coupled: an upper estimate)."""
    return n_modes * (n_modes + 1) // 2 * _PAIR_COST_S


# ----------------------------------------------------------------------------------------------------------------
# network level: Gram matrices, eigenvalues, closure constants
# ----------------------------------------------------------------------------------------------------------------
def network_gram(net: Network, modes: Sequence[Mode], max_cost_s: float = 600.0) -> dict[str, np.ndarray]:
    """``{"readout", "weights", "bias", "total"}`` of the init Gram matrix of ``net`` on ``modes`` (quadrature)."""
    cost = _estimate_cost_s(len(modes))
    if cost > max_cost_s:
        raise KernelError(f"a Gram matrix on {len(modes)} modes needs ~{len(modes) * (len(modes) + 1) // 2} mode "
                          f"pairs, estimated {cost:.0f} s (limit {max_cost_s:.0f} s); lower the number of modes "
                          "(ode.extended_max_modes) or raise max_cost_s")
    avg, g, ea = quadrature(net), net.g, net.readout_variance
    n = len(modes)
    out = {k: np.zeros((n, n)) for k in PARTS}
    for i in range(n):
        for j in range(i, n):
            vals = avg.value(pair_terms(modes[i], modes[j], g, ea))
            for name in PARTS:
                out[name][i, j] = out[name][j, i] = vals.get(name, 0.0)
    out["total"] = out["readout"] + out["weights"] + out["bias"]
    return out


def network_eigenvalues(net: Network, modes: Sequence[Mode]) -> np.ndarray:
    """Exact ``λ_β(0) = K_{ββ}`` of ``net`` per mode (quadrature)."""
    avg, g, ea = quadrature(net), net.g, net.readout_variance
    out = []
    for m in modes:
        vals = avg.value(pair_terms(m, m, g, ea))
        out.append(vals.get("readout", 0.0) + vals.get("weights", 0.0) + vals.get("bias", 0.0))
    return np.array(out)


def network_closure(net: Network, max_level: int) -> np.ndarray:
    """``c_l`` of ``net`` for ``l = 0 … max_level``."""
    avg = quadrature(net)
    return np.array([avg.value([closure_term(l, net.readout_variance)])["closure"]
                     for l in range(int(max_level) + 1)])


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
    ``parts=True`` returns ``{"readout", "weights", "bias", "total"}``. Deterministic quadrature (grid ``step``);
    raises :class:`KernelError` when the estimated cost exceeds ``max_cost_s``.
    """
    g = _g_of(spectrum)
    ms = _modes_of(modes, len(g))
    out = network_gram(_network(g, activation, bias_std, step), ms, max_cost_s)
    return out if parts else out["total"]


def exact_eigenvalues(modes: Iterable["Mode | str"], spectrum: "Spectrum | Sequence[float]",
                      activation: "str | Activation", bias_std: float, *, method: str = "quadrature",
                      step: float = STEP, n_neurons: int = 200_000,
                      seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Exact infinite-width ``λ_β(0) = E_{x,x'}[h_β Θ h_β] = E_k[A_β² + a²(Σ_i G_{βi}² + H_β²)]`` per mode.

    Returns ``(values, stderr)``. ``method="quadrature"`` (default) is deterministic (stderr 0; grid ``step``);
    ``method="montecarlo"`` averages the same per-neuron terms (:func:`pair_terms`) over ``n_neurons`` init neurons
    and returns the standard error of the mean (``E[a²]`` used exactly).
    """
    g = _g_of(spectrum)
    ms = _modes_of(modes, len(g))
    net = _network(g, activation, bias_std, step)
    if method == "quadrature":
        return network_eigenvalues(net, ms), np.zeros(len(ms))
    if method == "montecarlo":
        groups = [pair_terms(m, m, net.g, net.readout_variance) for m in ms]
        return MonteCarloAverager(net, n_neurons, seed).values(groups)
    raise KernelError(f"method must be 'quadrature' or 'montecarlo', got {method!r}")


def closure_constants(activation: "str | Activation", spectrum: "Spectrum | Sequence[float]", bias_std: float,
                      max_level: int, *, step: float = STEP) -> np.ndarray:
    """``c_l = E_k[a_k² m_l(b_k, |ŵ_k|)²]`` for ``l = 0 … max_level`` (deterministic over ``|ŵ|²`` and ``b``)."""
    return network_closure(_network(spectrum, activation, bias_std, step), max_level)


# ----------------------------------------------------------------------------------------------------------------
# HEA level coefficients
# ----------------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=64)
def _level_coefficients(act: Activation, bias_std: float, max_level: int, n_b: int) -> np.ndarray:
    b, w = BiasRule(bias_std, True, n_b=n_b).nodes(np.ones(1))   # Gauss–Hermite in b (the point 0 for σ_b = 0)
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
def kernel_theory(cfg: Any, basis: str | None = None, with_gram: bool = False, *, network: Network | None = None,
                  target: Any = None) -> KernelTheory:
    """All init kernel quantities of a :class:`~featureode.config.Config` for the feature ODE.

    ``basis``: ``"target"`` (the target's modes) or ``"extended"`` (:func:`extended_basis` with
    ``ode.extended_degree``/``ode.extended_max_modes``; the Gram matrix is always included then); ``None`` takes
    ``cfg.ode.basis``. ``target`` holds ``v_β`` on the chosen modes. ``network`` (a :class:`Network` of ``cfg``,
    e.g. from :meth:`Network.from_config`) and ``target`` (``cfg.target_obj()``) skip rebuilding them.
    """
    basis = basis or cfg.ode.basis
    if basis not in ("target", "extended"):
        raise KernelError(f"basis must be 'target' or 'extended', got {basis!r}")
    if network is None or target is None:
        spectrum = network.spectrum if network is not None and network.spectrum is not None else cfg.spectrum()
        network = network or Network.from_config(cfg, spectrum)
        target = target if target is not None else cfg.target_obj(spectrum)
    return _theory(network, target, float(cfg.network.richness), basis, with_gram, cfg.ode.extended_degree,
                   cfg.ode.extended_max_modes)


def _theory(net: Network, target: Any, gamma: float, basis: str, with_gram: bool, extended_degree: int,
            extended_max_modes: int) -> KernelTheory:
    g = net.g
    if basis == "extended":
        modes = extended_basis(target.modes, net.dim, extended_degree, extended_max_modes, g=g)
    else:
        modes = list(target.modes)
    for m in modes:
        m.check_dim(net.dim)
    coeffs = target.as_dict()
    v = np.array([coeffs.get(m, 0.0) for m in modes])
    top = max(1, max((m.degree for m in modes), default=0))
    lam = level_coefficients(net.activation, net.bias_std, top)
    gram = parts = None
    if with_gram or basis == "extended":
        parts = network_gram(net, modes)
        gram = parts["total"]
        exact, stderr = np.diag(gram).copy(), np.zeros(len(modes))
    else:
        exact, stderr = network_eigenvalues(net, modes), np.zeros(len(modes))
    c = network_closure(net, top)
    # λ_β(0) is of order g^β c_{|β|} (HEA); "zero" is judged against g^β max_l c_l, a scale free of the mode's level
    dead = [str(m) for m, val, e in zip(modes, v, exact)
            if val != 0 and abs(e) <= 1e-10 * math.prod(g[i] ** n for i, n in m.items) * float(np.max(c))]
    if dead:
        act = net.activation
        warnings.warn(f"target mode(s) {', '.join(dead)} have init NTK eigenvalue λ_β(0) = 0 with activation "
                      f"{act.name!r} (σ_b = {net.bias_std:g}): the kernel has no component along them, and the "
                      "built-in feature-ODE variants scale λ_β(0), so their coefficients stay at 0. Choose an "
                      "activation whose Hermite coefficients of those degrees do not vanish (e.g. relu), or a "
                      "target without those modes.",
                      KernelWarning, stacklevel=3)
    return KernelTheory(
        modes=tuple(modes), target=v, g=g.copy(), gamma=gamma,
        lambda_exact=exact, lambda_exact_stderr=stderr, lambda_hea=hea_eigenvalues(modes, g, lam),
        level_coefficients=lam, c=c, gram=gram, gram_parts=parts,
        activation=net.activation.name, bias_std=net.bias_std, network=net)


def kernel_theory_batch(cfgs: Sequence[Any], basis: str | None = None,
                        with_gram: bool = False) -> list[KernelTheory]:
    """:func:`kernel_theory` of many configs at once, each shared piece computed once: the spectrum per ``[data]``
    table, the target per ``([data], [target])``, the network (law of ``|ŵ|²``, bias rule, means and every
    integral) per ``([data], activation, σ_b, parametrization)``. γ enters no init quantity, so configs that
    differ only in γ (or in training keys) cost one lookup each. Results equal :func:`kernel_theory` exactly."""
    spectra: dict[str, Spectrum] = {}
    targets: dict[tuple[str, str], Any] = {}
    nets: dict[tuple, Network] = {}
    out = []
    for cfg in cfgs:
        dkey = cfg.digest(("data",))
        if dkey not in spectra:
            spectra[dkey] = cfg.spectrum()
        spectrum = spectra[dkey]
        tkey = (dkey, cfg.digest(("target",)))
        if tkey not in targets:
            targets[tkey] = cfg.target_obj(spectrum)
        n = cfg.network
        nkey = (dkey, str(n.activation), float(n.bias_std), n.parametrization)
        if nkey not in nets:
            nets[nkey] = Network.from_config(cfg, spectrum)
        out.append(kernel_theory(cfg, basis, with_gram, network=nets[nkey], target=targets[tkey]))
    return out


def kernel_report(cfg: Any) -> dict[str, Any]:
    """``featureode kernel CONFIG --json`` (DESIGN §6): init eigenvalues of the target's modes and closure constants.

    Keys: ``modes``, ``exact``, ``exact_stderr`` (0: deterministic quadrature), ``hea``, ``c``,
    ``level_coefficients``; extra: ``target``, ``hea_over_exact``, ``exact_quadrature_error`` (difference to a rule
    with more nodes), ``kappa``, ``activation``, ``bias_std``, ``dim``, ``seconds``.
    """
    t0 = time.perf_counter()
    kt = kernel_theory(cfg, basis="target")
    net = kt.network
    finer = network_eigenvalues(Network(net.activation, net.g_key, net.bias_std, net.parametrization, STEP / 2),
                                list(kt.modes))
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
        "dim": net.dim,
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
