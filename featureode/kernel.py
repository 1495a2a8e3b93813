"""Kernel theory at initialization (DESIGN §3–4): exact infinite-width NTK eigenvalues, HEA, closure constants.

INTERFACE STUB — the implementation is being written (issue 3). The dataclass below is the contract between the
kernel layer and the feature ODE (``featureode.ode``); keep its fields.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .hermite import Mode


@dataclass(frozen=True)
class KernelTheory:
    """Everything the feature ODE needs from the kernel at initialization, for one config.

    ``modes``: the ODE's mode set B (the target's support, or an extended basis); ``target``: ``v_β`` on B (0 for
    modes outside the target's support); ``g``: spectrum; ``gamma``: richness γ; ``lambda_exact``/``lambda_hea``:
    ``λ_β(0)`` (exact infinite-width Rayleigh quotient / ``Λ_{|β|} g^β``) with the standard error of the exact one
    (0 when deterministic); ``level_coefficients``: ``Λ_0 … Λ_L``; ``c``: ``c_0 … c_L`` with
    ``c_l = E_k[a_k² m_l(b_k, |ŵ_k|)²]``; ``gram``: ``K_{αβ}(0) = E[h_α Θ h_β]`` on B (``None`` unless asked);
    ``kappa``: the derived AGOP constant ``γ² c_1 / Λ_1²``.
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
