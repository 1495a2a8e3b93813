"""Running one feature-ODE system for :mod:`featureode.ode.solve` (theory §6): the systems built and compiled once
per variant spec, the choice of code that runs RODAS4 (numba or NumPy), the compiled RODAS4 run and the SciPy
reference backend (``solve_ivp`` with the exact Jacobian, guarded against blow-ups). Each run returns the raw
output of one integration (``_Run``); :func:`featureode.ode.solve.solve_variant` turns it into a trajectory.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from featureode.ode import integrate
from featureode.ode import terms as ode
from featureode.ode.compile import Compiled, announce_compile, compile_system, numba_ready
from featureode.results.metrics import relative_loss
from featureode.ode.variants import Variant

JACOBIAN_MAX_STATES = 2000
IMPLICIT_METHODS = ("LSODA", "BDF", "Radau")
LEVELS = (0.5, 0.1)


# ----------------------------------------------------------------------------------------------------------------
# systems, built and compiled once per variant spec
# ----------------------------------------------------------------------------------------------------------------
class _BuiltVariant:
    """A :class:`Variant` whose ``system(basis)`` is the one built before (the SymPy assembly and the system hash
    cost milliseconds, more than a compiled solve); every other attribute is the variant's."""

    def __init__(self, variant: Variant, system: ode.System) -> None:
        self._variant, self._system = variant, system

    def system(self, basis: str = "target") -> ode.System:
        return self._system

    def __getattr__(self, name: str) -> Any:
        return getattr(self._variant, name)


_BUILT: dict[tuple, tuple[ode.System, dict[str, Compiled]]] = {}


def _spec(variant: Variant, basis: str) -> tuple:
    """What a variant's system depends on: the closure's name and term (by value, so an equal user closure made
    again reuses the system), scale, spread, ablations, replacements, parameter names and the basis."""
    closure = variant.closure_obj
    return (closure.name, closure.term, variant.scale, variant.ablate,
            tuple(sorted((k, str(x)) for k, x in variant.replace.items())), tuple(sorted(variant.param_values)),
            basis, variant.spread)


def _built(variant: Variant, basis: str, backend: "str | Callable[[ode.System], str]"
           ) -> tuple[_BuiltVariant, ode.System, Compiled]:
    """The variant's system for ``basis`` and its ``backend`` code (a name, or a function of the system that names
    it), built and compiled once per process."""
    key = _spec(variant, basis)
    if key not in _BUILT:
        _BUILT[key] = (variant.system(basis), {})
    system, compiled = _BUILT[key]
    backend = backend if isinstance(backend, str) else backend(system)
    if backend not in compiled:
        compiled[backend] = compile_system(system, backend)
    return _BuiltVariant(variant, system), system, compiled[backend]


def _rodas_backend(compile: bool | None, label: str, basis: str) -> Callable[[ode.System], str]:
    """Which code runs RODAS4 for a system: ``"numba"`` (the compiled integrator: ≈ 10 s to compile once, then
    milliseconds a solve) when ``compile`` is True, or when ``compile`` is None and its machine code is already
    cached; else ``"numpy"`` (the same integrator in NumPy, :func:`featureode.ode.integrate.numpy_rodas`: nothing to
    compile, ≈ 0.1–1 s a solve). A compile announces itself on stderr."""
    def choose(system: ode.System) -> str:
        if compile is None and numba_ready(system) or compile:
            announce_compile(system, f"the RODAS4 integrator of variant {label!r} ({basis} basis)")
            return "numba"
        return "numpy"
    return choose


# ----------------------------------------------------------------------------------------------------------------
# the SciPy reference backend
# ----------------------------------------------------------------------------------------------------------------
def _loss_events(v: np.ndarray, m: int) -> list[Callable]:
    out = []
    for level in LEVELS:
        def event(t: float, y: np.ndarray, level: float = level) -> float:
            return float(relative_loss(y[:m], v)) - level
        event.direction = -1.0  # type: ignore[attr-defined]  # solve_ivp reads an event's direction attribute
        out.append(event)
    return out


class _Diverged(ArithmeticError):
    """Raised by :class:`_Guard` when the state has blown up."""


class _Guard:
    """Watches a SciPy integration. As the RHS it records non-finite evaluations and raises :class:`_Diverged`
    after ``patience`` in a row (LSODA otherwise retries without end); as an event function (called on every
    accepted state) it raises when the state is non-finite or beyond ``bound`` in absolute value (LSODA otherwise
    stalls with zero-length steps). ``where`` is ``(t, component)`` of the failure: the start of the current run of
    non-finite evaluations, else the most recent one. Disarmed, it only records (for the re-run up to the
    failure)."""

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
        if self.armed and self.streak[2] >= self.patience:  # type: ignore[index]  # _bad has just set the streak
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
            guard.armed, t_end, guard.streak = False, min(t_end, guard.where[0]) * (1 - backoff), None  # type: ignore[index]  # where is set with the streak
            continue
        if failure is not None:
            guard.streak = failure + (1,)
            sol.status, sol.message = -1, "stopped: the state blew up"
        return sol, failure
    return None, failure


