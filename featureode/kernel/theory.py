"""Kernel theory at initialization (theory §3–4): exact infinite-width NTK eigenvalues, HEA, closure constants.

Network (theory §3): ``f(x) = (1/(γN)) Σ_k a_k σ(u_k) − f_init``, ``u_k = w_k·x + b_k = ŵ_k·z + b_k`` with
``ŵ_i = sqrt(g_i) w_i ~ N(0, g_i)``, ``b ~ N(0, σ_b²)``, ``a ~ N(0, 1)``. Its infinite-width NTK is
``Θ(x, x') = E_k[σ(u)σ(u') + a² σ'(u)σ'(u')(x·x' + 1)]``.

Exact projections (per neuron, theory §2, ``p = |β|``, ``m_k = m_k(b, |ŵ|)``)::

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
HEA (theory §4): on the unit sphere, Mehler's formula gives ``Θ(ρ) = Σ_l Λ_l ρ^l / l!`` with
``Λ_l = (l+1) E_b[m_l(b, 1)²] + E_b[m_{l+1}(b, 1)²]``, and ``λ_β^HEA = Λ_{|β|} g^β``.
Closure constants: ``c_l = E_k[a² m_l(b, |ŵ|)²]``, ``κ = q η_w² c_1 / Λ_1²`` (``q = γ²`` for meanfield).

Per-group learning rates (``[training] lr_scale``, :mod:`featureode.kernel.parametrization`): the gradient-flow
kernel is ``Θ = η_a Θ_readout + η_w Θ_weights + η_b Θ_bias``, so ``λ_β(0)``, the Gram matrix (and its parts) and the
HEA level coefficients are the weighted sums of their parts; ``c_l`` is a moment of the init law and does not change.

Layout of the kernel package: :mod:`~featureode.kernel.perneuron` (the per-neuron formula, integrability),
:mod:`~featureode.kernel.averagers` (quadrature and Monte Carlo averagers), :mod:`~featureode.kernel.hea` (HEA),
:mod:`~featureode.kernel.basis` (extended basis); this module assembles them into :class:`KernelTheory` per config
(names of those modules are re-exported here).
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from featureode.core.basis import check_basis
from featureode.calculus.activations import Activation
from featureode.calculus.data import Spectrum
from featureode.calculus.hermite import Mode
from featureode.kernel.averagers import (  # noqa: F401  (re-exported)
    MeanTable,
    MonteCarloAverager,
    QuadratureAverager,
    clear_caches,
    quadrature,
)
from featureode.kernel.basis import extended_basis
from featureode.kernel.hea import (
    hea_eigenvalues,
    level_coefficient_exprs,
    level_coefficient_parts,
    level_coefficients,
)
from featureode.kernel.initlaw import MAX_ORDER, STEP
from featureode.kernel.network import KernelError, KernelWarning, Network
from featureode.kernel.parametrization import PARTS, MeanField, Parametrization, parametrization_of
from featureode.kernel.perneuron import (  # noqa: F401  (re-exported)
    Term,
    _bias_of,
    _estimate_cost_s,
    _g_of,
    _modes_of,
    check_integrable,
    closure_term,
    pair_terms,
    singular_power,
)

if TYPE_CHECKING:  # type-only imports (these modules sit above this layer or are heavy)
    from featureode.calculus.targets import Target
    from featureode.config import Config

__all__ = [
    "KernelError", "KernelTheory", "Network", "Term", "pair_terms", "exact_eigenvalues", "gram_matrix",
    "level_coefficients", "level_coefficient_exprs", "hea_eigenvalues", "closure_constants", "extended_basis",
    "kernel_theory", "kernel_theory_batch", "kernel_report", "compare_exact_hea",
    "network_gram", "network_eigenvalues", "network_closure", "clear_caches", "STEP", "MAX_ORDER",
    "weighted_gram", "weighted_level_coefficients",
]







@dataclass(frozen=True)
class KernelTheory:
    """Everything the feature ODE needs from the kernel at initialization, for one config.

    ``modes``: the ODE's mode set B (the target's support, or an extended basis); ``target``: ``v_β`` on B (0 for
    modes outside the target's support); ``g``: spectrum; ``gamma``: richness γ; ``lambda_exact``/``lambda_hea``:
    ``λ_β(0)`` (exact infinite-width Rayleigh quotient / ``Λ_{|β|} g^β``) with the standard error of the exact one
    (0 when deterministic); ``level_coefficients``: ``Λ_0 … Λ_L``; ``c``: ``c_0 … c_L`` with
    ``c_l = E_k[a_k² m_l(b_k, |ŵ_k|)²]``; ``gram``: ``K_{αβ}(0) = E[h_α Θ h_β]`` on B (``None`` unless asked);
    ``kappa``: the derived AGOP constant ``q η_w² c_1 / Λ_1²``. ``gram_parts``: the readout (NNGP), weights and
    bias parts of ``gram``, each weighted by its group's learning-rate multiplier (they sum to ``gram``; ``None`` when
    ``gram`` is); ``activation``, ``bias_std``: the network they belong to, and ``network`` the
    :class:`~featureode.kernel.network.Network` itself (``None`` for hand-built theories). ``parametrization``: the
    config's parametrization with its per-group learning rates (:func:`parametrization_of`); every consumer (closure
    prefactors, second-order constants, LaTeX, report) reads them from here, and ``λ``, ``gram`` and ``Λ_l`` above
    are already weighted by them.
    ``basis``: the mode set it was built on (``"target"``/``"extended"``; ``None`` for hand-built theories), and
    ``settings``: the solver settings of its config (``t_max``, ``t_min``, ``eigenvalues``, ``method``,
    ``backend``, ``rtol``, ``atol``, ``n_points``; empty for hand-built ones), which
    :func:`featureode.ode.solve.solve_variant` takes as its defaults.
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
    parametrization: Parametrization = field(default_factory=MeanField)
    basis: str | None = None
    settings: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __repr__(self) -> str:
        lead = ", ".join(f"{m}: {v:.3g}" for m, v in list(zip(self.modes, self.lambda_exact))[:3])
        more = ", …" if len(self.modes) > 3 else ""
        return (f"KernelTheory({len(self.modes)} modes on the {self.basis or 'given'} basis, d = {len(self.g)}, "
                f"γ = {self.gamma:g}, {self.activation or 'activation ?'}, σ_b = {self.bias_std:g}; λ(0) {lead}{more}"
                f"{'; Gram' if self.gram is not None else ''})")

    @property
    def kappa(self) -> float:
        """Derived AGOP constant ``κ = q η_w² c_1 / Λ_1²`` (``γ² c_1/Λ_1²`` for meanfield at plain SGD).

        Derivation: in the lazy regime ``f_β = λ_β D_β`` exactly, so for a degree-1 mode ``e_i`` (``λ = Λ_1 g_i``)
        the AGOP law ``κ f_β²/g_i = κ Λ_1² g_i D_β²`` matches the displacement law ``q η_w² c_1 g_i D_β²``; ``Λ_1``
        is the level coefficient of the weighted kernel (``self.level_coefficients``)."""
        q = self.parametrization.displacement_prefactor(float(self.gamma))
        return float(q * self.c[1] / self.level_coefficients[1] ** 2)

    def lambda0(self, which: str = "exact") -> np.ndarray:
        """``λ_β(0)`` by ``"exact"`` or ``"hea"``."""
        if which == "exact":
            return self.lambda_exact
        if which == "hea":
            return self.lambda_hea
        raise ValueError(f"eigenvalues must be 'exact' or 'hea', got {which!r}")






