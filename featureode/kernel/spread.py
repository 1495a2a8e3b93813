"""Spectral spread of a mode under the kernel at initialization: the second moment ``‖Kφ_β‖²`` beside ``λ_β``.

For a unit-norm mode ``φ_β = h_β`` and a positive kernel operator ``K`` (on ``L²`` of the data law), the *spectral
measure* ``ν_β`` of ``φ_β`` is the law of the eigenvalue ``λ`` when ``φ_β`` is written in the eigenbasis of ``K``:
``⟨φ_β, F(K) φ_β⟩ = ∫ F(λ) dν_β(λ)`` for every function ``F``. Its mean is the Rayleigh quotient
``λ_β = ⟨φ_β, K φ_β⟩``, its second moment ``‖Kφ_β‖²`` and its variance ``‖Kφ_β‖² − λ_β² = Σ_{α≠β} K_{αβ}²`` (the
sum over all Hermite modes α, a complete orthonormal basis). Under the kernel flow the residual of a mode trained
alone decays as ``⟨φ_β, e^{−Kt} φ_β⟩ = ∫ e^{−λt} dν_β ≥ e^{−λ_β t}`` (Jensen): a spread slows the mode down.

Infinite width (``K_∞ = E_k[θ_k]``, the per-neuron kernel ``θ_k(x, x') = σ_kσ'_k + a_k² σ'_kσ'_k(x·x' + 1)``):
``‖K_∞φ_β‖² = Σ_α K_{αβ}²`` with ``K_{αβ} = 0`` unless ``α ≡ β`` mod 2 in every coordinate. :func:`kernel_row`
computes ``K_{αβ}`` by the kernel's deterministic quadrature (:func:`~featureode.kernel.theory.pair_terms`) on every
such α up to degree ``|β| + extra_degree``; the sum of the squares is a lower bound (every term is ≥ 0), and the rest
is estimated from the level sums ``S_n = Σ_{|α| = n} K_{αβ}²``, which fall geometrically in ``n`` (ratio
``r = S_top/S_{top−2}`` of the last two complete levels; tail ``S_top r/(1 − r)``).

Finite width ``N`` (meanfield: ``K_N = (1/N) Σ_k θ_k`` over i.i.d. init neurons): with the per-neuron function
``ψ_k = θ_k φ_β``, i.e. ``ψ_k(x) = A_k σ(u_k(x)) + a_k² σ'(u_k(x)) (G_k·x + H_k)`` (``A_k = E[h_β σ_k]``,
``G_k = E[h_β σ'_k x]``, ``H_k = E[h_β σ'_k]``),

    E‖K_N φ_β‖² = (1 − 1/N) ‖K_∞ φ_β‖² + (1/N) E_k‖ψ_k‖²,     E[λ_N²] = (1 − 1/N) λ_∞² + (1/N) E_k[λ_k²],

with ``λ_k = ⟨φ_β, ψ_k⟩ = A_k² + a_k²(|G_k|² + H_k²)``; so the expected variance is
``(1 − 1/N) var_∞ + (1/N) E_k[‖ψ_k‖² − λ_k²]``. The single-neuron term is an integral over one neuron:
with ``u = ŵ·z + b ~ N(b, s²)`` (``s = |ŵ|``) and ``G·x = c·z`` (``c_i = sqrt(g_i) G_i``) split into its part along
``ŵ`` and an independent rest, ``c·z = α_c (u − b) + ξ``, ``α_c = c·ŵ/s²``, ``Var ξ = τ² = |c|² − (c·ŵ)²/s²``,

    E_x[ψ_k²] = A² E[σ²] + 2 a² A E[σσ'(H + α_c(u − b))] + a⁴ (E[σ'²(H + α_c(u − b))²] + τ² E[σ'²]),

one-dimensional Gaussian integrals (Gauss–Legendre between the kinks of σ), averaged over ``a`` exactly
(``E[a²] = ρ``, ``E[a⁴] = 3ρ²``) and over ``(ŵ, b)`` by Monte Carlo over init neurons, with its standard error (the
1/N part is small at the widths of interest; its relative error is stated).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import sympy as sp

from featureode.calculus.activations import U, Activation, _numpy_namespace, _stable
from featureode.calculus.hermite import Mode
from featureode.kernel.averagers import quadrature
from featureode.kernel.basis import _support_patterns, same_parity_modes
from featureode.kernel.network import KernelError, Network
from featureode.kernel.perneuron import pair_terms

if TYPE_CHECKING:  # type-only import (the config sits above this layer)
    from featureode.config import Config

__all__ = ["SpreadRow", "ModeSpread", "coupled_modes", "kernel_row", "infinite_width_spread",
           "single_neuron_moments", "spread_at_init", "spread_of_config", "EXTRA_DEGREE", "MAX_ROW"]

#: Default extra degree of the candidate set of :func:`kernel_row` (all coupled α with ``|α| ≤ |β| + 4``).
EXTRA_DEGREE = 4
#: Most candidate modes per row; beyond it the extra degree is lowered (by 2 each time) until it fits.
MAX_ROW = 4000
#: Init neurons of the Monte Carlo average of the single-neuron term.
N_NEURONS = 40_000


# ----------------------------------------------------------------------------------------------------------------
# infinite width: one row of the Gram matrix over all coupled modes up to a degree
# ----------------------------------------------------------------------------------------------------------------
def coupled_modes(beta: Mode, dim: int, extra_degree: int) -> list[Mode]:
    """Every mode α with ``α ≡ β`` mod 2 in each of the ``dim`` coordinates and ``|α| ≤ |β| + extra_degree`` (the
    modes the init kernel can couple to β; β itself included), sorted by degree then mode order."""
    if isinstance(extra_degree, bool) or not isinstance(extra_degree, int) or extra_degree < 0:
        raise KernelError(f"extra_degree must be an integer ≥ 0, got {extra_degree!r}")
    beta.check_dim(dim)
    budget = beta.degree + extra_degree
    return sorted(set(same_parity_modes(beta, dim, budget)), key=lambda m: (m.degree, m.sort_key()))


def _count_coupled(beta: Mode, dim: int, extra_degree: int) -> int:
    budget = beta.degree + extra_degree
    free = dim - len(beta.items)
    return sum(sum(math.comb(free + k - 1, k) for k in range((budget - used) // 2 + 1))
               for _, used in _support_patterns(beta, budget))


def kernel_row(net: Network, beta: Mode, alphas: Sequence[Mode]) -> np.ndarray:
    """``K_{αβ}(0)`` of ``net`` (infinite width, quadrature) for each α of ``alphas``."""
    avg, g, ea = quadrature(net), net.g, net.readout_variance
    out = np.zeros(len(alphas))
    for n, vals in enumerate(avg.part_values([pair_terms(a, beta, g, ea) for a in alphas])):
        out[n] = sum(vals.values())
    return out


@dataclass(frozen=True)
class SpreadRow:
    """Infinite-width spread of one mode: ``lam = K_{ββ}``; ``truncated = Σ_{α ∈ row} K_{αβ}²`` (a lower bound of
    ``‖K_∞φ_β‖²``); ``levels`` = ``{n: S_n}``; ``tail`` = the geometric estimate of the rest (0 when the levels do
    not fall); ``extra_degree`` of the row; ``modes``/``row`` the couplings themselves."""

    mode: Mode
    lam: float
    truncated: float
    tail: float
    levels: dict[int, float]
    extra_degree: int
    modes: tuple[Mode, ...] = field(repr=False)
    row: np.ndarray = field(repr=False)

    @property
    def second_moment(self) -> float:
        """``‖K_∞φ_β‖²`` (truncated sum + tail estimate)."""
        return self.truncated + self.tail

    @property
    def variance(self) -> float:
        """``‖K_∞φ_β‖² − λ_β²``."""
        return self.second_moment - self.lam**2


def infinite_width_spread(net: Network, beta: Mode, extra_degree: int = EXTRA_DEGREE,
                          max_row: int = MAX_ROW) -> SpreadRow:
    """:class:`SpreadRow` of ``beta`` for ``net`` from the couplings to every mode up to degree
    ``|β| + extra_degree`` (lowered by 2 until at most ``max_row`` candidates)."""
    extra = int(extra_degree)
    while extra > 0 and _count_coupled(beta, net.dim, extra) > max_row:
        extra -= 2
    alphas = coupled_modes(beta, net.dim, extra)
    row = kernel_row(net, beta, alphas)
    levels: dict[int, float] = {}
    for a, k in zip(alphas, row):
        levels[a.degree] = levels.get(a.degree, 0.0) + float(k * k)
    lam = float(row[alphas.index(beta)])
    top = beta.degree + extra
    tail = 0.0
    if extra >= 2 and top - 2 >= beta.degree and levels.get(top - 2, 0.0) > 0:
        r = levels.get(top, 0.0) / levels[top - 2]
        if 0 < r < 1:
            tail = levels[top] * r / (1 - r)
    return SpreadRow(beta, lam, float(np.sum(row**2)), tail, levels, extra, tuple(alphas), row)


# ----------------------------------------------------------------------------------------------------------------
# the single-neuron term
# ----------------------------------------------------------------------------------------------------------------
def _derivative_numpy(act: Activation):
    """``σ'`` as a NumPy function (the classical derivative; kinks are integration breakpoints)."""
    return sp.lambdify(U, _stable(act.derivative_expr(1)), modules=[_numpy_namespace(), "scipy", "numpy"])


