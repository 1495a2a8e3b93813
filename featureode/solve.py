"""Solving the feature ODE (DESIGN §4, §6): ``solve_variant`` for one variant, ``solve_config`` for a config.

The state ``y = (f_β, D_β)`` starts at 0 and is integrated by ``scipy.integrate.solve_ivp`` (default LSODA, which
switches to BDF when the system turns stiff — it does when ``λ_β(t)`` grows) with the exact indexed Jacobian of
:mod:`featureode.compile` for implicit methods (LSODA, BDF, Radau) up to ``JACOBIAN_MAX_STATES`` states; beyond that
the solver estimates the Jacobian by finite differences. Output times are ``0`` and ``n_points − 1`` log-spaced
times in ``[t_min, t_max]``.

Loss ``L(t)/L(0) = Σ_β (v_β − f_β)² / Σ_β v_β²`` (the in-support loss on the mode set). ``t50``/``t10`` are the
first times ``L/L(0)`` reaches 0.5/0.1, located by solver events (a root of ``L/L(0) − level`` on the solver's
dense output, i.e. exact to the integration tolerance); ``None`` when not reached by ``t_max``.

A non-finite state stops the solve with :class:`NonFiniteStateError`, which names the time and the mode and keeps
the output computed before it in ``error.solution``.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy.integrate import solve_ivp

from . import ode
from .compile import compile_system
from .hermite import Mode
from .variants import Variant, variants_from_config

JACOBIAN_MAX_STATES = 2000
IMPLICIT_METHODS = ("LSODA", "BDF", "Radau")
LEVELS = (0.5, 0.1)
BLOWUP = 1e6          # blow-up bound on |y|, times (1 + t_max) max|v_β|
_NPZ_FIELDS = {"t": "t", "loss": "loss", "f": "f", "D": "D", "lambda": "lam", "r": "r", "s": "s"}


class SolveError(RuntimeError):
    """The integration failed; ``solution`` holds what was computed before the failure (or ``None``)."""

    def __init__(self, message: str, solution: "Solution | None" = None) -> None:
        super().__init__(message)
        self.solution = solution


class NonFiniteStateError(SolveError):
    """The state became non-finite; the message names the time and the mode."""


@dataclass(frozen=True)
class Solution:
    """Trajectory of one variant: arrays over output times ``t`` (``f``, ``D``, ``lam``: ``(n_t, M)``; ``r``:
    ``(n_t, d)``; ``s``, ``loss``: ``(n_t,)``)."""

    name: str
    modes: tuple[Mode, ...]
    target: np.ndarray
    t: np.ndarray
    f: np.ndarray
    D: np.ndarray
    lam: np.ndarray
    r: np.ndarray
    s: np.ndarray
    loss: np.ndarray
    t50: float | None
    t10: float | None
    info: dict

    def to_json(self) -> dict[str, Any]:
        """The ``variants[NAME]`` entry of ``ode.json`` (DESIGN §6, plus ``D``, ``r``, ``s`` and ``info``)."""
        return {"t": self.t.tolist(), "loss": self.loss.tolist(), "t50": self.t50, "t10": self.t10,
                "f": self.f.tolist(), "lambda": self.lam.tolist(), "D": self.D.tolist(), "r": self.r.tolist(),
                "s": self.s.tolist(), "info": self.info}


def system_inputs(theory: Any, variant: Variant, eigenvalues: str = "exact", basis: str = "target",
                  parametrization: str | None = None) -> tuple[list[Any], ode.System]:
    """The compiled code's inputs (order of :data:`featureode.ode.INPUTS` + user params) and the system.

    ``B[β, i] = β_i``; ``gpow[β] = g^β``; ``c[β] = c_{|β|}``; ``lam0 = λ_β(0)`` (``exact`` or ``hea``); ``K``: the
    Gram matrix with its diagonal set to 0 in the extended basis (zero for ``hea``, which is diagonal), empty
    otherwise; ``q``: the closure prefactor ``closure_prefactor(γ)`` of the parametrization (``parametrization``,
    else ``theory.parametrization`` when the theory has one, else ``"meanfield"``: ``q = γ²``); ``κ`` = the variant's
    or the derived ``q c_1/Λ_1²``; ``S``/``Sd``: the second-order growth constants ``S_{βα}`` of
    :mod:`featureode.second_order` and ``max(S_{αα}, 1e-30)`` for the closures that use them (driven by the
    target's modes, ``v_α ≠ 0``; computed from ``theory.activation``/``theory.bias_std``), else empty.
    """
    from .parametrization import get_parametrization

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
    name = parametrization or getattr(theory, "parametrization", None) or "meanfield"
    q = float(get_parametrization(name).closure_prefactor(float(theory.gamma)))
    kappa = q * float(c_levels[1] / theory.level_coefficients[1] ** 2) if variant.kappa is None \
        else float(variant.kappa)
    S, Sd = np.zeros((0, 0)), np.zeros(0)
    if any(a.expr.has(ode.S) or a.expr.has(ode.Sd) for a in system.assignments):
        S, Sd = _second_order_inputs(theory, modes, g)
    values = {"B": np.array([m.dense(dim) for m in modes], dtype=float).reshape(len(modes), dim),
              "v": np.asarray(theory.target, dtype=float), "lam0": np.asarray(theory.lambda0(eigenvalues), float),
              "g": g, "gpow": np.array([float(m.g_power(g)) for m in modes]), "c": c_levels[deg], "K": K,
              "S": S, "Sd": Sd, "gamma": float(theory.gamma), "kappa": float(kappa), "q": q,
              **variant.param_values}
    return [values[name] for name in system.inputs], system


def _second_order_inputs(theory: Any, modes: tuple[Mode, ...], g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``S_{βα}`` (driven by the target's modes) and ``Sd_α = max(S_{αα}, 1e-30)`` for ``theory``."""
    from .second_order import second_order_constants

    if not getattr(theory, "activation", ""):
        raise SolveError("the second-order closures need the network's activation and σ_b; build the kernel "
                         "theory with featureode.kernel.kernel_theory (theory.activation is empty)")
    drivers = [k for k, vb in enumerate(np.asarray(theory.target, float)) if vb != 0]
    so = second_order_constants(modes, g, theory.activation, theory.bias_std, drivers=drivers)
    return so.S, np.maximum(np.diag(so.S), 1e-30)


def _loss(v: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``L/L(0) = Σ_β (v_β − f_β)² / Σ_β v_β²`` on the mode set, for ``f`` of shape (..., M)."""
    return np.sum((v - f) ** 2, axis=-1) / np.sum(v**2)


def _loss_events(v: np.ndarray, m: int) -> list[Callable]:
    out = []
    for level in LEVELS:
        def event(t: float, y: np.ndarray, level: float = level) -> float:
            return float(_loss(v, y[:m])) - level
        event.direction = -1.0
        out.append(event)
    return out


class _Diverged(ArithmeticError):
    """Raised by :class:`_Guard` when the state has blown up."""


class _Guard:
    """Watches the integration. As the RHS it records non-finite evaluations and raises :class:`_Diverged` after
    ``patience`` in a row (LSODA otherwise retries without end); as an event function (called on every accepted
    state) it raises when the state is non-finite or beyond ``bound`` in absolute value (LSODA otherwise stalls with
    zero-length steps). ``where`` is ``(t, component)`` of the failure: the start of the current run of non-finite
    evaluations, else the most recent one. Disarmed, it only records (for the re-run up to the failure)."""

    def __init__(self, fun: Callable[[np.ndarray], np.ndarray], bound: float, patience: int = 200) -> None:
        self.fun, self.bound, self.patience = fun, bound, patience
        self.streak: tuple[float, int, int] | None = None
        self.last: tuple[float, int] | None = None
        self.armed = True

    @property
    def where(self) -> tuple[float, int] | None:
        return self.streak[:2] if self.streak is not None else self.last

    def _bad(self, t: float, k: int) -> None:
        count = self.streak[2] + 1 if self.streak is not None else 1
        self.streak = (self.streak[:2] if self.streak is not None else (t, k)) + (count,)
        self.last = (t, k)

    def __call__(self, t: float, y: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            dy = self.fun(y)
        ok = np.isfinite(y) & np.isfinite(dy)
        if ok.all():
            self.streak = None
            return dy
        self._bad(t, int(np.argmin(ok)))
        if self.armed and self.streak[2] >= self.patience:
            raise _Diverged(f"{self.patience} consecutive non-finite evaluations")
        return dy

    def wrap_jac(self, jac: Callable[[np.ndarray], np.ndarray]) -> Callable[[float, np.ndarray], np.ndarray]:
        """The Jacobian as the solver calls it, recording non-finite entries like the RHS does."""
        def wrapped(t: float, y: np.ndarray) -> np.ndarray:
            with np.errstate(all="ignore"):
                out = jac(y)
            ok = np.all(np.isfinite(out), axis=1)
            if not ok.all():
                self._bad(t, int(np.argmin(ok)))
            return out
        return wrapped

    def event(self, t: float, y: np.ndarray) -> float:
        size = np.where(np.isfinite(y), np.abs(y), np.inf)
        if self.armed and size.max() > self.bound:
            self.streak = None
            self._bad(t, int(np.argmax(size)))
            raise _Diverged(f"state beyond {self.bound:.3g} at t = {t}")
        return 1.0


def _integrate(run: Callable[[float], Any], guard: _Guard, t_max: float) -> tuple[Any, tuple[float, int] | None]:
    """``run(t_max)``; after a blow-up, re-run with the guard disarmed up to just before the failure, backing off
    further while the solver still fails. Returns the solver result (``None`` if nothing could be recovered) and
    ``(t, component)`` of the failure (``None`` if there was none); a recovered result gets status −1."""
    t_end, failure = t_max, None
    for backoff in (1e-9, 1e-6, 1e-3, 1e-1, None):
        try:
            sol = run(t_end)
        except (_Diverged, ValueError, np.linalg.LinAlgError):
            if guard.streak is None:
                raise
            failure = failure or guard.where
            if backoff is None:
                return None, failure
            guard.armed, t_end, guard.streak = False, min(t_end, guard.where[0]) * (1 - backoff), None
            continue
        if failure is not None:
            guard.streak = failure + (1,)
            sol.status, sol.message = -1, "stopped: the state blew up"
        return sol, failure
    return None, failure


def solve_variant(theory: Any, variant: "Variant | str", t_max: float, eigenvalues: str = "exact", *,
                  basis: str = "target", backend: str = "numpy", method: str = "LSODA", rtol: float = 1e-8,
                  atol: float = 1e-10, n_points: int = 200, t_min: float = 1e-2,
                  jacobian: bool = True) -> Solution:
    """Integrate one variant on the modes of ``theory`` (a :class:`featureode.kernel.KernelTheory`) up to ``t_max``.

    ``variant``: a :class:`~featureode.variants.Variant` or a closure name; ``eigenvalues``: ``exact`` or ``hea``
    ``λ_β(0)``; ``basis``: ``target`` (diagonal flow) or ``extended`` (uses ``theory.gram``); ``backend``: ``numpy``
    or ``numba``; ``method``/``rtol``/``atol``: passed to ``solve_ivp``; ``jacobian=False`` lets the solver estimate
    the Jacobian.

    Blow-up: the solver is stopped when an accepted state is non-finite or beyond ``BLOWUP (1 + t_max) max|v|``,
    or when it keeps evaluating non-finite derivatives, and re-run up to just before that time (solvers that fail
    cleanly keep their output directly). :class:`NonFiniteStateError` then names the time and the mode and keeps
    the output before it in ``error.solution``.
    """
    variant = Variant(variant) if isinstance(variant, str) else variant
    if not t_max > t_min > 0 or n_points < 2:
        raise SolveError(f"need t_max > t_min > 0 and n_points ≥ 2, got t_max={t_max}, t_min={t_min}, "
                         f"n_points={n_points}")
    inputs, system = system_inputs(theory, variant, eigenvalues, basis)
    v = inputs[1]
    m = v.size
    if not np.any(v):
        raise SolveError(f"variant {variant.label!r}: the target is zero on every mode of the mode set "
                         f"({[str(x) for x in theory.modes]}), so L/L(0) is undefined; give a nonzero target")
    compiled = compile_system(system, backend)
    bound = BLOWUP * (1.0 + t_max) * max(1.0, float(np.max(np.abs(v), initial=0.0)))
    guard = _Guard(lambda y: compiled.rhs(y, *inputs), bound)
    use_jac = jacobian and method in IMPLICIT_METHODS and 2 * m <= JACOBIAN_MAX_STATES
    extra = {"jac": guard.wrap_jac(lambda y: compiled.jac(y, *inputs))} if use_jac else {}
    t_eval = np.concatenate([[0.0], np.geomspace(t_min, t_max, n_points - 1)])

    def run(t_end: float) -> Any:
        with np.errstate(all="ignore"):
            return solve_ivp(guard, (0.0, t_end), np.zeros(2 * m), method=method, t_eval=t_eval[t_eval <= t_end],
                             rtol=rtol, atol=atol, events=_loss_events(v, m) + [guard.event], **extra)

    start = time.perf_counter()
    sol, failure = _integrate(run, guard, t_max)
    if sol is None:
        raise NonFiniteStateError(f"variant {variant.label!r}: the state became non-finite at t ≈ {failure[0]:.6g}, "
                                  "and no output before it could be recovered")
    finite = np.all(np.isfinite(sol.y), axis=0)
    keep = int(np.argmin(finite)) if not finite.all() else sol.t.size
    y = sol.y[:, :keep]
    obs = [compiled.observe(y[:, k], *inputs) for k in range(keep)]
    t50, t10 = (float(te[0]) if len(te) else None for te in sol.t_events[:2])
    info = {"variant": variant.label, "closure": variant.closure_obj.name, "terms": [t.name for t in system.terms],
            "removed": list(system.removed), "replaced": list(system.replaced), "basis": basis,
            "eigenvalues": eigenvalues, "backend": backend, "method": method, "rtol": rtol, "atol": atol,
            "jacobian": "exact" if use_jac else "solver", "nfev": int(sol.nfev), "njev": int(sol.njev),
            "seconds": time.perf_counter() - start, "solver_message": sol.message}
    solution = Solution(variant.label, tuple(theory.modes), np.asarray(v), sol.t[:keep], y[:m].T, y[m:].T,
                        np.array([o[2] for o in obs]).reshape(keep, m),
                        np.array([o[0] for o in obs]).reshape(keep, -1), np.array([float(o[1]) for o in obs]),
                        _loss(v, y[:m].T), t50, t10, info)
    if (sol.status < 0 and guard.where is not None) or keep < sol.t.size:
        t_bad, k = guard.where if guard.where is not None else (float(sol.t[keep]), 0)
        raise NonFiniteStateError(
            f"variant {variant.label!r}: the state became non-finite (or beyond {bound:.3g}) at t ≈ {t_bad:.6g} "
            f"in {'f' if k < m else 'D'}_β of mode {theory.modes[k % m]} ({sol.message}); the {keep} output times "
            "before it are kept in error.solution", solution)
    if sol.status < 0:
        raise SolveError(f"variant {variant.label!r}: integration failed: {sol.message}", solution)
    return solution


def solve_config(cfg: Any, out_dir: "str | Path | None" = None) -> dict[str, Any]:
    """Solve every variant of ``cfg.ode`` on ``featureode.kernel.kernel_theory(cfg)`` up to ``cfg.training.t_max``.

    Returns (and with ``out_dir`` writes ``ode.json``) ``{"modes", "target", "variants": {NAME: {"t", "loss",
    "t50", "t10", "f", "lambda", "D", "r", "s", "info"}}, "eigenvalues", "basis", "t_max"}``, and ``ode.npz`` with
    arrays ``modes``, ``target`` and ``NAME/FIELD``. A variant that fails keeps its partial output plus
    ``"error"``; after writing, :class:`SolveError` is raised with ``error.result`` = the dict.
    """
    from . import kernel

    o = cfg.ode
    theory = kernel.kernel_theory(cfg, with_gram=o.basis == "extended")
    result: dict[str, Any] = {"modes": [str(m) for m in theory.modes],
                              "target": np.asarray(theory.target, dtype=float).tolist(), "variants": {},
                              "eigenvalues": o.eigenvalues, "basis": o.basis, "t_max": cfg.training.t_max}
    arrays: dict[str, np.ndarray] = {"modes": np.array(result["modes"]), "target": np.asarray(theory.target)}
    errors = []
    for variant in variants_from_config(o):
        try:
            sol = solve_variant(theory, variant, cfg.training.t_max, o.eigenvalues, basis=o.basis,
                                backend=o.backend, method=o.method, rtol=o.rtol, atol=o.atol, n_points=o.n_points,
                                t_min=min(cfg.training.t_min, cfg.training.t_max / 10))
            entry = sol.to_json()
        except SolveError as exc:
            sol = exc.solution
            entry = {**(sol.to_json() if sol is not None else {}), "error": str(exc)}
            errors.append(str(exc))
        result["variants"][variant.label] = entry
        if sol is not None:
            arrays.update({f"{variant.label}/{key}": np.asarray(getattr(sol, attr), dtype=float)
                           for key, attr in _NPZ_FIELDS.items()})
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "ode.json").write_text(json.dumps(result, indent=1))
        np.savez(out / "ode.npz", **arrays)
    if errors:
        err = SolveError("; ".join(errors))
        err.result = result
        raise err
    return result