#: The finest grid step in log|ŵ|² the kernel accepts (the grid and the bias rule both grow like 1/step: ~2.5 GB and
#: ~10 s for one mode at 0.01; the default is 0.1).
MIN_STEP = 0.01


def _network(spectrum: "Spectrum | Sequence[float]", activation: "str | Activation", bias_std: float,
             step: float = STEP) -> Network:
    try:
        ok = math.isfinite(float(step)) and MIN_STEP <= float(step) <= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise KernelError(f"step must be a number in [{MIN_STEP:g}, 1] (the grid step in log|ŵ|²; default {STEP}; "
                          f"a finer grid would not fit in memory), got {step!r}")
    return Network.build(activation, _g_of(spectrum), _bias_of(bias_std), step=step)






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
    pairs = [(i, j) for i in range(n) for j in range(i, n)]
    for (i, j), vals in zip(pairs, avg.part_values([pair_terms(modes[i], modes[j], g, ea) for i, j in pairs])):
        for name in PARTS:
            out[name][i, j] = out[name][j, i] = vals.get(name, 0.0)
    out["total"] = out["readout"] + out["weights"] + out["bias"]
    return out


def network_eigenvalues(net: Network, modes: Sequence[Mode],
                        weights: "tuple[float, float, float] | None" = None) -> np.ndarray:
    """Exact ``λ_β(0) = K_{ββ}`` of ``net`` per mode (quadrature); ``weights``: the multipliers ``(η_a, η_w, η_b)``
    of the readout, weights and bias parts (``None``: 1 each)."""
    avg, g, ea = quadrature(net), net.g, net.readout_variance
    out = []
    for vals in avg.part_values([pair_terms(m, m, g, ea) for m in modes]):
        if weights is None:
            out.append(vals.get("readout", 0.0) + vals.get("weights", 0.0) + vals.get("bias", 0.0))
        else:
            out.append(sum(w * vals.get(name, 0.0) for w, name in zip(weights, PARTS)))
    return np.array(out)