def _gauss_segments(b: np.ndarray, s: np.ndarray, kinks: np.ndarray, nodes: int, half_width: float
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Nodes ``t`` and weights ``w`` (per neuron, shape (n, K)) of ``E_{t~N(0,1)}[F(b + s t)]`` by Gauss–Legendre
    on ``[−L, L]`` split at the kinks ``t = (c − b)/s`` of σ (so each piece is smooth)."""
    x, wx = np.polynomial.legendre.leggauss(nodes)
    n = b.size
    cuts = (kinks[None, :] - b[:, None]) / s[:, None] if kinks.size else np.zeros((n, 0))
    edges = np.concatenate([np.full((n, 1), -half_width), np.clip(cuts, -half_width, half_width),
                            np.full((n, 1), half_width)], axis=1)
    edges.sort(axis=1)
    lo, hi = edges[:, :-1], edges[:, 1:]
    mid, rad = (hi + lo) / 2, (hi - lo) / 2
    t = mid[:, :, None] + rad[:, :, None] * x[None, None, :]
    w = rad[:, :, None] * wx[None, None, :] * np.exp(-t * t / 2) / math.sqrt(2 * math.pi)
    return t.reshape(n, -1), w.reshape(n, -1)


@dataclass(frozen=True)
class SingleNeuron:
    """Monte Carlo over init neurons (exact in ``a`` and in ``x``) of the single-neuron moments of one mode:
    ``psi_sq = E_k‖ψ_k‖²``, ``lam_sq = E_k[λ_k²]``, ``lam = E_k[λ_k]`` (a check: equals ``λ_∞``), ``var = E_k[‖ψ_k‖²
    − λ_k²]``, each with its standard error (``*_se``), over ``n`` neurons."""

    psi_sq: float
    psi_sq_se: float
    lam_sq: float
    lam: float
    lam_se: float
    var: float
    var_se: float
    n: int


def single_neuron_moments(net: Network, modes: Sequence[Mode], n_neurons: int = N_NEURONS, seed: int = 0,
                          nodes: int = 48, chunk: int = 4000) -> list[SingleNeuron]:
    """:class:`SingleNeuron` of each of ``modes`` for ``net`` (module docstring), from ``n_neurons`` init neurons
    ``ŵ ~ N(0, diag g)``, ``b ~ N(0, σ_b²)`` drawn with ``seed``; one-dimensional integrals by ``nodes``-point
    Gauss–Legendre per smooth piece of σ on ``|t| ≤ 12``."""
    act, g, rho = net.activation, net.g, net.readout_variance
    sig, dsig = act.numpy(), _derivative_numpy(act)
    kinks = np.array(sorted(float(c) for c in act.kinks), dtype=float)
    rng = np.random.default_rng(seed)
    orders = sorted({o for m in modes for o in (m.degree, m.degree + 1, m.degree + 2)})
    acc = {k: np.zeros((len(modes), 2)) for k in ("psi", "lsq", "lam", "var")}
    done = 0
    while done < n_neurons:
        n = min(chunk, n_neurons - done)
        w = rng.standard_normal((n, g.size)) * np.sqrt(g)
        b = rng.standard_normal(n) * net.bias_std
        s = np.sqrt(np.sum(w * w, axis=1))
        mk = {o: act.mean_numpy(o)(b, s) for o in orders}
        t, wt = _gauss_segments(b, s, kinks, nodes, 12.0)
        u = b[:, None] + s[:, None] * t
        with np.errstate(all="ignore"):
            sv = np.where(np.isfinite(sv := np.asarray(sig(u), float) * np.ones_like(u)), sv, 0.0)
            dv = np.asarray(dsig(u), float) * np.ones_like(u)
        dv = np.where(np.isfinite(dv), dv, 0.0)
        st = s[:, None] * t                                   # u − b
        e_ss = np.sum(wt * sv * sv, axis=1)
        e_sd, e_sdt = np.sum(wt * sv * dv, axis=1), np.sum(wt * sv * dv * st, axis=1)
        e_dd, e_ddt, e_ddtt = (np.sum(wt * dv * dv * st**k, axis=1) for k in (0, 1, 2))
        for j, m in enumerate(modes):
            p, norm = m.degree, 1 / math.sqrt(m.factorial)
            mono = np.ones(n)
            for i, e in m.items:
                mono = mono * w[:, i] ** e
            A = mono * mk[p] * norm
            H = mono * mk[p + 1] * norm
            G = w * (mono * mk[p + 2])[:, None]                # ŵ^β ŵ_i m_{p+2}
            for i, e in m.items:
                lower = np.ones(n)
                for i2, e2 in m.items:
                    lower = lower * w[:, i2] ** (e2 - (i2 == i))
                G[:, i] += e * lower * mk[p]
            G = G * np.sqrt(g)[None, :] * norm               # G_i = E[h σ' x_i]
            c = G * np.sqrt(g)[None, :]                       # G·x = c·z
            cw = np.sum(c * w, axis=1)
            alpha = cw / (s * s)
            tau2 = np.maximum(np.sum(c * c, axis=1) - cw * alpha, 0.0)
            gh = np.sum(G * G, axis=1) + H * H
            cross = H * e_sd + alpha * e_sdt                  # E[σσ'(H + α(u − b))]
            slope = H * H * e_dd + 2 * H * alpha * e_ddt + alpha**2 * e_ddtt + tau2 * e_dd
            psi = A * A * e_ss + 2 * rho * A * cross + 3 * rho**2 * slope
            lsq = A**4 + 2 * rho * A * A * gh + 3 * rho**2 * gh * gh
            lam = A * A + rho * gh
            for key, val in (("psi", psi), ("lsq", lsq), ("lam", lam), ("var", psi - lsq)):
                acc[key][j] += (val.sum(), (val * val).sum())
        done += n
    out = []
    for j in range(len(modes)):
        mean = {k: acc[k][j, 0] / n_neurons for k in acc}
        se = {k: math.sqrt(max(acc[k][j, 1] / n_neurons - mean[k] ** 2, 0.0) / max(n_neurons - 1, 1)) for k in acc}
        out.append(SingleNeuron(mean["psi"], se["psi"], mean["lsq"], mean["lam"], se["lam"], mean["var"], se["var"],
                                n_neurons))
    return out


# ----------------------------------------------------------------------------------------------------------------
# both together
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModeSpread:
    """The spread of one mode at init for width ``width``: ``infinite`` (:class:`SpreadRow`) and ``single``
    (:class:`SingleNeuron`)."""

    mode: Mode
    width: int
    infinite: SpreadRow
    single: SingleNeuron

    @property
    def lam(self) -> float:
        """``λ_β(0)`` (infinite width; also the mean over finite networks)."""
        return self.infinite.lam

    @property
    def second_moment(self) -> float:
        """``E‖K_Nφ_β‖² = (1 − 1/N)‖K_∞φ_β‖² + E_k‖ψ_k‖²/N``."""
        n = self.width
        return (1 - 1 / n) * self.infinite.second_moment + self.single.psi_sq / n

    @property
    def variance(self) -> float:
        """``E[‖K_Nφ_β‖² − λ_N²] = (1 − 1/N) var_∞ + E_k[‖ψ_k‖² − λ_k²]/N``."""
        n = self.width
        return (1 - 1 / n) * self.infinite.variance + self.single.var / n

    @property
    def relative_variance(self) -> float:
        """``variance / λ_β²`` (the ``s_β`` of the spread-aware flow; ``inf`` for ``λ_β = 0``)."""
        return self.variance / self.lam**2 if self.lam != 0 else math.inf

    @property
    def finite_width_part(self) -> float:
        """The 1/N part of :attr:`variance`: ``(E_k[‖ψ_k‖² − λ_k²] − var_∞)/N``."""
        return (self.single.var - self.infinite.variance) / self.width

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        inf, one = self.infinite, self.single
        return {"mode": str(self.mode), "width": self.width, "lambda": self.lam,
                "second_moment_infinite": inf.second_moment, "second_moment_truncated": inf.truncated,
                "tail_estimate": inf.tail, "extra_degree": inf.extra_degree, "row_modes": len(inf.modes),
                "variance_infinite": inf.variance, "single_neuron_psi_sq": one.psi_sq,
                "single_neuron_psi_sq_se": one.psi_sq_se, "single_neuron_variance": one.var,
                "single_neuron_variance_se": one.var_se, "second_moment": self.second_moment,
                "variance": self.variance, "relative_variance": self.relative_variance,
                "relative_variance_infinite": inf.variance / self.lam**2 if self.lam else None}


def spread_at_init(net: Network, modes: Sequence[Mode], width: int, extra_degree: int = EXTRA_DEGREE,
                   n_neurons: int = N_NEURONS, seed: int = 0) -> list[ModeSpread]:
    """:class:`ModeSpread` of each mode for ``net`` at width ``width`` (module docstring)."""
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width < 1:
        raise KernelError(f"width must be an integer ≥ 1, got {width!r}")
    ms = [m if isinstance(m, Mode) else Mode.parse(m) for m in modes]
    single = single_neuron_moments(net, ms, n_neurons, seed)
    return [ModeSpread(m, int(width), infinite_width_spread(net, m, extra_degree), one)
            for m, one in zip(ms, single)]


def spread_of_config(cfg: "Config", modes: "Sequence[Mode] | None" = None, extra_degree: int = EXTRA_DEGREE,
                     n_neurons: int = N_NEURONS) -> list[ModeSpread]:
    """:func:`spread_at_init` for a :class:`~featureode.config.Config` (its network, width, and the target's modes
    unless ``modes`` is given; neurons drawn with the config's seed)."""
    spectrum = cfg.spectrum()
    net = Network.from_config(cfg, spectrum)
    ms = list(modes) if modes is not None else list(cfg.target_obj(spectrum).modes)
    return spread_at_init(net, ms, int(cfg.network.width), extra_degree, n_neurons, int(cfg.training.seed))


# ----------------------------------------------------------------------------------------------------------------
# the shift of the spread-aware flow
# ----------------------------------------------------------------------------------------------------------------
def top_eigenvalue(net: Network) -> float:
    """An estimate of the top eigenvalue ``L`` of ``K_∞`` at init: the largest Rayleigh quotient among the constant
    and the linear modes ``z_i`` (the kernel's leading eigenfunctions are, up to small couplings, these modes)."""
    from featureode.kernel.theory import network_eigenvalues

    modes = [Mode()] + [Mode.from_dict({i: 1}) for i in range(net.dim)]
    return float(np.max(network_eigenvalues(net, modes)))


def two_point_shift(lam: float, variance: float, top: float) -> float:
    """``s = variance / (λ (L − λ))``: the relative shift ``1 − ℓ/λ`` of the slow atom ``ℓ`` of the two-point
    spectral measure with mean ``λ``, the given variance and its other atom at the top of the spectrum ``L``.

    Among the measures on ``[0, L]`` with this mean and variance, the two-point one with an atom at ``L`` gives the
    *smallest* residual ``E[e^{−λt}]`` at every ``t`` (Chebyshev–Markov–Krein: ``e^{−λt}`` has a negative third
    derivative in λ), ``w e^{−Lt} + (1 − w) e^{−ℓt}`` with ``ℓ = λ − var/(L − λ)``, ``w = var/((L − λ)² + var)``;
    the flow ``df/dt = ℓ (v − f)`` keeps its slow atom (the weight ``w`` at ``L`` is learned within ``~1/L``), so it
    is the least slowdown the spread implies. ``s ≥ 1`` (variance beyond ``λ(L − λ)``: not a measure on
    ``[0, L]``) is returned as 1 (``ℓ = 0``)."""
    if lam <= 0 or top <= lam:
        return 0.0 if variance <= 0 else 1.0
    return float(min(max(variance, 0.0) / (lam * (top - lam)), 1.0))


def spread_shift(net: Network, modes: Sequence[Mode], width: "int | None", extra_degree: int = EXTRA_DEGREE,
                 n_neurons: int = N_NEURONS, seed: int = 0) -> np.ndarray:
    """``s_β`` of :func:`two_point_shift` for each mode with the init variance at width ``width`` (``None``:
    infinite width, no 1/N part) and ``L`` = :func:`top_eigenvalue`."""
    ms = [m if isinstance(m, Mode) else Mode.parse(m) for m in modes]
    top = top_eigenvalue(net)
    if width is None:
        rows = [infinite_width_spread(net, m, extra_degree) for m in ms]
        return np.array([two_point_shift(r.lam, r.variance, top) for r in rows])
    return np.array([two_point_shift(s.lam, s.variance, top)
                     for s in spread_at_init(net, ms, int(width), extra_degree, n_neurons, seed)])
