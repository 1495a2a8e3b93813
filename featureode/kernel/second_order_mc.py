"""Second-order eigenvalue growth constants ``S_{βα}`` of the ``second_order`` closures (derivation:
``derivations/closure_second_order.py``).

Per init neuron ``θ = (a, ŵ, b)`` (whitened first-layer weights ``ŵ_i = sqrt(g_i) w_i``) the projection of its
feature on a mode is, by Gaussian integration by parts (theory §2),
``A_β(ŵ, b) = E_x[h_β σ(u)] = ŵ^β m_{|β|}(b, |ŵ|)/sqrt(β!)``, with the exact derivatives
``∂_{ŵ_i} A_β = (β_i ŵ^{β−e_i} m_p + ŵ^β ŵ_i m_{p+2})/sqrt(β!)`` and ``∂_b A_β = ŵ^β m_{p+1}/sqrt(β!)`` (``p = |β|``).
With ``φ_β = a A_β`` and the metric ``P = diag(1, g, 1)`` the mean-field gradient flow restricted to the mode set is
``dθ/dt = γ P Σ_α (v_α − f_α) ∇φ_α``, and the eigenvalue of mode β is ``λ_β = E_k[k_β(θ_k)]`` with the per-neuron
kernel ``k_β = ∇φ_βᵀ P ∇φ_β = A_β² + a²(Σ_i g_i (∂_i A_β)² + (∂_b A_β)²)`` (readout, weights and bias parts).

Driven by mode α alone the flow is autonomous in ``D_α``: ``dθ/dD_α = γ P ∇φ_α``, so
``θ = θ_0 + γ D_α v_1 + ½ γ² D_α² v_2 + O(D³)`` with ``v_1 = P ∇φ_α`` and ``v_2 = P ∇²φ_α v_1``; the odd orders of
``E[k_β]`` vanish (``a → −a`` maps the flow at ``D`` to the flow at ``−D``), hence

``λ_β = λ_β(0) (1 + γ² S_{βα} D_α² + O(γ⁴ D⁴))``,  ``S_{βα} = E[v_1ᵀ ∇²k_β v_1 + ∇k_β · v_2] / (2 λ_β(0))``.

Every contribution (readout, first-layer, bias and their cross terms) is in it, averaged jointly over the init law.
This module averages the per-neuron second derivative over ``n`` init neurons (Monte Carlo, with its standard error);
the second derivatives along the curve are central differences of the exact first derivatives (step ``h``; error
``O(h²)`` relative, far below the Monte Carlo error). Several driving modes: terms ``D_α D_α'`` with ``α ≠ α'``
vanish by the sign symmetry ``ŵ_i → −ŵ_i`` when α and α' differ in parity along some direction (single modes,
products, staircases); for same-parity pairs (e.g. ``z0`` and ``h3(z0)``) they are dropped — a stated approximation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import numpy as np

from featureode.calculus.activations import get_activation
from featureode.calculus.hermite import Mode
from featureode.kernel.parametrization import PARTS

#: Init neurons of the Monte Carlo average: closed-form derivative means / quadrature ones (10–50× slower each).
N_NEURONS = 100_000
N_NEURONS_QUADRATURE = 20_000
STEP = 1e-3


@dataclass(frozen=True)
class SecondOrder:
    """``S_{βα}`` (rows β: the mode whose eigenvalue grows; columns α: the driving mode) with Monte Carlo standard
    errors, and the Monte Carlo ``λ_β(0)`` (a check against the kernel's quadrature)."""

    S: np.ndarray
    S_stderr: np.ndarray
    lambda0: np.ndarray
    n_neurons: int
    #: ``S`` split like the kernel (``"readout"``, ``"weights"``, ``"bias"``; the three sum to ``S``) and the Monte
    #: Carlo ``λ_β(0)`` of each part.
    S_parts: dict[str, np.ndarray] = field(default_factory=dict)
    lambda0_parts: dict[str, np.ndarray] = field(default_factory=dict)


class _Neurons:
    """``n`` init neurons of one network and the per-neuron functions of the module docstring."""

    def __init__(self, activation: str, g: np.ndarray, bias_std: float, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.g = np.asarray(g, float)
        self.act = get_activation(activation)
        self.a = rng.standard_normal(n)
        self.W = rng.standard_normal((n, self.g.size)) * np.sqrt(self.g)
        self.b = bias_std * rng.standard_normal(n)
        self.memo: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def m(self, k: int, W: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``m_k(b, |ŵ|)``, remembered per point (the points of one driving mode are shared by every row)."""
        key = (id(W), id(b), k)
        if key not in self.memo:
            self.memo[key] = (W, b, self.act.mean_numpy(k)(b, np.sqrt(np.sum(W * W, axis=1))))
        return self.memo[key][2]

    @staticmethod
    def _mono(mode: Mode, W: np.ndarray, drop: int | None = None) -> np.ndarray:
        out = np.ones(W.shape[0])
        for i, n in mode.items:
            out = out * W[:, i] ** (n - (i == drop))
        return out

    def grad_phi(self, mode: Mode, a: np.ndarray, W: np.ndarray, b: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(A_β, ∂_a φ, ∂_ŵ φ, ∂_b φ)`` with ``φ = a A_β`` (``∂_a φ = A_β``)."""
        p, norm = mode.degree, 1 / math.sqrt(mode.factorial)
        mono = self._mono(mode, W)
        mp, mp1, mp2 = (self.m(k, W, b) for k in (p, p + 1, p + 2))
        A = norm * mono * mp
        dW = (norm * mono * mp2)[:, None] * W
        for i, n in mode.items:
            dW[:, i] += norm * n * self._mono(mode, W, drop=i) * mp
        return A, A, a[:, None] * dW, a * norm * mono * mp1

    def flow(self, mode: Mode, a: np.ndarray, W: np.ndarray, b: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``P ∇φ_α`` at ``θ``."""
        _, da, dW, db = self.grad_phi(mode, a, W, b)
        return da, dW * self.g, db

    def kernel(self, mode: Mode, a: np.ndarray, W: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``(readout, weights, bias)`` parts of ``k_β(θ) = ∇φ_βᵀ P ∇φ_β`` per neuron, stacked (3 × n)."""
        A, _, dW, db = self.grad_phi(mode, a, W, b)
        return np.stack([A**2, np.sum(self.g * dW**2, axis=1), db**2])


def second_order_constants(modes: Sequence["Mode | str"], g: "Sequence[float] | np.ndarray", activation: str,
                           bias_std: float, *, drivers: Sequence[int] | None = None, n_neurons: int | None = None,
                           seed: int = 0, step: float = STEP) -> SecondOrder:
    """``S_{βα}`` of the module docstring for every β in ``modes`` and every driving α in ``drivers`` (indices into
    ``modes``; default all; other columns are 0), averaged over ``n_neurons`` init neurons (``a ~ N(0, 1)``,
    ``ŵ_i ~ N(0, g_i)``, ``b ~ N(0, σ_b²)``, fixed ``seed``; default :data:`N_NEURONS`, or
    :data:`N_NEURONS_QUADRATURE` for an activation whose derivative means need quadrature)."""
    ms = [m if isinstance(m, Mode) else Mode.parse(m) for m in modes]
    if n_neurons is None:
        n_neurons = N_NEURONS if get_activation(activation).mean0 is not None else N_NEURONS_QUADRATURE
    return _constants(tuple(ms), tuple(float(x) for x in g), str(activation), float(bias_std),
                      tuple(range(len(ms)) if drivers is None else drivers), int(n_neurons), int(seed), float(step))


@lru_cache(maxsize=16)
def _constants(modes: tuple[Mode, ...], g: tuple[float, ...], activation: str, bias_std: float,
               drivers: tuple[int, ...], n: int, seed: int, h: float) -> SecondOrder:
    nr = _Neurons(activation, np.array(g), bias_std, n, seed)
    a, W, b = nr.a, nr.W, nr.b
    M = len(modes)
    k0_parts = [nr.kernel(m, a, W, b) for m in modes]
    k0 = [x.sum(0) for x in k0_parts]
    lam0 = np.array([x.mean() for x in k0])
    S, err, parts = np.zeros((M, M)), np.zeros((M, M)), np.zeros((len(PARTS), M, M))
    for col in drivers:
        alpha = modes[col]
        v1 = nr.flow(alpha, a, W, b)
        plus = nr.flow(alpha, *(x + h * dx for x, dx in zip((a, W, b), v1)))
        minus = nr.flow(alpha, *(x - h * dx for x, dx in zip((a, W, b), v1)))
        v2 = [(p - q) / (2 * h) for p, q in zip(plus, minus)]
        points = [tuple(x + eps * d1 + 0.5 * eps**2 * d2 for x, d1, d2 in zip((a, W, b), v1, v2))
                  for eps in (h, -h)]
        for row, beta in enumerate(modes):
            if not lam0[row] > 0:
                continue
            h2_parts = (nr.kernel(beta, *points[0]) - 2 * k0_parts[row] + nr.kernel(beta, *points[1])) / h**2 / 2
            parts[:, row, col] = h2_parts.mean(1) / lam0[row]
            h2 = h2_parts.sum(0)
            ratio = h2.mean() / lam0[row]
            resid = (h2 - ratio * k0[row]) / lam0[row]      # delta method for the ratio of means
            S[row, col], err[row, col] = ratio, resid.std(ddof=1) / math.sqrt(n)
        nr.memo = {k: val for k, val in nr.memo.items() if val[0] is W}      # keep the init point only
    return SecondOrder(S, err, lam0, n, dict(zip(PARTS, parts)),
                       dict(zip(PARTS, np.array([x.mean(1) for x in k0_parts]).T)))


# the old law's predicted parts take the Monte Carlo constants as they are (same fields S, S_parts, λ0, λ0 parts)
from featureode.kernel.second_order import predicted_parts  # noqa: E402,F401