def weighted_gram(parts: dict[str, np.ndarray], weights: "tuple[float, float, float] | None"
                  ) -> dict[str, np.ndarray]:
    """The Gram parts of :func:`network_gram` each multiplied by its group's multiplier (``weights`` =
    ``(η_a, η_w, η_b)``), with ``"total"`` their sum; ``None`` returns ``parts`` unchanged."""
    if weights is None:
        return parts
    out = {name: w * parts[name] for w, name in zip(weights, PARTS)}
    out["total"] = out["readout"] + out["weights"] + out["bias"]
    return out


def weighted_level_coefficients(activation: "str | Activation", bias_std: float, max_level: int,
                                weights: "tuple[float, float, float] | None",
                                readout_variance: float = 1.0) -> np.ndarray:
    """HEA ``Λ_l`` of the gradient-flow kernel ``Σ_g η_g Θ_g`` (``weights = (η_a, η_w, η_b)``; the weights and bias
    parts carry ``E[a²]``); ``None`` with ``E[a²] = 1`` is :func:`level_coefficients` itself."""
    if weights is None and readout_variance == 1.0:
        return level_coefficients(activation, bias_std, max_level)
    wa, ww, wb = weights if weights is not None else (1.0, 1.0, 1.0)
    parts = level_coefficient_parts(activation, bias_std, max_level)
    return wa * parts[0] + readout_variance * (ww * parts[1] + wb * parts[2])


def network_closure(net: Network, max_level: int) -> np.ndarray:
    """``c_l`` of ``net`` for ``l = 0 … max_level``."""
    avg = quadrature(net)
    return np.array([vals["closure"] for vals in avg.part_values([[closure_term(l, net.readout_variance)]
                                                             for l in range(int(max_level) + 1)])])


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
    if method == "montecarlo" and (isinstance(n_neurons, bool) or not isinstance(n_neurons, numbers.Integral)
                                   or n_neurons < 2):
        raise KernelError(f"n_neurons must be an integer ≥ 2 (a mean and its standard error), got {n_neurons!r}")
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
# config level
# ----------------------------------------------------------------------------------------------------------------
def kernel_theory(cfg: Config, basis: str | None = None, with_gram: bool = False, *, network: Network | None = None,
                  target: Target | None = None, _shared: "dict[tuple, KernelTheory] | None" = None) -> KernelTheory:
    """All init kernel quantities of a :class:`~featureode.config.Config` for the feature ODE.

    ``basis``: ``"target"`` (the target's modes) or ``"extended"`` (:func:`extended_basis` with
    ``ode.extended_degree``/``ode.extended_max_modes``; the Gram matrix is always included then); ``None`` takes
    ``cfg.ode.basis``. ``target`` holds ``v_β`` on the chosen modes. ``network`` (a :class:`Network` of ``cfg``,
    e.g. from :meth:`Network.from_config`) and ``target`` (``cfg.target_obj()``) skip rebuilding them.
    """
    from featureode.config import require_config

    cfg = require_config(cfg, "kernel_theory", KernelError)
    basis = basis or cfg.ode.basis
    check_basis(basis, KernelError)
    if network is None or target is None:
        spectrum = network.spectrum if network is not None and network.spectrum is not None else cfg.spectrum()
        network = network or Network.from_config(cfg, spectrum)
        target = target if target is not None else cfg.target_obj(spectrum)
    gamma, par = float(cfg.network.richness), parametrization_of(cfg)
    if _shared is None:
        theory = _theory(network, target, gamma, basis, with_gram, cfg.ode.extended_degree,
                         cfg.ode.extended_max_modes, par)
    else:   # γ enters no init quantity: one theory per (network, target, basis, parametrization), γ set per config
        key = (id(network), id(target), basis, bool(with_gram), cfg.ode.extended_degree, cfg.ode.extended_max_modes,
               par)
        if key not in _shared:
            _shared[key] = _theory(network, target, gamma, basis, with_gram, cfg.ode.extended_degree,
                                   cfg.ode.extended_max_modes, par)
        theory = _with_gamma(_shared[key], gamma)
    o, t = cfg.ode, cfg.training
    settings = {"t_max": t.t_max, "t_min": t.t_min, "eigenvalues": o.eigenvalues, "method": o.method,
                "backend": o.backend, "rtol": o.rtol, "atol": o.atol, "n_points": o.n_points}
    return dataclasses.replace(theory, basis=basis, settings=settings)


