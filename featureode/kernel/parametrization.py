"""The network's parametrization as named inputs (theory §3): one seam read by the simulator, the kernel and the ODE.

A parametrization says how the width ``N`` and the richness ``γ`` enter the network and its training, and so fixes
the time unit of gradient flow and the kernel the ODE starts from. Every place that used to hard-code the meanfield
choices reads them here:

* ``output_scale(γ, N)`` — the factor in front of ``Σ_k a_k σ(w_k·x + b_k)``;
* ``lr_scale(γ, N)`` — the SGD learning rate is ``η × lr_scale``, with gradient-flow time ``t = Σ η``;
* ``readout_variance`` — ``E[a_k²]`` at initialisation (the kernel's readout moments are taken under it);
* ``closure_prefactor(γ)`` — the factor of the feature-growth terms of the closures (``q`` in the ODE).

A new parametrization (NTK, standard, …) subclasses :class:`Parametrization`, states its time unit and the NTK at
initialisation in its docstring, and registers itself in :data:`PARAMETRIZATIONS`; the config key
``[network] parametrization`` selects it.
"""
from __future__ import annotations

from dataclasses import dataclass

from featureode.core.errors import FeatureODEError
from featureode.core.registry import Registry

#: The parameter groups of the two-layer network, and so the parts the NTK splits into (theory §4): readout ``a``,
#: first-layer weights ``w`` and biases ``b``. The kernel, the simulator's measurements (``lambda_parts/PART``), the
#: second-order constants and the diagnostics figure all use these names.
PARTS = ("readout", "weights", "bias")


class ParametrizationError(FeatureODEError, ValueError):
    """Unknown parametrization name."""


@dataclass(frozen=True)
class Parametrization:
    """Interface: the four named inputs above. Subclasses implement them."""

    name: str = "abstract"

    def output_scale(self, gamma: float, width: int) -> float:
        """Factor in front of the readout sum."""
        raise NotImplementedError

    def lr_scale(self, gamma: float, width: int) -> float:
        """SGD learning rate per unit of gradient-flow time."""
        raise NotImplementedError

    @property
    def readout_variance(self) -> float:
        """``E[a_k²]`` at initialisation."""
        raise NotImplementedError

    def closure_prefactor(self, gamma: float) -> float:
        """Prefactor ``q`` of the feature-growth terms of the closures."""
        raise NotImplementedError


@dataclass(frozen=True)
class MeanField(Parametrization):
    """``f(x) = (1/(γN)) Σ_k a_k σ(w_k·x + b_k) − f_init(x)``, ``a_k ~ N(0, 1)``, SGD with learning rate ``η γ² N``.

    Time unit: ``t = Σ η`` (gradient flow on ``½ E(f − f*)²``). Kernel at initialisation:
    ``Θ(x, x') = E_k[σ(u)σ(u') + a_k² σ'(u)σ'(u')(x·x' + 1)]``, O(1) and independent of γ. The first-layer
    displacement is of order γ, so the closures' growth terms carry ``q = γ²``.
    """

    name: str = "meanfield"

    def output_scale(self, gamma: float, width: int) -> float:
        """``1/(γN)``."""
        return 1.0 / (gamma * width)

    def lr_scale(self, gamma: float, width: int) -> float:
        """``γ² N``."""
        return gamma**2 * width

    @property
    def readout_variance(self) -> float:
        """``E[a_k²] = 1``."""
        return 1.0

    def closure_prefactor(self, gamma: float) -> float:
        """``q = γ²``."""
        return gamma**2


#: The named parametrizations (a :class:`~featureode.core.registry.Registry`); ``[network] parametrization`` is
#: checked against it when a config is loaded, so one registered later (e.g. by a plugin) is accepted.
PARAMETRIZATIONS: Registry[Parametrization] = Registry("parametrization", ParametrizationError)
PARAMETRIZATIONS.register("meanfield", MeanField())


def register_parametrization(par: Parametrization, replace: bool = False) -> Parametrization:
    """Add ``par`` to :data:`PARAMETRIZATIONS` under ``par.name``."""
    if not isinstance(par, Parametrization):
        raise ParametrizationError(f"register_parametrization needs a Parametrization instance, got {par!r}")
    return PARAMETRIZATIONS.register(par.name, par, replace=replace)


def get_parametrization(name: str) -> Parametrization:
    """The registered parametrization ``name``; unknown names raise :class:`ParametrizationError`."""
    return PARAMETRIZATIONS.get(name)
