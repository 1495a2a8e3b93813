"""The reference network at initialisation as one value (theory §3), built once per config and passed down.

A :class:`Network` holds what the init kernel depends on: the activation, the spectrum, ``σ_b``, the
parametrization (its readout variance ``E[a²]``) and the quadrature state (the law of ``|ŵ|²`` of the spectrum
and the bias rule of ``σ_b``, shared between networks through bounded caches). The richness γ is not part of it:
``λ_β(0)``, ``Λ_l`` and ``c_l`` do not depend on γ, so configs that differ only in γ share one network.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, Sequence

import numpy as np

from featureode.core.errors import FeatureODEError
from featureode.calculus.activations import Activation, get_activation
from featureode.calculus.data import Spectrum
from featureode.kernel.initlaw import STEP, BiasRule, QLaw, bias_rule, q_law
from featureode.kernel.parametrization import Parametrization, get_parametrization

if TYPE_CHECKING:  # type-only imports (these modules sit above this layer or are heavy)
    from featureode.config import Config


class KernelError(FeatureODEError, ValueError):
    """Kernel quantities that cannot be computed as asked (budget too large, inconsistent inputs)."""


class KernelWarning(UserWarning):
    """A kernel quantity that is valid but makes the feature ODE degenerate (e.g. a target mode with λ_β(0) = 0)."""



__all__ = ["Network", "NetworkError"]


class NetworkError(FeatureODEError, ValueError):
    """Network data that cannot define an init law (bad spectrum or σ_b)."""


def checked_spectrum(spectrum: "Spectrum | Sequence[float] | np.ndarray",
                     error: type[Exception] = NetworkError) -> tuple[float, ...]:
    """The eigenvalues ``g`` of ``spectrum`` (a :class:`Spectrum` or a list), refused with ``error`` unless a
    non-empty list of finite positive numbers."""
    g = spectrum.g if isinstance(spectrum, Spectrum) else np.asarray(spectrum, dtype=float)
    if g.ndim != 1 or g.size == 0 or np.any(g <= 0) or not np.all(np.isfinite(g)):
        raise error(f"spectrum must be a non-empty list of positive eigenvalues, got {g!r}")
    return tuple(float(x) for x in g)


def checked_bias_std(bias_std: float, error: type[Exception] = NetworkError) -> float:
    """``σ_b`` as a float, refused with ``error`` unless finite and ≥ 0."""
    b = float(bias_std)
    if not math.isfinite(b) or b < 0:
        raise error(f"bias_std σ_b must be finite and ≥ 0, got {bias_std!r}")
    return b


@dataclass(frozen=True, eq=False)
class Network:
    """Activation σ, spectrum ``g`` (a tuple: the key of the shared caches), bias scale ``σ_b``, parametrization,
    quadrature step, and the :class:`Spectrum` it came from (when there is one)."""

    activation: Activation
    g_key: tuple[float, ...]
    bias_std: float
    parametrization: Parametrization = field(default_factory=lambda: get_parametrization("meanfield"))
    step: float = STEP
    spectrum: Spectrum | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bias_std", checked_bias_std(self.bias_std))

    @classmethod
    def build(cls, activation: "str | Activation", spectrum: "Spectrum | Sequence[float] | np.ndarray",
              bias_std: float, parametrization: "str | Parametrization" = "meanfield",
              step: float = STEP) -> "Network":
        """From an activation name/expression, a :class:`Spectrum` or a list of eigenvalues, ``σ_b`` and a
        parametrization name."""
        g = checked_spectrum(spectrum)
        par = get_parametrization(parametrization) if isinstance(parametrization, str) else parametrization
        return cls(get_activation(activation), g, bias_std, par, float(step),
                   spectrum if isinstance(spectrum, Spectrum) else None)

    @classmethod
    def from_config(cls, cfg: Config, spectrum: Spectrum | None = None) -> "Network":
        """The network of a :class:`~featureode.config.Config` (``spectrum``: an already built one)."""
        net = cfg.network
        return cls.build(net.activation, spectrum if spectrum is not None else cfg.spectrum(), net.bias_std,
                         net.parametrization)

    # derived ------------------------------------------------------------------------------------------------------
    @cached_property
    def g(self) -> np.ndarray:
        """The spectrum ``g_i`` (in the order the modes' dimensions refer to)."""
        return np.array(self.g_key)

    @property
    def dim(self) -> int:
        return len(self.g_key)

    @property
    def readout_variance(self) -> float:
        """``E[a_k²]`` at initialisation (from the parametrization)."""
        return float(self.parametrization.readout_variance)

    @property
    def q_law(self) -> QLaw:
        """The law of ``|ŵ|²`` of the spectrum (from a bounded cache shared by networks with the same spectrum; a
        network does not hold it, so results that keep their network stay small)."""
        return q_law(self.g_key, self.step)

    @property
    def bias_rule(self) -> BiasRule:
        """The quadrature in ``b`` of ``σ_b`` (sinh-mapped for non-smooth σ)."""
        return bias_rule(self.bias_std, self.activation.classical_order is None, self.step)

    def key(self) -> tuple:
        """What the init kernel depends on (two networks with equal keys have equal kernels)."""
        return (self.activation.name, _expr_text(self.activation), self.g_key, self.bias_std,
                self.parametrization.name, self.readout_variance, self.step)


@lru_cache(maxsize=64)
def _expr_text(activation: Activation) -> str:
    """``str(activation.expr)`` (SymPy's printer: ~0.2 ms, asked for every kernel), kept per activation object."""
    return str(activation.expr)