class _Run:
    """One integration's raw output: states ``y`` (n_t × 2M) and observables at the times ``t`` reached, events,
    counters, and the failure (``None``, or ``(kind, t, component, message)`` with kind ``"blowup"``/``"failed"``)."""

    def __init__(self, t: np.ndarray, y: np.ndarray, r: np.ndarray, s: np.ndarray, lam: np.ndarray,
                 t_events: Sequence[float | None], stats: dict[str, Any],
                 failure: tuple[str, float, int, str] | None) -> None:
        self.t, self.y, self.r, self.s, self.lam = t, y, r, s, lam
        self.t_events, self.stats, self.failure = tuple(t_events), stats, failure


def _run_scipy(compiled: Compiled, inputs: list[Any], t_eval: np.ndarray, v: np.ndarray, bound: float, *,
               method: str, rtol: float, atol: float, jacobian: bool) -> _Run:
    from scipy.integrate import solve_ivp   # the reference backend only (SciPy's integrate costs 0.5 s to import)

    m = v.size
    t_max = float(t_eval[-1])
    guard = _Guard(lambda y: compiled.rhs(y, *inputs), bound)
    use_jac = jacobian and method in IMPLICIT_METHODS and 2 * m <= JACOBIAN_MAX_STATES
    extra = {"jac": guard.wrap_jac(lambda y: compiled.jac(y, *inputs))} if use_jac else {}

    def run(t_end: float) -> Any:
        with np.errstate(all="ignore"):
            return solve_ivp(guard, (0.0, t_end), np.zeros(2 * m), method=method, t_eval=t_eval[t_eval <= t_end],
                             rtol=rtol, atol=atol, events=_loss_events(v, m) + [guard.event], **extra)

    sol, failure = _integrate(run, guard, t_max)
    if sol is None:
        t_bad, k = failure  # type: ignore[misc]  # no solution means a recorded failure
        empty = np.zeros((0, 2 * m))
        return _Run(np.zeros(0), empty, np.zeros((0, inputs[0].shape[1])), np.zeros(0), np.zeros((0, m)),
                    (None, None), {"jacobian": "exact" if use_jac else "solver"},
                    ("blowup", t_bad, k, "no output before it could be recovered"))
    finite = np.all(np.isfinite(sol.y), axis=0)
    keep = int(np.argmin(finite)) if not finite.all() else sol.t.size
    y = sol.y[:, :keep].T
    obs = [compiled.observe(row, *inputs) for row in y]
    r = np.array([o[0] for o in obs], dtype=float).reshape(keep, -1)
    s = np.array([float(o[1]) for o in obs])
    lam = np.array([o[2] for o in obs], dtype=float).reshape(keep, m)
    t_events = [float(te[0]) if len(te) else None for te in sol.t_events[:2]]
    stats = {"jacobian": "exact" if use_jac else "solver", "nfev": int(sol.nfev), "njev": int(sol.njev),
             "solver_message": sol.message}
    out = None
    if (sol.status < 0 and guard.where is not None) or keep < sol.t.size:
        t_bad, k = guard.where if guard.where is not None else (float(sol.t[keep]), 0)
        out = ("blowup", t_bad, k, sol.message)
    elif sol.status < 0:
        out = ("failed", float(sol.t[keep - 1]) if keep else 0.0, -1, sol.message)
    return _Run(sol.t[:keep], y, r, s, lam, t_events, stats, out)


_NUMPY_RODAS: dict[str, Callable] = {}


def _numpy_integrator(compiled: Compiled) -> Callable:
    if compiled.key not in _NUMPY_RODAS:
        _NUMPY_RODAS[compiled.key] = integrate.numpy_rodas(compiled.rhs, compiled.jac, compiled.observe)
    return _NUMPY_RODAS[compiled.key]


def _run_compiled(compiled: Compiled, inputs: list[Any], t_eval: np.ndarray, v: np.ndarray, bound: float, *,
                  rtol: float, atol: float) -> _Run:
    integrator = compiled.rodas if compiled.backend == "numba" else _numpy_integrator(compiled)
    res = integrate.run(integrator, inputs, t_eval, v, rtol=rtol, atol=atol, levels=LEVELS, bound=bound)  # type: ignore[arg-type]  # the numba backend always compiles the integrator
    stats = {"jacobian": "exact", "nfev": res.n_rhs, "njev": res.n_jac, "steps": res.n_steps,
             "rejected": res.n_rejected, "solver_message": res.message}
    failure = None
    if res.status in (-1, -2):
        last = np.abs(res.y[-1]) if len(res.y) else np.zeros(1)
        k = res.component if res.component is not None else int(np.argmax(np.where(np.isfinite(last), last,
                                                                                      np.inf)))
        failure = ("blowup", res.t_reached, k, "rodas4 stopped there" if res.status == -1 else res.message)
    elif res.status < 0:
        failure = ("failed", res.t_reached, -1, res.message)
    return _Run(res.t, res.y, res.r, res.s, res.lam, res.t_events, stats, failure)
