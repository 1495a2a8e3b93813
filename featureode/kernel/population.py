"""The exact population loss of a two-layer network on Gaussian data, neuron pair by neuron pair.

A network ``f(z) = Σ_k a_k σ(ŵ_k·z + b_k)`` on whitened inputs ``z ~ N(0, I_d)`` (``ŵ_k = sqrt(g) ∘ w_k``; the
centred network of theory §3 is the trained neurons with readouts ``c a_k`` and the initial ones with ``−c a⁰_k``)
and a target ``f* = Σ_α v_α h_α(z)`` (what :meth:`Target.evaluate` gives and the network is trained on: its
constant is not part of it) have the population loss

    L = ½ E[(f − f*)²] = ½ (E[f²] − 2 E[f f*] + Σ_α v_α²),

    E[f²] = Σ_{k,l} a_k a_l C_kl,   C_kl = E[σ(u_k) σ(u_l)],
    E[f h_α] = Σ_k a_k m_{|α|}(b_k, s_k) Π_i ŵ_{ki}^{α_i} / sqrt(α_i!),

where ``(u_k, u_l)`` is Gaussian with means ``(b_k, b_l)``, variances ``s_k² = |ŵ_k|²``, ``s_l²`` and covariance
``c_kl = ŵ_k·ŵ_l``, and ``m_j(b, s) = E[σ^{(j)}(b + s ξ)]`` (Stein's lemma: ``E[σ(ŵ·z + b) He_α(z)] =
E[σ^{(|α|)}(u)] ŵ^α``). The second term uses the activation's closed-form means; the pair moments ``C_kl`` come from
a table of closed forms, one per activation:

* **relu**: with ``h = b_k/s_k``, ``k' = b_l/s_l``, ``ρ = c_kl/(s_k s_l)``, ``r = sqrt(1 − ρ²)`` and ``(X, Y)``
  standard Gaussian with correlation ``ρ``, ``C = s_k s_l E[(X + h)₊ (Y + k')₊]``, and the truncated bivariate
  moments (Rosenbaum 1961) give

      E[(X + h)₊ (Y + k')₊] = (h k' + ρ) Φ₂(h, k'; ρ) + k' φ(h) Φ((k' − ρh)/r) + h φ(k') Φ((h − ρk')/r)
                              + (r/2π) exp(−(h² − 2ρ h k' + k'²)/(2r²)),

  with the bivariate CDF ``Φ₂`` from Owen's ``T`` function; ``ρ = ±1`` (a neuron with itself, or a trained neuron
  that has not moved from its initial copy) by the one-dimensional limits;
* **erf**: Price's theorem ``∂C/∂c = E[σ'(u_k) σ'(u_l)]`` with ``erf' = (2/√π) e^{−u²}`` gives a Gaussian integral in
  closed form; integrating it from ``c = 0`` (where ``C = erf(μ_k) erf(μ_l)``, ``μ = b/sqrt(1 + 2s²)``) with
  ``2c' = D sin θ``, ``D = sqrt((1 + 2s_k²)(1 + 2s_l²))``, leaves

      C = erf(μ_k) erf(μ_l) + (2/π) ∫_0^{θ*} exp(−Q(θ)) dθ,   θ* = arcsin(2 c_kl / D),
      Q(θ) = [(1 + 2s_l²) b_k² − 2 D sin θ b_k b_l + (1 + 2s_k²) b_l²] / (D² cos² θ),

  a smooth integrand on a range that stays inside ``|θ| < π/2`` (``(2/π) arcsin(2c/D)`` at zero bias, the classical
  arcsine kernel). It is integrated by Gauss–Legendre rules of 24, 48, 96 and 192 nodes until two successive rules
  agree to :data:`QUADRATURE_TOL`; a pair that does not is a :class:`PopulationError`, not a number.

Other activations have no closed form here: :func:`population_loss` refuses them in one line that names the fix
(a larger test set, ``[training] n_test``). The tests check every formula against two-dimensional mpmath quadrature
and the loss against Monte Carlo with stated error bars (``theory_tests/test_population.py``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import sympy as sp
from scipy import special

from featureode.calculus.activation_calculus import U
from featureode.calculus.activations import Activation, get_activation
from featureode.calculus.hermite import Mode
from featureode.calculus.targets import Target
from featureode.core.errors import FeatureODEError

__all__ = ["PopulationError", "PopulationLoss", "pair_moments", "population_loss", "centred_neurons",
           "has_exact_population_loss", "smoothed_square", "QUADRATURE_TOL"]

#: Agreement two successive Gauss–Legendre rules must reach on every erf pair moment (absolute, plus this relative).
QUADRATURE_TOL = 1e-12
_RULES = (24, 48, 96, 192)
_PARALLEL = 1e-7   # r = sqrt(1 − ρ²) below this: the ρ = ±1 limit (C changes by O(r²) there)


class PopulationError(FeatureODEError, ValueError):
    """An exact population loss that cannot be computed (an activation without closed-form pair moments, a
    quadrature that did not converge, or arrays of the wrong shape)."""


@dataclass(frozen=True)
class PopulationLoss:
    """``loss = ½ E[(f − f*)²]`` with its parts ``network_sq = E[f²]``, ``overlap = E[f f*]`` and ``target_sq =
    E[f*²]`` (all exact); ``ratio = loss / (½ target_sq)`` is ``L/L(0)`` for a network that starts at ``f = 0``."""

    loss: float
    network_sq: float
    overlap: float
    target_sq: float

    @property
    def ratio(self) -> float:
        return self.loss / (0.5 * self.target_sq) if self.target_sq > 0 else float("nan")


# ----------------------------------------------------------------------------------------------------------------
# pair moments, one closed form per activation
# ----------------------------------------------------------------------------------------------------------------
def _Phi(x: np.ndarray) -> np.ndarray:
    return special.ndtr(x)


def _phi(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)


def _bivariate_cdf(h: np.ndarray, k: np.ndarray, rho: np.ndarray, r: np.ndarray, nh: np.ndarray,
                   nk: np.ndarray) -> np.ndarray:
    """``Φ₂(h, k; ρ) = P(X < h, Y < k)`` for ``|ρ| < 1`` (``r = sqrt(1 − ρ²) > 0``; ``nh = k − ρh`` and
    ``nk = h − ρk`` computed without cancellation by the caller) by Owen's ``T``:
    ``½Φ(h) + ½Φ(k) − T(h, nh/(h r)) − T(k, nk/(k r)) − β`` with ``β = ½`` when ``h`` and ``k`` have opposite signs;
    at ``h = 0`` the first ``T`` and ``β`` combine to ``¼ − ½Φ(0)``, likewise at ``k = 0``, and at ``h = k = 0`` it is
    ``¼ + arcsin(ρ)/(2π)``."""
    out = np.empty_like(h)
    hz, kz = h == 0, k == 0
    both = hz & kz
    gen = ~hz & ~kz
    with np.errstate(divide="ignore", invalid="ignore"):
        hh, kk, rr = h[gen], k[gen], r[gen]
        beta = np.where(np.sign(hh) != np.sign(kk), 0.5, 0.0)   # signs, not h·k: that product can underflow
        out[gen] = (0.5 * _Phi(hh) + 0.5 * _Phi(kk) - special.owens_t(hh, nh[gen] / (hh * rr))
                    - special.owens_t(kk, nk[gen] / (kk * rr)) - beta)
        one = hz & ~kz   # Φ₂(0, k) = ½Φ(k) − T(k, −ρ/r)
        out[one] = 0.5 * _Phi(k[one]) - special.owens_t(k[one], -rho[one] / r[one])
        other = kz & ~hz
        out[other] = 0.5 * _Phi(h[other]) - special.owens_t(h[other], -rho[other] / r[other])
    out[both] = 0.25 + np.arcsin(rho[both]) / (2 * np.pi)
    return out


def _relu_standard(h: np.ndarray, k: np.ndarray, rho: np.ndarray, one_minus: np.ndarray | None = None,
                   one_plus: np.ndarray | None = None) -> np.ndarray:
    """``E[(X + h)₊ (Y + k)₊]`` for standard ``(X, Y)`` with correlation ``ρ`` (arrays of one shape).

    ``one_minus = 1 − ρ`` and ``one_plus = 1 + ρ`` may be given computed without cancellation (from the unit
    vectors, as :func:`population_loss` does for nearly parallel neurons): ``k − ρh = (k − h) + (1 − ρ) h`` and
    ``h² − 2ρhk + k² = (h − k)² + 2(1 − ρ) hk`` (for ``ρ > 0``; with ``1 + ρ`` for ``ρ ≤ 0``) then keep their digits
    when ``h ≈ k`` and ``ρ ≈ 1``, a trained neuron beside its initial copy."""
    h, k, rho = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (h, k, rho)))
    rho = np.clip(rho, -1.0, 1.0)
    omr = np.maximum(0.0, 1.0 - rho if one_minus is None else np.broadcast_to(one_minus, h.shape))
    opr = np.maximum(0.0, 1.0 + rho if one_plus is None else np.broadcast_to(one_plus, h.shape))
    r = np.sqrt(omr * opr)
    out = np.empty(h.shape)
    gen = r >= _PARALLEL
    hh, kk, pp, rr, om, op = h[gen], k[gen], rho[gen], r[gen], omr[gen], opr[gen]
    pos = pp > 0
    nh = np.where(pos, (kk - hh) + om * hh, (kk + hh) - op * hh)      # k − ρh
    nk = np.where(pos, (hh - kk) + om * kk, (hh + kk) - op * kk)      # h − ρk
    quad = np.where(pos, (hh - kk) ** 2 + 2 * om * hh * kk, (hh + kk) ** 2 - 2 * op * hh * kk)   # h² − 2ρhk + k²
    p2 = _bivariate_cdf(hh, kk, pp, rr, nh, nk)
    ca, cb = _Phi(nh / rr), _Phi(nk / rr)      # P(Y > −k | X = −h), P(X > −h | Y = −k)
    dens = rr / (2 * np.pi) * np.exp(-quad / (2 * rr * rr))            # r² φ₂(h, k; ρ)
    out[gen] = (hh * kk + pp) * p2 + kk * _phi(hh) * ca + hh * _phi(kk) * cb + dens
    up = ~gen & (rho > 0)             # Y = X: ∫_{x > −m} (x + h)(x + k) φ, m = min(h, k)
    hu, ku = h[up], k[up]
    m = np.minimum(hu, ku)
    out[up] = (1 + hu * ku) * _Phi(m) + (hu + ku - m) * _phi(m)
    down = ~gen & (rho <= 0)          # Y = −X: ∫_{−h}^{k} (x + h)(k − x) φ when k > −h
    hd, kd = h[down], k[down]
    i0 = _Phi(kd) - _Phi(-hd)
    i1 = _phi(hd) - _phi(kd)
    i2 = _Phi(kd) - kd * _phi(kd) - _Phi(-hd) - hd * _phi(hd)
    out[down] = np.where(kd + hd > 0, -i2 + (kd - hd) * i1 + hd * kd * i0, 0.0)
    return out


def relu_pair_moments(b1: np.ndarray, s1: np.ndarray, b2: np.ndarray, s2: np.ndarray, c: np.ndarray,
                      one_minus: np.ndarray | None = None, one_plus: np.ndarray | None = None) -> np.ndarray:
    """``E[relu(u) relu(v)]`` for Gaussian ``(u, v)`` with means ``(b1, b2)``, standard deviations ``(s1, s2) > 0``
    and covariance ``c`` (Rosenbaum's truncated bivariate moments, ``Φ₂`` by Owen's ``T``); ``one_minus``/``one_plus``:
    ``1 ∓ ρ`` computed without cancellation, when known (:func:`_relu_standard`)."""
    return s1 * s2 * _relu_standard(b1 / s1, b2 / s2, c / (s1 * s2), one_minus, one_plus)


def _gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(n)
    return 0.5 * (x + 1), 0.5 * w     # on [0, 1]


def erf_pair_moments(b1: np.ndarray, s1: np.ndarray, b2: np.ndarray, s2: np.ndarray, c: np.ndarray,
                     one_minus: np.ndarray | None = None, one_plus: np.ndarray | None = None) -> np.ndarray:
    """``E[erf(u) erf(v)]`` for Gaussian ``(u, v)`` (means ``b``, standard deviations ``s``, covariance ``c``) by
    Price's theorem (module docstring); the θ-integral by Gauss–Legendre rules of growing size until two agree to
    :data:`QUADRATURE_TOL`, else :class:`PopulationError`. (``one_minus``/``one_plus`` are not needed: the range
    ``θ* = arcsin(2c/D)`` has no cancellation.)"""
    b1, s1, b2, s2, c = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (b1, s1, b2, s2, c)))
    p1, p2 = 1 + 2 * s1 * s1, 1 + 2 * s2 * s2
    D = np.sqrt(p1 * p2)
    theta = np.arcsin(np.clip(2 * c / D, -1.0, 1.0))
    base = special.erf(b1 / np.sqrt(p1)) * special.erf(b2 / np.sqrt(p2))
    num0, num1 = p2 * b1 * b1 + p1 * b2 * b2, -2 * D * b1 * b2

    def rule(n: int, idx: np.ndarray) -> np.ndarray:
        x, w = _gauss_legendre(n)
        th = theta[idx, None] * x[None, :]
        cos2 = np.cos(th) ** 2
        q = (num0[idx, None] + num1[idx, None] * np.sin(th)) / (D[idx, None] ** 2 * cos2)
        return theta[idx] * (np.exp(-q) @ w)

    theta, base = theta.ravel(), base.ravel()
    num0, num1, D = num0.ravel(), num1.ravel(), D.ravel()
    scale1, scale2, cov = s1.ravel(), s2.ravel(), c.ravel()
    todo = np.arange(theta.size)
    value = rule(_RULES[0], todo)
    out = np.empty(theta.size)
    for n in _RULES[1:]:
        finer = rule(n, todo)
        ok = np.abs(finer - value) <= QUADRATURE_TOL * (1 + np.abs(finer))
        out[todo[ok]] = finer[ok]
        todo, value = todo[~ok], finer[~ok]
        if todo.size == 0:
            break
    if todo.size:
        j = todo[0]
        raise PopulationError(f"the erf pair moment did not converge in {_RULES[-1]} Gauss–Legendre nodes for "
                              f"{todo.size} neuron pairs (e.g. |ŵ| = {scale1[j]:.4g} and {scale2[j]:.4g}, "
                              f"correlation {cov[j] / (scale1[j] * scale2[j]):.8f}); the neurons' scales are too "
                              "large for this quadrature: measure the loss on a larger test set ([training] n_test) "
                              "instead")
    return (base + (2 / np.pi) * out).reshape(b1.shape)


_RELU = sp.Piecewise((U, U > 0), (0, True))
#: The closed-form pair moments by the activation's expression (``max(u, 0)`` written out is the same ReLU).
_PAIR_MOMENTS: list[tuple[tuple[sp.Expr, ...], Callable[..., np.ndarray]]] = [
    ((_RELU, sp.Max(U, 0)), relu_pair_moments),
    ((sp.erf(U),), erf_pair_moments),
]


def _pair_rule(act: Activation) -> Callable[..., np.ndarray] | None:
    for exprs, fn in _PAIR_MOMENTS:
        if any(act.expr == e for e in exprs):
            return fn
    return None


def has_exact_population_loss(activation: "str | Activation") -> bool:
    """Whether :func:`population_loss` has closed-form pair moments for this activation (relu, erf)."""
    return _pair_rule(get_activation(activation)) is not None


def pair_moments(activation: "str | Activation", b1: np.ndarray, s1: np.ndarray, b2: np.ndarray, s2: np.ndarray,
                 c: np.ndarray, one_minus: np.ndarray | None = None,
                 one_plus: np.ndarray | None = None) -> np.ndarray:
    """``E[σ(u) σ(v)]`` for Gaussian ``(u, v)`` with means ``(b1, b2)``, standard deviations ``(s1, s2)`` and
    covariance ``c``, from the activation's closed form (relu, erf); :class:`PopulationError` for the others.
    ``one_minus``/``one_plus``: ``1 ∓ ρ``, ``ρ = c/(s1 s2)``, computed without cancellation when known."""
    fn = _rule_or_error(get_activation(activation))
    return fn(*(np.asarray(v, dtype=float) for v in (b1, s1, b2, s2, c)), one_minus, one_plus)


def _rule_or_error(act: Activation) -> Callable[..., np.ndarray]:
    fn = _pair_rule(act)
    if fn is None:
        raise PopulationError(f"the exact population loss has closed-form pair moments for relu and erf only, not "
                              f"{act.name}; measure the loss on a larger test set ([training] n_test) instead")
    return fn


#: pairs evaluated at once (a block of rows of the upper triangle): bounds the memory of one loss
PAIR_BLOCK = 2**18
_NEAR = 1e-3   # 1 ∓ ρ below this is recomputed from the unit vectors (no cancellation)


def _pair_sum(fn: Callable[..., np.ndarray], a: np.ndarray, W: np.ndarray, b: np.ndarray, s: np.ndarray,
              perp: np.ndarray | None = None, rows: int | None = None) -> float:
    """``Σ_{k,l} a_k a_l C_kl`` over the upper triangle (off-diagonal pairs twice), in blocks of rows of at most
    about :data:`PAIR_BLOCK` pairs, ``c_kl = ŵ_k·ŵ_l`` by one matrix product per block; for nearly (anti)parallel
    pairs ``1 ∓ ρ = |û_k ∓ û_l|²/2`` from the unit vectors ``û = ŵ/s``. ``perp``: each neuron's own independent
    Gaussian part (standard deviation ``p_k``, in ``s_k² = |ŵ_k|² + p_k²`` but in no covariance, the diagonal's
    included); ``û`` then has ``p_k/s_k`` on a direction of its own, which adds ``(p_k/s_k)² + (p_l/s_l)²`` to
    ``|û_k ∓ û_l|²``. ``rows``: only the pairs ``(k, l ≥ k)`` with ``k < rows`` (the rest is the sum over the
    neurons from ``rows`` on, which a caller that holds them fixed computes once)."""
    n = a.size
    unit = W / s[:, None]
    extra = np.zeros(n) if perp is None else (perp / s) ** 2
    block = max(1, PAIR_BLOCK // n)
    total = 0.0
    for i0 in range(0, n if rows is None else rows, block):
        i1 = min(n if rows is None else rows, i0 + block)
        cov = W[i0:i1] @ W[i0:].T
        ii, jj = np.nonzero(np.arange(i0, n)[None, :] >= np.arange(i0, i1)[:, None])
        gi, gj = i0 + ii, i0 + jj
        c = cov[ii, jj]
        rho = c / (s[gi] * s[gj])
        one_minus, one_plus = 1.0 - rho, 1.0 + rho
        near = np.flatnonzero(one_minus < _NEAR)
        one_minus[near] = 0.5 * (np.sum((unit[gi[near]] - unit[gj[near]]) ** 2, axis=1)
                                 + extra[gi[near]] + extra[gj[near]])
        anti = np.flatnonzero(one_plus < _NEAR)
        one_plus[anti] = 0.5 * (np.sum((unit[gi[anti]] + unit[gj[anti]]) ** 2, axis=1)
                                + extra[gi[anti]] + extra[gj[anti]])
        moments = fn(b[gi], s[gi], b[gj], s[gj], c, one_minus, one_plus)
        total += float(np.dot(np.where(gi == gj, 1.0, 2.0) * a[gi] * a[gj], moments))
    return total


def smoothed_square(activation: "str | Activation", coef: np.ndarray, w_hat: np.ndarray, bias: np.ndarray,
                    perp: np.ndarray, rows: int | None = None) -> float:
    """``E_z[F(z)²]`` exactly for ``F(z) = Σ_k coef_k E_ε[σ(ŵ_k·z + b_k + p_k ε_k)]``, ``z ~ N(0, I)`` and each
    neuron's ridge smoothed by its own independent ``ε_k ~ N(0, 1)`` (``perp`` = ``p_k ≥ 0``): the network's output
    averaged over the coordinates it is not read on (``P_T f`` of :mod:`featureode.ode.meanfield`, with ``p_k`` the
    neuron's weight outside T). Pair moments as in :func:`population_loss`, with variances ``|ŵ_k|² + p_k²`` and
    covariances ``ŵ_k·ŵ_l`` (the diagonal's too: two independent ``ε``); :class:`PopulationError` for activations
    without closed-form pair moments, or when a neuron has ``|ŵ_k|² + p_k² = 0``. ``rows = r``: the pairs with
    a neuron among the first ``r`` only, i.e. ``E[F²] − E[F_r'²]`` with ``F_r'`` the sum from neuron ``r`` on (which
    a caller holding those neurons fixed computes once)."""
    fn = _rule_or_error(get_activation(activation))
    a, W, bv, p = (np.asarray(x, dtype=float) for x in (coef, w_hat, bias, perp))
    if rows is not None and not (isinstance(rows, (int, np.integer)) and 0 <= rows <= a.size):
        raise PopulationError(f"rows = {rows!r} must be an integer in 0..{a.size} (the number of neurons)")
    if W.ndim != 2 or not a.shape == bv.shape == p.shape == (W.shape[0],):
        raise PopulationError(f"coef, w_hat, bias and perp must have shapes (n,), (n, k), (n,), (n,); got {a.shape}, "
                              f"{W.shape}, {bv.shape}, {p.shape}")
    if not all(np.all(np.isfinite(x)) for x in (a, W, bv, p)) or np.any(p < 0):
        raise PopulationError("the neurons' parameters must be finite and perp ≥ 0; the smoothed output's square "
                              "is not defined otherwise")
    s = np.sqrt(np.einsum("kd,kd->k", W, W) + p * p)
    if not np.all(s > 0):
        raise PopulationError("a neuron has ŵ = 0 and perp = 0 (a constant unit); give it a nonzero weight")
    return _pair_sum(fn, a, W, bv, s, p, rows)


# ----------------------------------------------------------------------------------------------------------------
# the loss
# ----------------------------------------------------------------------------------------------------------------
def centred_neurons(a: np.ndarray, w: np.ndarray, b: np.ndarray, a0: np.ndarray, w0: np.ndarray, b0: np.ndarray,
                    out_scale: float, eigenvalues: "np.ndarray | Sequence[float]"
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The centred network ``f = c Σ_k a_k σ(w_k·x + b_k) − c Σ_k a⁰_k σ(w⁰_k·x + b⁰_k)`` with ``x = sqrt(g) ∘ z``
    as one list of ``2N`` neurons on whitened inputs: readouts ``(c a, −c a⁰)``, ``ŵ = sqrt(g) ∘ w`` and biases."""
    root = np.sqrt(np.asarray(eigenvalues, dtype=float))
    readout = out_scale * np.concatenate([np.asarray(a, float), -np.asarray(a0, float)])
    w_hat = np.concatenate([np.asarray(w, float), np.asarray(w0, float)]) * root
    bias = np.concatenate([np.asarray(b, float), np.asarray(b0, float)])
    return readout, w_hat, bias


def _mode_factor(w_hat: np.ndarray, mode: Mode) -> np.ndarray:
    """``Π_i ŵ_i^{α_i} / sqrt(α_i!)`` per neuron."""
    out = np.ones(w_hat.shape[0])
    for i, n in mode.items:
        out = out * w_hat[:, i] ** n / math.sqrt(math.factorial(n))
    return out


def population_loss(activation: "str | Activation", readout: np.ndarray, w_hat: np.ndarray, bias: np.ndarray,
                    target: Target) -> PopulationLoss:
    """The exact ``½ E[(f − f*)²]`` of ``f(z) = Σ_k readout_k σ(ŵ_k·z + bias_k)`` against ``target`` on
    ``z ~ N(0, I_d)`` (module docstring): every neuron pair once, the moments from the activation's closed form."""
    act = get_activation(activation)
    a = np.asarray(readout, dtype=float)
    W = np.asarray(w_hat, dtype=float)
    bv = np.asarray(bias, dtype=float)
    if W.ndim != 2 or a.shape != (W.shape[0],) or bv.shape != a.shape:
        raise PopulationError(f"readout, w_hat and bias must have shapes (n,), (n, d), (n,); got {a.shape}, "
                              f"{W.shape}, {bv.shape}")
    if W.shape[1] != target.dim:
        raise PopulationError(f"w_hat has {W.shape[1]} input dimensions but the target {target.expr!r} has "
                              f"{target.dim}; pass the network of the target's dimension")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(W)) and np.all(np.isfinite(bv))):
        raise PopulationError("the network's parameters are not finite; its loss is not defined")
    s = np.sqrt(np.einsum("kd,kd->k", W, W))
    if not np.all(s > 0):   # a constant unit σ(b): its moments need s > 0 (not built: no network here has one)
        raise PopulationError("a neuron has ŵ = 0 (a constant unit); the exact loss expects every neuron to see "
                              "the input")
    n = a.size
    network_sq = _pair_sum(_rule_or_error(act), a, W, bv, s)
    orders = tuple(sorted({m.degree for m in target.modes}))
    table = dict(zip(orders, np.asarray(act.means_numpy(orders)(bv, s)).reshape(len(orders), n)))
    overlap = 0.0
    for mode, v in zip(target.modes, target.coefficients):
        overlap += float(v) * float(a @ (table[mode.degree] * _mode_factor(W, mode)))
    target_sq = float(np.sum(np.square(target.coefficients)))
    return PopulationLoss(0.5 * (network_sq - 2 * overlap + target_sq), network_sq, overlap, target_sq)
