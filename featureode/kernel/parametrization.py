"""The network's parametrization as named inputs (theory §3): one seam read by the simulator, the kernel and the ODE.

A parametrization says how the width ``N`` and the richness ``γ`` enter the network and its training, and so fixes
the time unit of gradient flow and the kernel the ODE starts from. Every place that used to hard-code the meanfield
choices reads them here:

* ``output_scale(γ, N)`` — the factor in front of ``Σ_k a_k σ(w_k·x + b_k)``;
* ``lr_scale(γ, N)`` — the SGD learning rate is ``η × lr_scale``, with gradient-flow time ``t = Σ η``;
* ``readout_variance`` — ``E[a_k²]`` at initialisation (the kernel's readout moments are taken under it);
* ``closure_prefactor(γ)`` — the factor of the feature-growth terms of the closures (``q`` in the ODE).

Per-group learning rates (``[training] lr_scale = {a = η_a, w = η_w, b = η_b}``, :class:`GroupRates`): the SGD
rate of the readout ``a``, the first-layer weights ``w`` and the biases ``b`` is multiplied by ``η_a``, ``η_w``,
``η_b`` (1 each by default; 0 freezes a group, e.g. first-layer-only training is ``a = 0``). A parametrization object
carries them (:meth:`Parametrization.with_rates`, :func:`parametrization_of` for a config), and every consumer reads
them from it:

* gradient flow becomes ``dθ_g/dt = −η_g lr_scale ∂L/∂θ_g`` per group, so the gradient-flow kernel is the weighted
  sum ``Θ = Σ_g η_g Θ_g`` of its readout, weights and bias parts (:meth:`Parametrization.part_weights`): the
  simulator's step and eNTK, and the kernel's ``λ_β(0)``, Gram matrix and HEA level coefficients;
* the per-neuron flow of the meanfield network is ``da_k/dt = γ η_a E_x[(y − f) σ(u_k)]``,
  ``dw_k/dt = γ η_w a_k E_x[(y − f) σ'(u_k) x]``, ``db_k/dt = γ η_b a_k E_x[(y − f) σ'(u_k)]``, so the closures'
  constants are derived again from their derivations (:mod:`featureode.ode.terms`): the first-layer displacement
  per unit integrated residual carries ``γ η_w`` (``displacement``: :meth:`displacement_prefactor` ``q η_w²``, and
  the derived AGOP ``κ = q η_w² c_1/Λ_1²`` with the weighted ``Λ_1``), the readout growth ``γ η_a``
  (the scale factor: :meth:`readout_growth_prefactor` ``q η_a²/E[a²]²``), and the second-order constants are
  averaged with the metric ``P = diag(η_a, η_w g, η_b)`` (:mod:`featureode.kernel.second_order`) under the plain
  ``q``.

A new parametrization (NTK, standard, …) subclasses :class:`Parametrization`, states its time unit and the NTK at
initialisation in its docstring, and registers itself in :data:`PARAMETRIZATIONS`; the config key
``[network] parametrization`` selects it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from featureode.core.errors import FeatureODEError
from featureode.core.registry import Registry

if TYPE_CHECKING:  # type-only import (the config sits above this layer)
    from featureode.config import Config

#: The parameter groups of the two-layer network, and so the parts the NTK splits into (theory §4): readout ``a``,
#: first-layer weights ``w`` and biases ``b``. The kernel, the simulator's measurements (``lambda_parts/PART``), the
#: second-order constants and the diagnostics figure all use these names.
PARTS = ("readout", "weights", "bias")


#: The config's names of the parameter groups (``[training] lr_scale`` keys), in the order of :data:`PARTS`.
GROUP_KEYS = ("a", "w", "b")


class ParametrizationError(FeatureODEError, ValueError):
    """Unknown parametrization name, or per-group learning rates that are not valid."""


@dataclass(frozen=True)
class GroupRates:
    """Per-group learning-rate multipliers ``η_a`` (readout), ``η_w`` (first-layer weights), ``η_b`` (biases): finite,
    ≥ 0, not all 0. ``GroupRates()`` (1 each) is plain SGD."""

    a: float = 1.0
    w: float = 1.0
    b: float = 1.0

    def __post_init__(self) -> None:
        for key in GROUP_KEYS:
            x = getattr(self, key)
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
                raise ParametrizationError(f"lr_scale {key} must be a finite number ≥ 0 (0 freezes the group), "
                                           f"got {x!r}")
            object.__setattr__(self, key, float(x))
        if self.a == self.w == self.b == 0:
            raise ParametrizationError("lr_scale freezes every group (a = w = b = 0): nothing would train; give at "
                                       "least one group a rate > 0")

    @classmethod
    def of(cls, table: "dict[str, Any] | None") -> "GroupRates":
        """From a ``{a = …, w = …, b = …}`` table (missing keys: 1; ``None``: all 1)."""
        table = dict(table or {})
        unknown = sorted(set(table) - set(GROUP_KEYS))
        if unknown:
            raise ParametrizationError(f"lr_scale has unknown group(s) {', '.join(map(repr, unknown))}; the groups "
                                       "are a (readout), w (first-layer weights), b (biases)")
        return cls(**table)

    @property
    def is_default(self) -> bool:
        """All three multipliers are 1 (plain SGD: every formula takes its original, unweighted form)."""
        return self.a == 1.0 and self.w == 1.0 and self.b == 1.0

    def of_part(self, part: str) -> float:
        """The multiplier of a kernel part (:data:`PARTS`) or a group (:data:`GROUP_KEYS`)."""
        key = GROUP_KEYS[PARTS.index(part)] if part in PARTS else part
        if key not in GROUP_KEYS:
            raise ParametrizationError(f"unknown parameter group {part!r}; known: {', '.join(PARTS + GROUP_KEYS)}")
        return getattr(self, key)

    def as_dict(self) -> dict[str, float]:
        """``{"a": η_a, "w": η_w, "b": η_b}`` (the config's form)."""
        return {k: getattr(self, k) for k in GROUP_KEYS}

    def text(self) -> str:
        """``η_a = 0, η_w = 1, η_b = 1``."""
        return ", ".join(f"η_{k} = {getattr(self, k):g}" for k in GROUP_KEYS)


@dataclass(frozen=True)
class Parametrization:
    """Interface: the four named inputs above, which subclasses implement, and the per-group learning-rate
    multipliers ``rates`` with the constants derived from them."""

    name: str = "abstract"
    rates: GroupRates = field(default_factory=GroupRates)

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
        """Prefactor ``q`` of the feature-growth terms of the closures (the square of the per-neuron flow's speed
        per unit integrated residual, before the group multipliers)."""
        raise NotImplementedError

    # per-group learning rates ----------------------------------------------------------------------------------
    def with_rates(self, rates: "GroupRates | dict[str, Any] | None") -> "Parametrization":
        """The same parametrization with per-group multipliers ``rates`` (a :class:`GroupRates` or its table)."""
        return replace(self, rates=rates if isinstance(rates, GroupRates) else GroupRates.of(rates))

    def group_lr(self, part: str) -> float:
        """The learning-rate multiplier ``η_g`` of a group (``"a"``/``"w"``/``"b"``) or kernel part
        (``"readout"``/``"weights"``/``"bias"``)."""
        return self.rates.of_part(part)

    def part_weights(self) -> tuple[float, float, float]:
        """``(η_a, η_w, η_b)``: the weights of the readout, weights and bias parts (:data:`PARTS`) in the
        gradient-flow kernel ``Θ = Σ_g η_g Θ_g``."""
        return (self.rates.a, self.rates.w, self.rates.b)

    def displacement_prefactor(self, gamma: float) -> float:
        """``q η_w²``: the first-layer displacement per unit integrated residual is ``sqrt(q) η_w a_k (…)``, and
        the closures' growth of ``⟨ŵ_i²⟩`` is its square (``displacement``, the derived AGOP ``κ``)."""
        q = self.closure_prefactor(gamma)
        return q if self.rates.w == 1.0 else q * self.rates.w**2

    def readout_growth_prefactor(self, gamma: float) -> float:
        """``q η_a² / E[a²]²``: the readout displacement per unit integrated residual is ``sqrt(q) η_a A_β``, so
        ``⟨a²⟩(t)/⟨a²⟩(0) − 1 = q η_a² Σ_β g^β E[m_{|β|}²] D_β² / E[a²]`` with ``E[m²] = c/E[a²]`` (the scale
        factor)."""
        q, ea = self.closure_prefactor(gamma), self.readout_variance
        return q if self.rates.a == 1.0 and ea == 1.0 else q * self.rates.a**2 / ea**2


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


def parametrization_of(cfg: "Config") -> Parametrization:
    """The parametrization of a :class:`~featureode.config.Config`: ``[network] parametrization`` with the
    per-group learning rates ``[training] lr_scale``."""
    par = get_parametrization(cfg.network.parametrization)
    table = getattr(cfg.training, "lr_scale", None)
    return par if not table else par.with_rates(GroupRates.of(table))