def _with_gamma(theory: KernelTheory, gamma: float) -> KernelTheory:
    """``theory`` at richness ``gamma``, with arrays of its own (a consumer that writes into one of them does not
    change another config's theory)."""
    copy = {f.name: getattr(theory, f.name).copy() for f in dataclasses.fields(theory)
            if isinstance(getattr(theory, f.name), np.ndarray)}
    if theory.gram_parts is not None:
        copy["gram_parts"] = {k: v.copy() for k, v in theory.gram_parts.items()}
    return dataclasses.replace(theory, gamma=gamma, **copy)


def _theory(net: Network, target: Any, gamma: float, basis: str, with_gram: bool, extended_degree: int,
            extended_max_modes: int, parametrization: Parametrization | None = None) -> KernelTheory:
    par = parametrization if parametrization is not None else net.parametrization
    # None at plain SGD: every quantity then takes its original (unweighted) arithmetic, bit for bit
    weights = None if par.rates.is_default else par.part_weights()
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
    lam = weighted_level_coefficients(net.activation, net.bias_std, top, weights, net.readout_variance)
    gram = parts = None
    if with_gram or basis == "extended":
        parts = weighted_gram(network_gram(net, modes), weights)
        gram = parts["total"]
        exact, stderr = np.diag(gram).copy(), np.zeros(len(modes))
    else:
        exact, stderr = network_eigenvalues(net, modes, weights), np.zeros(len(modes))
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
        activation=net.activation.name, bias_std=net.bias_std, network=net, parametrization=par)


def kernel_theory_batch(cfgs: "Sequence[Config]", basis: str | None = None,
                        with_gram: bool = False) -> list[KernelTheory]:
    """:func:`kernel_theory` of many configs at once, each shared piece computed once: the spectrum per ``[data]``
    table, the target per ``([data], [target])``, the network (law of ``|ŵ|²``, bias rule, means and every
    integral) per ``([data], activation, σ_b, parametrization)``, and the theory itself (eigenvalues, Gram matrix,
    ``Λ_l``, ``c_l``, extended basis) per (network, target, basis, ``[ode]`` basis keys, learning rates). γ enters
    no init quantity (theory §3: only the scale of the output and of the closures' prefactors, which the solver
    takes from ``gamma``), so configs that differ only in γ (or in training keys) cost one lookup and a copy each.
    Results equal :func:`kernel_theory` exactly."""
    spectra: dict[str, Spectrum] = {}
    targets: dict[tuple[str, str], Any] = {}
    nets: dict[tuple, Network] = {}
    shared: dict[tuple, KernelTheory] = {}
    out = []
    def key(section: Any) -> str:   # a section's identity (what Config.digest hashes of it), without a hash
        return json.dumps(dataclasses.asdict(section), sort_keys=True, default=str)

    for cfg in cfgs:
        dkey = key(cfg.data)
        if dkey not in spectra:
            spectra[dkey] = cfg.spectrum()
        spectrum = spectra[dkey]
        tkey = (dkey, key(cfg.target))
        if tkey not in targets:
            targets[tkey] = cfg.target_obj(spectrum)
        n = cfg.network
        nkey = (dkey, str(n.activation), float(n.bias_std), n.parametrization)
        if nkey not in nets:
            nets[nkey] = Network.from_config(cfg, spectrum)
        out.append(kernel_theory(cfg, basis, with_gram, network=nets[nkey], target=targets[tkey], _shared=shared))
    return out


def kernel_report(cfg: Config) -> dict[str, Any]:
    """``featureode kernel CONFIG --json`` (theory §6): init eigenvalues of the target's modes and closure constants.

    Keys: ``modes``, ``exact``, ``exact_stderr`` (0: deterministic quadrature), ``hea``, ``c``,
    ``level_coefficients``; extra: ``target``, ``hea_over_exact``, ``exact_quadrature_error`` (difference to a rule
    with more nodes), ``kappa``, ``activation``, ``bias_std``, ``dim``, ``seconds``, and ``lr_scale`` (the per-group
    learning rates the eigenvalues are weighted by) when they are not 1.
    """
    from featureode.config import require_config

    t0 = time.perf_counter()
    kt = kernel_theory(require_config(cfg, "kernel_report", KernelError), basis="target")
    net = kt.network
    assert net is not None  # kernel_theory always records its network
    rates = kt.parametrization.rates
    finer = network_eigenvalues(Network(net.activation, net.g_key, net.bias_std, net.parametrization, STEP / 2),
                                list(kt.modes), None if rates.is_default else kt.parametrization.part_weights())
    extra = {} if rates.is_default else {"lr_scale": rates.as_dict()}
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
        **extra,
        "seconds": time.perf_counter() - t0,
    }
