"""Solving the feature ODE (theory §4, §6): ``solve_variant`` for one variant, ``solve_config`` for a config,
``solve_batch`` for many configs.

The state ``y = (f_β, D_β)`` starts at 0. Two kinds of integrator (``method``):

- ``"rodas4"`` (default): the RODAS4 Rosenbrock integrator of :mod:`featureode.ode.integrate`, with the exact
  indexed Jacobian of :mod:`featureode.ode.compile`: compiled together with the system's numba code (one compile of
  ≈ 10 s per system, cached on disk; no Python runs per step) when that code is cached or a batch is large enough
  to repay it, else the same integrator in NumPy (nothing to compile; equal curves to round-off);
- any ``scipy.integrate.solve_ivp`` method (``"LSODA"``, ``"BDF"``, ``"Radau"``, ``"RK45"`` …): the reference
  backend, with the generated ``backend`` code (NumPy or numba) as right-hand side and the exact Jacobian for the
  implicit methods up to ``JACOBIAN_MAX_STATES`` states (finite differences beyond).

Output times are ``0`` and ``n_points − 1`` log-spaced times in ``[t_min, t_max]``. Loss
``L(t)/L(0) = Σ_β (v_β − f_β)² / Σ_β v_β²`` (on the mode set); ``t50``/``t10`` are the first times ``L/L(0)``
reaches 0.5/0.1, located by solver events (exact to the integration tolerance); ``None`` when not reached.

Results are :class:`featureode.results.trajectory.Trajectory` (one variant, ``kind = "ode"``) and
:class:`featureode.results.trajectory.ODEResult` (every variant of a config). :func:`solve_variant` raises
:class:`SolveError` (:class:`NonFiniteStateError` for a blow-up, naming the time and the mode) with the partial
curve in ``error.trajectory``; :func:`solve_config` and :func:`solve_batch` keep such a variant's partial curve with
``status.error`` set instead of raising.

Building, compiling and running one system (the compiled RODAS4 run and the SciPy reference backend) is in
:mod:`featureode.ode.runners`; its constants ``JACOBIAN_MAX_STATES``, ``IMPLICIT_METHODS`` and ``LEVELS`` are
re-exported here.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from featureode.core.errors import FeatureODEError
from featureode.kernel.parametrization import Parametrization, get_parametrization
from featureode.ode import terms as ode
from featureode.ode.compile import mark_numba_ready
from featureode.ode.runners import (  # noqa: F401  (the constants are re-exported)
    IMPLICIT_METHODS,
    JACOBIAN_MAX_STATES,
    LEVELS,
    _built,
    _rodas_backend,
    _run_compiled,
    _run_scipy,
)
from featureode.results.metrics import in_support_loss, relative_loss
from featureode.results.trajectory import ODEResult, Status, Trajectory
from featureode.ode.variants import (MEANFIELD, MEANFIELD_NAMES, MEANFIELD_WHOLE, REPLAY, Variant,
                                     meanfield_checkpoint_name, variants_from_config)

if TYPE_CHECKING:  # type-only imports (these modules sit above this layer or are heavy)
    from featureode.kernel.theory import KernelTheory
    from featureode.config import Config

COMPILED_METHODS = ("rodas4",)
SCIPY_METHODS = ("LSODA", "BDF", "Radau", "RK45", "RK23", "DOP853")   # solve_ivp's, the reference backend
BLOWUP = 1e6          # blow-up bound on |y|, times (1 + t_max) max|v_β|
#: solve_batch compiles the numba integrator (≈ 10 s per variant, once per machine) from this many configs on
BATCH_COMPILE_MIN = 16


class SolveError(FeatureODEError, RuntimeError):
    """The integration failed; ``trajectory`` holds what was computed before the failure (or ``None``)."""

    def __init__(self, message: str, trajectory: "Trajectory | None" = None) -> None:
        super().__init__(message)
        self.trajectory = trajectory


class NonFiniteStateError(SolveError):
    """The state became non-finite (or blew up); the message names the time and the mode."""


def system_inputs(theory: KernelTheory, variant: Variant, eigenvalues: str = "exact", basis: str = "target",
                  parametrization: "str | Parametrization | None" = None) -> tuple[list[Any], ode.System]:
    """The compiled code's inputs (order of :data:`featureode.ode.terms.INPUTS` + user params) and the system.

    ``B[β, i] = β_i``; ``gpow[β] = g^β``; ``c[β] = c_{|β|}``; ``lam0 = λ_β(0)`` (``exact`` or ``hea``); ``K``: the
    Gram matrix with its diagonal set to 0 in the extended basis (zero for ``hea``, which is diagonal), empty
    otherwise; ``q``, ``q_a``, ``q_w``: the closure prefactors of the parametrization (:func:`closure_prefactors`:
    ``theory.parametrization`` with its per-group learning rates, or ``parametrization``); ``κ`` = the variant's or
    the derived ``q_w c_1/Λ_1²``; ``S``/``Sd``: the second-order growth constants ``S_{βα}`` of
    :mod:`featureode.kernel.second_order` (metric weighted by the parametrization's per-group rates),
    ``max(S_{αα}, 1e-30)`` and the parts ``U_{βαδ}``, ``V_{βα}``, ``Ud_{βα} = U_{βαα}`` for the closures that use
    them (driven by the target's modes, ``v_α ≠ 0``; computed from the theory's network), else empty.
    """
    system = variant.system(basis)
    modes = tuple(theory.modes)
    g = np.asarray(theory.g, dtype=float)
    dim = g.size
    c_levels = np.asarray(theory.c, dtype=float)
    deg = np.array([m.degree for m in modes], dtype=int)
    if deg.size and deg.max() >= c_levels.size:
        raise SolveError(f"mode of degree {deg.max()} needs c_{deg.max()}, but the kernel theory gives c_0…"
                         f"c_{c_levels.size - 1}")
    K = np.zeros((0, 0))
    if basis == "extended":
        if theory.gram is None:
            raise SolveError("basis 'extended' needs the Gram matrix; build the kernel theory with with_gram=True")
        K = np.array(theory.gram, dtype=float) if eigenvalues == "exact" else np.zeros((len(modes),) * 2)
        np.fill_diagonal(K, 0.0)
    pref = closure_prefactors(theory, parametrization)
    kappa = pref["q_w"] * float(c_levels[1] / theory.level_coefficients[1] ** 2) if variant.kappa is None \
        else float(variant.kappa)
    S, Sd, U, V, Ud = np.zeros((0, 0)), np.zeros(0), np.zeros((0, 0, 0)), np.zeros((0, 0)), np.zeros((0, 0))
    if system.reads & {"S", "Sd", "U", "V", "Ud"}:
        S, Sd, U, V, Ud = _second_order_inputs(theory, parametrization)
    sv = _spread_inputs(theory, variant.spread_width) if "sv" in system.reads else np.zeros(0)
    values = {"B": np.array([m.dense(dim) for m in modes], dtype=float).reshape(len(modes), dim),
              "v": np.asarray(theory.target, dtype=float), "lam0": np.asarray(theory.lambda0(eigenvalues), float),
              "g": g, "gpow": np.array([float(m.g_power(g)) for m in modes]), "c": c_levels[deg], "K": K,
              "S": S, "Sd": Sd, "U": U, "V": V, "Ud": Ud, "sv": sv, "gamma": float(theory.gamma),
              "kappa": float(kappa), **pref, **variant.param_values}
    return [values[name] for name in system.inputs], system


def theory_parametrization(theory: KernelTheory, parametrization: "str | Parametrization | None" = None
                           ) -> Parametrization:
    """The parametrization that fixes the closures' constants: ``parametrization`` (an object, or a registered
    name that takes ``theory``'s per-group rates), else ``theory.parametrization`` (a
    :class:`~featureode.kernel.theory.KernelTheory` always has one), else meanfield at plain SGD."""
    if isinstance(parametrization, Parametrization):
        return parametrization
    own = getattr(theory, "parametrization", None)
    own = own if isinstance(own, Parametrization) else get_parametrization("meanfield")
    return own if parametrization is None else get_parametrization(parametrization).with_rates(own.rates)


def closure_prefactors(theory: KernelTheory, parametrization: "str | Parametrization | None" = None) -> dict[str, float]:
    """``{"q", "q_a", "q_w"}`` at ``theory.gamma`` (:func:`theory_parametrization`): the closure prefactor ``q``,
    the readout-growth prefactor ``q_a = q η_a²/E[a²]²`` (scale factor) and the first-layer-displacement prefactor
    ``q_w = q η_w²`` (``displacement``, derived κ); all three are ``γ²`` for meanfield at plain SGD."""
    par, gamma = theory_parametrization(theory, parametrization), float(theory.gamma)
    return {"q": float(par.closure_prefactor(gamma)), "q_a": float(par.readout_growth_prefactor(gamma)),
            "q_w": float(par.displacement_prefactor(gamma))}


def closure_prefactor(theory: KernelTheory, parametrization: "str | Parametrization | None" = None) -> tuple[str, float]:
    """The name of the parametrization that fixes the closure prefactor (:func:`theory_parametrization`) and
    ``q = closure_prefactor(γ)`` at ``theory.gamma``."""
    par = theory_parametrization(theory, parametrization)
    return par.name, float(par.closure_prefactor(float(theory.gamma)))


def second_order_of(theory: KernelTheory, rates: "tuple[float, float, float] | None" = None,
                    parametrization: "str | Parametrization | None" = None) -> tuple[list[int], Any]:
    """The driving modes (the target's, ``v_α ≠ 0``: indices into ``theory.modes``) and the
    :class:`featureode.kernel.second_order.SecondOrder` constants of ``theory`` they drive (deterministic
    quadrature on ``theory.network``, else on the network of ``theory.activation``/``theory.bias_std``/``theory.g``);
    ``rates``: the per-group learning-rate weights ``(η_a, η_w, η_b)`` of the flow metric (default: those of the
    theory's parametrization, :func:`theory_parametrization`). A constant that does not exist (a diverging average)
    is a :class:`SolveError`."""
    from featureode.kernel.growth import GrowthError, Rates
    from featureode.kernel.second_order import network_second_order, second_order_constants

    if not getattr(theory, "activation", ""):
        raise SolveError("the second-order closures need the network's activation and σ_b; build the kernel "
                         "theory with featureode.kernel.theory.kernel_theory (theory.activation is empty)")
    wa, ww, wb = theory_parametrization(theory, parametrization).part_weights() if rates is None else rates
    rates = (float(wa), float(ww), float(wb))
    drivers = [k for k, vb in enumerate(np.asarray(theory.target, float)) if vb != 0]
    net = getattr(theory, "network", None)
    try:
        if net is not None and tuple(net.g_key) == tuple(float(x) for x in theory.g) \
                and net.activation.name == theory.activation:
            key = (id(net), tuple(theory.modes), tuple(drivers), tuple(rates))
            so = _SECOND_ORDER.get(key)
            if so is None or so[0] is not net:
                _SECOND_ORDER[key] = (net, network_second_order(net, theory.modes, drivers, rates=Rates(*rates)))
                while len(_SECOND_ORDER) > 16:
                    _SECOND_ORDER.pop(next(iter(_SECOND_ORDER)))
            return drivers, _SECOND_ORDER[key][1]
        return drivers, second_order_constants(tuple(theory.modes), np.asarray(theory.g, dtype=float),
                                               theory.activation, theory.bias_std, drivers=drivers, rates=rates)
    except (GrowthError, ValueError) as exc:
        raise SolveError(f"second-order constants: {exc}") from None


_SECOND_ORDER: dict = {}


def _second_order_inputs(theory: Any, parametrization: "str | Parametrization | None" = None
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``S_{βα}``, ``Sd_α = max(S_{αα}, 1e-30)``, ``U_{βαδ}`` (:func:`_diagonal_drivers`), ``V_{βα}`` and
    ``Ud_{βα} = U_{βαα}`` (:func:`second_order_of`)."""
    so = second_order_of(theory, parametrization=parametrization)[1]
    U = _diagonal_drivers(so.U)
    return so.S, np.maximum(np.diag(so.S), 1e-30), U, so.V, np.ascontiguousarray(np.einsum("baa->ba", U))


def _diagonal_drivers(U: np.ndarray) -> np.ndarray:
    """``U_{βαδ}`` with the cross terms ``α ≠ δ`` dropped and each ``U_{βαα} = E|u_1^α|²/λ_β`` kept at ≥ 0.

    The cross terms of two drivers of the same parity (``z0`` and ``h3(z0)``) come with a mixed second-order term
    ``E[u_0·u_2^{αδ}]`` that the law does not carry (and the flows of two drivers do not commute), so keeping
    ``U_{βαδ}`` alone would make the law agree with neither the exact second order nor the single-driver constants
    ``S``; without them ``ρ_β`` agrees with ``1 + q Σ_α S_{βα} D_α²`` to ``O(D²)`` (the cross terms of drivers of
    different parity vanish by the sign symmetry ``ŵ_i → −ŵ_i`` anyway). Each ``U_{βαα}`` is a mean of squares;
    a quadrature round-off below 0 is set to 0 so that ``ρ_β`` stays a sum of non-negative terms in floating point.
    """
    U = np.asarray(U, dtype=float)
    if U.size == 0:
        return U
    diag = np.einsum("baa->ba", U)
    out = np.zeros_like(U)
    idx = np.arange(U.shape[1])
    out[:, idx, idx] = np.maximum(diag, 0.0)
    return out


def _spread_inputs(theory: Any, width: "int | None") -> np.ndarray:
    """``s_β`` of :func:`featureode.kernel.spread.spread_shift` on ``theory.modes`` (init spread at ``width``;
    ``None``: infinite width), from ``theory.network`` or its activation, spectrum and σ_b."""
    from featureode.kernel.network import Network
    from featureode.kernel.spread import spread_shift

    net = getattr(theory, "network", None)
    if net is None:
        if not getattr(theory, "activation", ""):
            raise SolveError("the spread-aware flow needs the network's activation and σ_b; build the kernel theory "
                             "with featureode.kernel.theory.kernel_theory (theory.activation is empty)")
        net = Network.build(theory.activation, np.asarray(theory.g, float), theory.bias_std)
    return spread_shift(net, tuple(theory.modes), width)


# ----------------------------------------------------------------------------------------------------------------
# one variant
# ----------------------------------------------------------------------------------------------------------------
#: What :func:`solve_variant` uses for a setting that is neither given nor carried by the theory (a hand-built one).
SOLVE_DEFAULTS: dict[str, Any] = {"eigenvalues": "exact", "backend": "numpy", "method": "rodas4", "rtol": 1e-8,
                                  "atol": 1e-10, "n_points": 200, "t_min": 1e-2}


def _output_times(t_min: float, t_max: float, n_points: int) -> np.ndarray:
    """``0`` and ``n_points − 1`` geometrically spaced times from ``t_min`` to ``t_max``: a copy of the times kept
    per setting (``np.geomspace`` costs ~30 µs, a tenth of a small system's solve; the copy, under 1 µs, keeps
    every trajectory's times its own)."""
    return _times(t_min, t_max, n_points).copy()


@functools.lru_cache(maxsize=64)
def _times(t_min: float, t_max: float, n_points: int) -> np.ndarray:
    return np.concatenate([[0.0], np.geomspace(t_min, t_max, n_points - 1)])


def solve_variant(theory: KernelTheory, variant: "Variant | str", t_max: float | None = None, eigenvalues: str | None = None,
                  *, basis: str | None = None, backend: str | None = None, method: str | None = None,
                  rtol: float | None = None, atol: float | None = None, n_points: int | None = None,
                  t_min: float | None = None, jacobian: bool = True, compile: bool | None = None) -> Trajectory:
    """Integrate one variant on the modes of ``theory`` (a :class:`featureode.kernel.theory.KernelTheory`) up to ``t_max``.

    Every setting left out is the one the theory was built for: a theory from
    :func:`~featureode.kernel.theory.kernel_theory` carries its ``basis`` and its config's ``settings``, so
    ``solve_variant(kernel_theory(cfg), "displacement")`` is the variant as ``solve_config(cfg)`` solves it (with
    ``t_min = min(training.t_min, t_max/10)``); a hand-built theory falls back to :data:`SOLVE_DEFAULTS` (and needs
    ``t_max``). A ``basis`` other than the theory's own is refused (:class:`SolveError`): its modes and Gram matrix
    belong to that basis, and solving another would give another curve without saying so.

    ``variant``: a :class:`~featureode.ode.variants.Variant` or a closure name; ``eigenvalues``: ``exact`` or ``hea``
    ``λ_β(0)``; ``basis``: ``target`` (diagonal flow) or ``extended`` (uses ``theory.gram``); ``method``:
    ``rodas4`` (compiled, default) or a ``solve_ivp`` method; ``backend`` (``numpy`` or ``numba``): the right-hand
    side code of the ``solve_ivp`` methods (``rodas4`` picks its own: ``compile``); ``rtol``/``atol``: tolerances;
    ``jacobian=False`` lets a ``solve_ivp`` method estimate the Jacobian; ``compile`` (``rodas4``): run the numba
    integrator, compiling it first if needed (True), or the same integrator in NumPy (False); ``None`` (default):
    numba when its machine code is already cached, else NumPy (equal curves to round-off; see
    :func:`_rodas_backend`).

    Returns a :class:`~featureode.results.trajectory.Trajectory` (``kind = "ode"``, ``name`` = the variant's label):
    ``loss = L/L(0)``, ``in_support_loss`` (on the modes with ``v_β ≠ 0``), ``f``, ``lam`` (``λ_β(t)``), ``r``,
    arrays ``"D"`` and ``"s"``, ``t50``/``t10`` from the solver's events, ``meta = {"info": …}`` (terms, solver,
    tolerances, work counters, seconds).

    Blow-up: the integration stops when a state is non-finite or beyond ``BLOWUP (1 + t_max) max|v|``;
    :class:`NonFiniteStateError` then names the time and the mode and keeps the curve before it in
    ``error.trajectory`` (with ``status.error`` set).
    """
    own = dict(getattr(theory, "settings", None) or {})
    built_for = getattr(theory, "basis", None)
    if basis is None:
        basis = built_for or "target"
    elif built_for is not None and basis != built_for:
        raise SolveError(f"basis={basis!r}, but this kernel theory was built on the {built_for} basis "
                         f"({len(theory.modes)} modes); leave basis out, or build the theory with "
                         f"kernel_theory(cfg, basis={basis!r})")
    if t_max is None:
        t_max = own.get("t_max")
        if t_max is None:
            raise SolveError("solve_variant needs t_max: this kernel theory was not built from a config (give "
                             "t_max=…, or build it with kernel_theory(cfg))")
    if t_min is None:
        t_min = min(own["t_min"], t_max / 10) if "t_min" in own else SOLVE_DEFAULTS["t_min"]
    pick = lambda name, given: given if given is not None else own.get(name, SOLVE_DEFAULTS[name])  # noqa: E731
    eigenvalues, backend, method = pick("eigenvalues", eigenvalues), pick("backend", backend), pick("method", method)
    rtol, atol, n_points = pick("rtol", rtol), pick("atol", atol), pick("n_points", n_points)
    variant = Variant(variant) if isinstance(variant, str) else variant
    if not isinstance(variant, Variant):
        raise SolveError(f"variant must be a closure name or a Variant, got {variant!r}")
    try:
        t_max, t_min = float(t_max), float(t_min)
        if isinstance(n_points, bool) or int(n_points) != n_points:
            raise ValueError
        n_points = int(n_points)
    except (TypeError, ValueError):
        raise SolveError(f"need numbers t_max, t_min and an integer n_points, got t_max={t_max!r}, "
                         f"t_min={t_min!r}, n_points={n_points!r}") from None
    if not math.isfinite(t_max):
        raise SolveError(f"t_max must be a finite time, got {t_max}; the integration would never end")
    if not t_max > t_min > 0 or n_points < 2:
        raise SolveError(f"need t_max > t_min > 0 and n_points ≥ 2, got t_max={t_max}, t_min={t_min}, "
                         f"n_points={n_points}")
    if method not in COMPILED_METHODS + SCIPY_METHODS:
        raise ValueError(f"[ode] method {method!r} is unknown; valid: rodas4 (compiled, default) or a solve_ivp "
                         f"method: {', '.join(SCIPY_METHODS)}")
    compiled_method = method in COMPILED_METHODS
    built, system, compiled = _built(variant, basis, _rodas_backend(compile, variant.label, basis)
                                     if compiled_method else backend)
    code = compiled.backend
    inputs, _ = system_inputs(theory, built, eigenvalues, basis)  # type: ignore[arg-type]  # a _BuiltVariant is its Variant with the system cached
    v = np.asarray(inputs[1], dtype=float)
    m = v.size
    if not np.any(v):
        raise SolveError(f"variant {variant.label!r}: the target is zero on every mode of the mode set "
                         f"({[str(x) for x in theory.modes]}), so L/L(0) is undefined; give a nonzero target")
    bound = BLOWUP * (1.0 + t_max) * max(1.0, float(np.max(np.abs(v), initial=0.0)))
    t_eval = _output_times(t_min, t_max, n_points)
    start = time.perf_counter()
    if compiled_method:
        out = _run_compiled(compiled, inputs, t_eval, v, bound, rtol=rtol, atol=atol)
        if code == "numba":
            mark_numba_ready(system)
    else:
        out = _run_scipy(compiled, inputs, t_eval, v, bound, method=method, rtol=rtol, atol=atol,
                         jacobian=jacobian)
    info = {"variant": variant.label, "closure": variant.closure_obj.name, "terms": [t.name for t in system.terms],
            "removed": list(system.removed), "replaced": list(system.replaced), "basis": basis,
            "eigenvalues": eigenvalues, "backend": code, "method": method, "rtol": rtol, "atol": atol,
            **{k: out.stats.get(k) for k in ("jacobian", "nfev", "njev")},
            "seconds": time.perf_counter() - start, "solver_message": out.stats.get("solver_message")}
    error = None
    if out.failure is not None:
        kind, t_bad, k, message = out.failure
        if kind == "blowup":
            error = (f"variant {variant.label!r}: the state became non-finite (or beyond {bound:.3g}) at "
                     f"t ≈ {t_bad:.6g} in {'f' if k < m else 'D'}_β of mode {theory.modes[k % m]} ({message}); "
                     f"the {out.t.size} output times before it are kept")
        else:
            error = f"variant {variant.label!r}: integration failed at t ≈ {t_bad:.6g}: {message}"
    f = out.y[:, :m]
    traj = Trajectory("ode", variant.label, tuple(str(x) for x in theory.modes), v, out.t, relative_loss(f, v), f=f,
                      lam=out.lam, r=out.r, in_support_loss=in_support_loss(f, v), t50=out.t_events[0],
                      t10=out.t_events[1], arrays={"D": out.y[:, m:], "s": out.s}, meta={"info": info},
                      status=Status(complete=error is None, reached_t=float(out.t[-1]) if out.t.size else 0.0,
                                    error=error))
    if error is not None:
        cls = NonFiniteStateError if out.failure[0] == "blowup" else SolveError  # type: ignore[index]  # an error means a recorded failure
        raise cls(error, traj)
    return traj


# ----------------------------------------------------------------------------------------------------------------
# configs
# ----------------------------------------------------------------------------------------------------------------
def _solve_one_config(cfg: Any, theory: Any, allow_replay: bool = False, compile: bool | None = None,
                      progress: bool = False, out_dir: "str | Path | None" = None) -> ODEResult:
    o = cfg.ode
    t_min = min(cfg.training.t_min, cfg.training.t_max / 10)
    variants: dict[str, Trajectory] = {}
    closures = variants_from_config(o, allow_replay=allow_replay)
    custom, names = o.custom or {}, list(o.variants)
    # the listed order: a mean-field name (a str) takes its place among the closures; replay is added by compare
    rest = iter(closures)
    slots: list[Variant | str] = [n if n in MEANFIELD_NAMES and n not in custom else next(rest) for n in names
                                  if n in custom or n != REPLAY]
    for variant in slots:
        if isinstance(variant, str):
            from featureode.ode.meanfield import MeanFieldError, meanfield_trajectory
            try:
                variants[variant] = meanfield_trajectory(
                    theory, cfg.training.t_max, t_min=t_min, n_points=o.n_points, tail=variant != MEANFIELD,
                    drive="whole" if variant == MEANFIELD_WHOLE else "basis", progress=progress,
                    checkpoint=None if out_dir is None else Path(out_dir) / meanfield_checkpoint_name(variant))
            except MeanFieldError as exc:
                variants[variant] = Trajectory.failed(variant, theory.modes, theory.target, str(exc))
            continue
        if variant.spread and variant.spread_width is None:   # the init spread at the config's width
            variant = dataclasses.replace(variant, spread_width=int(cfg.network.width))
        try:
            traj = solve_variant(theory, variant, cfg.training.t_max, o.eigenvalues, basis=o.basis,
                                 backend=o.backend, method=o.method, rtol=o.rtol, atol=o.atol, n_points=o.n_points,
                                 t_min=t_min, compile=compile)
        except SolveError as exc:
            traj = exc.trajectory  # type: ignore[assignment]  # None is replaced on the next line
            if traj is None:
                traj = Trajectory.failed(variant.label, theory.modes, theory.target, str(exc))
        variants[variant.label] = traj
    return ODEResult(tuple(str(x) for x in theory.modes), np.asarray(theory.target, dtype=float), variants,
                     eigenvalues=o.eigenvalues, basis=o.basis, t_max=cfg.training.t_max)


def _theory_for(cfg: Any) -> Any:
    from featureode.kernel import theory as kernel

    return kernel.kernel_theory(cfg, with_gram=cfg.ode.basis == "extended")


def solve_config(cfg: "Config", out_dir: "str | Path | None" = None,
                 theory: "KernelTheory | None" = None, *,
                 allow_replay: bool = False, compile: bool | None = None, progress: bool = False) -> ODEResult:
    """Solve every variant of ``cfg.ode`` up to ``cfg.training.t_max`` on ``theory`` (a
    :class:`featureode.kernel.theory.KernelTheory` already built for ``cfg``; default: ``kernel.kernel_theory(cfg)``, with
    the Gram matrix on the extended basis).

    Returns an :class:`~featureode.results.trajectory.ODEResult` and, with ``out_dir``, writes ``ode.json``/``ode.npz``
    (theory §6 keys plus each variant's ``D``, ``r``, ``s``, ``info``). A variant that fails does not raise: its
    trajectory keeps the partial curve with ``status.error`` set (``result.errors`` lists them). The variant
    ``replay`` needs a simulation: it is a :class:`~featureode.ode.variants.VariantError` here unless ``allow_replay``
    (a caller such as compare that adds :func:`featureode.ode.replay.replay` itself), which skips it. ``compile``:
    as in :func:`solve_variant` (default: the numba integrator when cached, else the NumPy one). ``progress``: a
    bar on stderr for each mean-field variant (seconds to hours; the closures take well under a second). With
    ``out_dir``, a mean-field variant keeps its place there every five minutes
    (:func:`~featureode.ode.variants.meanfield_checkpoint_name`, removed when its run ends), and a call on the same
    folder after an interruption goes on from it, with the curve of a run without a break.
    """
    from featureode.config import require_config

    cfg = require_config(cfg, "solve_config", SolveError)
    result = _solve_one_config(cfg, _theory_for(cfg) if theory is None else theory, allow_replay, compile, progress,
                               out_dir)
    if out_dir is not None:
        result.save(out_dir)
    return result


def solve_batch(cfgs: "Sequence[Config]", theories: "Sequence[KernelTheory] | None" = None,
                out_dirs: "Sequence[str | Path | None] | None" = None,
                compile: bool | None = None) -> list[ODEResult]:
    """Solve many configs (the ``--ode-only`` sweep): ``result[k] = solve_config(cfgs[k], out_dirs[k],
    theories[k])``, faster.

    Every variant of every config runs the compiled integrator (``[ode] method = "rodas4"``): systems are built
    and compiled once per distinct variant (not per config), and each solve runs in machine code with no Python
    per step, so the Python cost per config is the input assembly alone. ``theories``: kernel theories already
    built (e.g. by a batched kernel path), one per config; default ``kernel.kernel_theory`` per config.
    ``out_dirs``: where to write each config's ``ode.json``/``ode.npz`` (``None`` entries: not written). A failing
    variant keeps its partial curve with ``status.error`` set, as in :func:`solve_config`. ``compile``: as in
    :func:`solve_variant`; ``None`` (default) compiles the numba integrator of each variant for a batch of at least
    :data:`BATCH_COMPILE_MIN` configs (its ≈ 10 s are then repaid) and otherwise uses it only when it is cached.
    """
    cfgs = list(cfgs)
    if theories is not None and len(theories) != len(cfgs):
        raise ValueError(f"solve_batch: {len(theories)} theories for {len(cfgs)} configs")
    if out_dirs is not None and len(out_dirs) != len(cfgs):
        raise ValueError(f"solve_batch: {len(out_dirs)} output folders for {len(cfgs)} configs")
    if compile is None and len(cfgs) >= BATCH_COMPILE_MIN:
        compile = True
    return [solve_config(cfg, out_dirs[k] if out_dirs is not None else None,
                         theories[k] if theories is not None else None, compile=compile)
            for k, cfg in enumerate(cfgs)]
