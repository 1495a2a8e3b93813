"""Hand-built :class:`featureode.kernel.theory.KernelTheory` instances for the feature-ODE tests.

Made-up but realistic constants: HEA level coefficients ``Λ_l`` as theory §4 quotes for ReLU with σ_b = 0.5
(Λ_1..3 ≈ 0.694, 0.412, 0.184), exact ``λ_β(0)`` somewhat below HEA at levels ≥ 2, and ``c_l`` of the same order.
"""
from __future__ import annotations

import numpy as np

from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.kernel.theory import KernelTheory
from featureode.calculus.targets import parse_target

TARGETS = ("z0", "h2(z0)", "z0*z1", "staircase(2)", "staircase(3)")
LEVELS = np.array([0.45, 0.694, 0.412, 0.184, 0.08])
C = np.array([0.35, 0.25, 0.11, 0.04, 0.015])
EXACT_OVER_HEA = np.array([1.0, 0.97, 0.85, 0.75, 0.7])


def theory_from_modes(coeffs: dict[str, float], dim: int = 8, gamma: float = 0.5,
                      gram: bool = False) -> KernelTheory:
    """A theory on the given modes/coefficients (``gram=True`` adds a positive-definite Gram matrix whose
    diagonal is the exact ``λ_β(0)`` and whose off-diagonal couples same-parity modes)."""
    g = Spectrum.power_law(dim).g
    modes = tuple(Mode.parse(m) for m in coeffs)
    deg = np.array([m.degree for m in modes])
    hea = np.array([LEVELS[m.degree] * m.g_power(g) for m in modes])
    exact = hea * EXACT_OVER_HEA[deg]
    K = None
    if gram:
        rng = np.random.default_rng(0)
        a = rng.uniform(-0.3, 0.3, (len(modes), len(modes)))
        a = (a + a.T) / 2 * (deg[:, None] % 2 == deg[None, :] % 2)
        np.fill_diagonal(a, 1.0)
        K = np.sqrt(np.outer(exact, exact)) * a
        assert np.all(np.linalg.eigvalsh(K) > 0)
    return KernelTheory(modes, np.array(list(coeffs.values()), dtype=float), g, gamma, exact, np.zeros_like(exact),
                        hea, LEVELS, C, K)


def make_theory(expr: str = "staircase(3)", dim: int = 8, gamma: float = 0.5) -> KernelTheory:
    """A target-basis theory for a built-in target expression."""
    target = parse_target(expr, Spectrum.power_law(dim))
    return theory_from_modes(dict(zip(map(str, target.modes), target.coefficients)), dim, gamma)


def extended_theory(expr: str = "staircase(2)", dim: int = 6, gamma: float = 0.5) -> KernelTheory:
    """The target's modes plus the constant and ``h2(z_j)`` on its support (coefficient 0), with a Gram matrix."""
    target = parse_target(expr, Spectrum.power_law(dim))
    coeffs = dict(zip(map(str, target.modes), target.coefficients))
    support = sorted({i for m in target.modes for i in m.support})
    extra = ["1"] + [f"h2(z{i})" for i in support]
    coeffs.update({m: 0.0 for m in extra if m not in coeffs})
    return theory_from_modes(coeffs, dim, gamma, gram=True)
