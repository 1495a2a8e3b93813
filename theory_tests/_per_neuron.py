"""The independent per-neuron oracle of the second-order constants and laws: RK4 of the mean-field flow of one
neuron, ``dθ/dε = P∇φ_α(θ)`` (θ = (a, ŵ, b), ``P = diag(1, g, 1)``, ``φ_α = a A_α``), with the projections
``A_β(ŵ, b) = E_z[h_β(z) σ(ŵ·z + b)]`` by a tensor Gauss–Hermite rule in z (d = 3; erf, tanh, the linear
activation ``u``) and every derivative by torch autograd — no Stein identity, no derivative-mean table, no growth
algebra. ReLU (not smooth enough for a quadrature rule in z) uses its closed-form Stein means instead:
``A_β = ŵ^β m_{|β|}(b, |ŵ|)/sqrt(β!)``, ``m_1 = Φ(b/s)``, ``m_k = (−1)^k He_{k−2}(b/s) φ(b/s)/s^{k−1}`` (k ≥ 2).

Used by ``test_second_order.py``, ``test_variants.py`` and ``docs/validation/law_fidelity.py``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from featureode.calculus.hermite import Mode

ACTIVATIONS = {"erf": torch.erf, "tanh": torch.tanh, "u": lambda x: x}
_HERMITE = {1: lambda x: x, 2: lambda x: (x**2 - 1) / math.sqrt(2), 3: lambda x: (x**3 - 3 * x) / math.sqrt(6)}


class PerNeuron:
    """Per-neuron projections, kernel ``k_β = |u|²``, gradient ``u = P^{1/2}∇φ_β`` and RK4 flow (module docstring)
    for the spectrum ``g`` (three directions) and the activation ``act``."""

    def __init__(self, g: "np.ndarray | list[float]", act: str = "erf", n_nodes: int = 10) -> None:
        self.g = torch.tensor(np.asarray(g, dtype=float))
        if self.g.numel() != 3:
            raise ValueError(f"the oracle works in d = 3, got {self.g.numel()} directions")
        self.stein = act == "relu"
        if not self.stein and act not in ACTIVATIONS:
            raise ValueError(f"activation {act!r}: the oracle has {sorted(ACTIVATIONS) + ['relu']}")
        self.sigma = ACTIVATIONS.get(act)
        x, w = np.polynomial.hermite_e.hermegauss(n_nodes)
        grid = np.stack(np.meshgrid(x, x, x, indexing="ij"), -1).reshape(-1, 3)
        wts = np.prod(np.stack(np.meshgrid(w, w, w, indexing="ij"), -1).reshape(-1, 3), axis=1)
        self.z, self.w = torch.tensor(grid), torch.tensor(wts / wts.sum())

    def hermite(self, mode: Mode) -> torch.Tensor:
        out = torch.ones(self.z.shape[0], dtype=torch.float64)
        for i, n in mode.items:
            out = out * _HERMITE[n](self.z[:, i])
        return out

    def A(self, mode: Mode, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.stein:
            return self._relu_A(mode, W, b)
        return (self.sigma(W @ self.z.T + b[:, None]) * self.hermite(mode)[None, :]) @ self.w  # type: ignore[misc]

    @staticmethod
    def _relu_A(mode: Mode, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        s = torch.sqrt((W**2).sum(1))
        x = b / s
        k = mode.degree
        if k == 1:
            m = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
        else:
            he = [torch.ones_like(x), x]
            for n in range(2, k - 1):
                he.append(x * he[-1] - (n - 1) * he[-2])
            m = (-1) ** k * he[k - 2] * torch.exp(-x**2 / 2) / math.sqrt(2 * math.pi) / s ** (k - 1)
        fact = 1.0
        for i, n in mode.items:
            m = m * W[:, i] ** n
            fact *= math.factorial(n)
        return m / math.sqrt(fact)

    def flow(self, mode: Mode, a: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``P∇φ_α`` per neuron."""
        a, W, b = (x.detach().requires_grad_(True) for x in (a, W, b))
        da, dW, db = torch.autograd.grad((a * self.A(mode, W, b)).sum(), (a, W, b))
        return da, dW * self.g, db

    def gradient(self, mode: Mode, a: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``u = P^{1/2}∇φ_β`` per neuron (columns: readout, the three whitened weights, bias)."""
        W, b = W.detach().requires_grad_(True), b.detach().requires_grad_(True)
        A = self.A(mode, W, b)
        dW, db = torch.autograd.grad(A.sum(), (W, b))
        return torch.cat([A[:, None], a[:, None] * torch.sqrt(self.g) * dW, (a * db)[:, None]], 1).detach()

    def kernel(self, mode: Mode, a: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``k_β = |u|² = A_β² + a²(Σ_i g_i (∂_i A_β)² + (∂_b A_β)²)`` per neuron."""
        return (self.gradient(mode, a, W, b) ** 2).sum(1)

    def integrate(self, mode: Mode, theta: tuple, eps: float, steps: int) -> tuple:
        """RK4 for ``dθ/dε = P∇φ_α(θ)`` from 0 to ``eps`` in ``steps`` steps."""
        h = eps / steps
        for _ in range(steps):
            k1 = self.flow(mode, *theta)
            k2 = self.flow(mode, *(x + h / 2 * k for x, k in zip(theta, k1)))
            k3 = self.flow(mode, *(x + h / 2 * k for x, k in zip(theta, k2)))
            k4 = self.flow(mode, *(x + h * k for x, k in zip(theta, k3)))
            theta = tuple(x + h / 6 * (p + 2 * q + 2 * r + s) for x, p, q, r, s in zip(theta, k1, k2, k3, k4))
        return theta


def init_neurons(n: int, g: "np.ndarray | list[float]", bias_std: float, seed: int) -> tuple[torch.Tensor, ...]:
    """``n`` init neurons: ``a ~ N(0, 1)``, ``ŵ_i ~ N(0, g_i)``, ``b ~ N(0, σ_b²)`` (in this order from one
    generator)."""
    rng = np.random.default_rng(seed)
    g = np.asarray(g, dtype=float)
    return (torch.tensor(rng.standard_normal(n)), torch.tensor(rng.standard_normal((n, g.size)) * np.sqrt(g)),
            torch.tensor(bias_std * rng.standard_normal(n)))
