"""A compiled stiff integrator for the feature ODE: RODAS4 with the exact Jacobian, events and blow-up guard.

Method. RODAS4 (Hairer & Wanner, *Solving ODEs II*, 2nd ed. 1996, §IV.7): a 6-stage, L-stable, stiffly accurate
Rosenbrock method of order 4 with an embedded order-3 solution. For the autonomous system ``y' = F(y)``, with
``J = ∂F/∂y`` at the step's start and ``G = I/(γh) − J`` (``γ = 1/4``), stage ``k`` solves

    G K_k = F(y + Σ_{l<k} a_{kl} K_l) + Σ_{l<k} (c_{kl}/h) K_l,

the step is ``y_new = y + Σ_k m_k K_k`` and the error estimate is ``K_6`` (the difference to the embedded
solution). Each step costs one Jacobian, one LU factorisation of ``G`` and six right-hand sides; no Newton
iteration. The feature ODE's Jacobian has the block form ``[[J_ff, J_fD], [−I, 0]]`` (``dD/dt = v − f``), so
``G`` is solved through its ``M × M`` Schur complement (an 8× cheaper LU) whenever the block form holds. The error norm and step control are SciPy's (RMS of ``err/(atol + rtol max(|y|, |y_new|))``, factor
``0.9 err^{-1/4}`` within ``[0.2, 6]``, no growth right after a rejection).

Output. The steps are the error control's own (only the last one is cut to end on the final time); the state at
the output times inside an accepted step comes from RODAS4's dense output (:data:`D`, order 3, exact at both ends of
the step), so 200 output times do not force 200 steps. Events ``L/L(0) = level``
(``L/L(0) = Σ_β (v_β − f_β)²/Σ_β v_β²``, falling through the level): when an accepted step crosses a level, the
crossing is located by the Illinois method on the step size ``τ ∈ [0, h]`` of a single RODAS4 step from the step's
start, so the event time is exact to the integration tolerance (not interpolated).

Failures end the integration at the last accepted state with a status code (:data:`STATUS`): non-finite values or
a state beyond ``bound`` (blow-up), a step size below round-off, or ``max_steps`` steps.

How it is compiled. The functions below are plain Python written for numba. :mod:`featureode.ode.compile` copies their
source (:func:`template_source`) into every generated numba module, where ``rhs``, ``jac`` and ``observe`` are the
system's generated functions, and compiles them there with ``numba.njit(cache=True)``: the integrator then calls
the right-hand side without any Python in between, and its machine code is cached on disk per system.
:func:`run` is the Python entry point.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

#: RODAS4 coefficients (Hairer & Wanner 1996, the ``A``/``C``/``M`` form of Rosenbrock methods without ``J``
#: products), strictly lower triangular ``A[k, l]``, ``C[k, l]``; ``M``: weights of the solution.
GAMMA = 0.25
A = np.zeros((6, 6))
C = np.zeros((6, 6))
_A_ROWS = ((1.544,),
           (0.9466785280815826, 0.2557011698983284),
           (3.314825187068521, 2.896124015972201, 0.9986419139977817),
           (1.221224509226641, 6.019134481288629, 12.53708332932087, -0.6878860361058950),
           (1.221224509226641, 6.019134481288629, 12.53708332932087, -0.6878860361058950, 1.0))
_C_ROWS = ((-5.6688,),
           (-2.430093356833875, -0.2063599157091915),
           (-0.1073529058151375, -9.594562251023355, -20.47028614809616),
           (7.496443313967647, -10.24680431464352, -33.99990352819905, 11.70890893206160),
           (8.083246795921522, -7.981132988064893, -31.52159432874371, 16.31930543123136, -6.058818238834054))
for _k, (_a, _c) in enumerate(zip(_A_ROWS, _C_ROWS), start=1):
    A[_k, :_k], C[_k, :_k] = _a, _c
M = np.array([1.221224509226641, 6.019134481288629, 12.53708332932087, -0.6878860361058950, 1.0, 1.0])

#: Dense output of RODAS4 (Hairer's ``rodas.f``, its ``D21``–``D35``): on an accepted step of size ``h`` from ``y`` to
#: ``y_new`` with stages ``K_1..K_5``, ``y(t + s h) = (1 − s) y + s (y_new + (1 − s)(q_2 + s q_3))`` with
#: ``q_2 = Σ_k D[0, k] K_k``, ``q_3 = Σ_k D[1, k] K_k``: an interpolant of order 3 that reproduces both ends exactly.
D = np.array([[10.12623508344586, -7.487995877610167, -34.80091861555747, -7.992771707568823, 1.025137723295662, 0.0],
              [-0.6762803392801253, 6.087714651680015, 16.43084320892478, 24.76722511418386, -6.594389125716872, 0.0]])

#: Status codes returned by the compiled integrator.
STATUS = {0: "reached t_max", -1: "the state became non-finite or beyond the blow-up bound",
          -2: "the step size fell below round-off", -3: "too many steps"}


# ----------------------------------------------------------------------------------------------------------------
# numba templates (compiled inside each generated module, where rhs/jac/observe exist)
# ----------------------------------------------------------------------------------------------------------------
def _lu_factor(a, piv):  # noqa: ANN001, ANN202 - numba template
    """In-place LU with partial pivoting of the square matrix ``a``; False if it is singular."""
    n = a.shape[0]
    for k in range(n):
        p = k
        big = abs(a[k, k])
        for q in range(k + 1, n):
            if abs(a[q, k]) > big:
                big, p = abs(a[q, k]), q
        if not big > 0.0:
            return False
        piv[k] = p
        if p != k:
            for q in range(n):
                a[k, q], a[p, q] = a[p, q], a[k, q]
        inv = 1.0 / a[k, k]
        for q in range(k + 1, n):
            a[q, k] *= inv
            lqk = a[q, k]
            if lqk != 0.0:
                for s in range(k + 1, n):
                    a[q, s] -= lqk * a[k, s]
    return True


def _lu_solve(a, piv, b):  # noqa: ANN001, ANN202
    """Solve ``LU x = b`` in place in ``b`` (factors and pivots from ``_lu_factor``)."""
    n = a.shape[0]
    for k in range(n):
        p = piv[k]
        if p != k:
            b[k], b[p] = b[p], b[k]
    for k in range(n):
        acc = b[k]
        for q in range(k):
            acc -= a[k, q] * b[q]
        b[k] = acc
    for k in range(n - 1, -1, -1):
        acc = b[k]
        for q in range(k + 1, n):
            acc -= a[k, q] * b[q]
        b[k] = acc / a[k, k]


def _relative_loss(v, y):  # noqa: ANN001, ANN202
    """``Σ_β (v_β − f_β)² / Σ_β v_β²`` with ``f = y[:M]``: the scalar-loop twin, for numba, of
    :func:`featureode.results.metrics.relative_loss` (tested equal)."""
    num = 0.0
    den = 0.0
    for b in range(v.size):
        num += (v[b] - y[b]) ** 2
        den += v[b] ** 2
    return num / den


def _reducible(jacobian):  # noqa: ANN001, ANN202
    """Whether the Jacobian has the feature ODE's block form ``[[J_ff, J_fD], [−I, 0]]`` (``dD/dt = v − f``)."""
    n = jacobian.shape[0]
    if n % 2:
        return False
    m = n // 2
    for q in range(m):
        for s in range(n):
            want = -1.0 if s == q else 0.0
            if jacobian[m + q, s] != want:
                return False
    return True


def _factor(jacobian, a, reduced, lu, lu_red, piv):  # noqa: ANN001, ANN202
    """LU of ``G = a I − J``; ``reduced``: of its Schur complement ``a I − J_ff + J_fD/a`` (half the size), which
    is all a solve needs when ``J = [[J_ff, J_fD], [−I, 0]]``. False if singular."""
    n = jacobian.shape[0]
    if reduced:
        m = n // 2
        for q in range(m):
            for s in range(m):
                lu_red[q, s] = -jacobian[q, s] + jacobian[q, m + s] / a
            lu_red[q, q] += a
        return _lu_factor(lu_red, piv)
    for q in range(n):
        for s in range(n):
            lu[q, s] = -jacobian[q, s]
        lu[q, q] += a
    return _lu_factor(lu, piv)


def _solve(jacobian, a, reduced, lu, lu_red, piv, b, work):  # noqa: ANN001, ANN202
    """``b ← G⁻¹ b`` from the factors of :func:`_factor`. Reduced: ``x_f = S⁻¹ (b_f + J_fD b_D / a)``,
    ``x_D = (b_D − x_f)/a`` (the second block row of ``G x = b`` is ``x_f + a x_D = b_D``)."""
    if not reduced:
        _lu_solve(lu, piv, b)
        return
    m = b.size // 2
    for q in range(m):
        acc = 0.0
        for s in range(m):
            acc += jacobian[q, m + s] * b[m + s]
        work[q] = b[q] + acc / a
    _lu_solve(lu_red, piv, work)
    for q in range(m):
        b[m + q] = (b[m + q] - work[q]) / a
        b[q] = work[q]


def _rodas_step(y, p, jacobian, reduced, h, lu, lu_red, piv, work, ks, ynew, coef_a, coef_c, coef_m,  # noqa
                gamma):
    """One RODAS4 step of size ``h`` from ``y`` (Jacobian ``jacobian`` at ``y``; ``reduced``: it has the block
    form of :func:`_reducible`): fills ``ynew`` and the stages ``ks`` (``ks[5]`` is the error estimate). Returns the
    number of right-hand sides, or −1 if ``G`` is singular or a value is non-finite."""
    n = y.size
    a = 1.0 / (gamma * h)
    if not _factor(jacobian, a, reduced, lu, lu_red, piv):
        return -1
    ystage = np.empty(n)
    for k in range(6):
        for q in range(n):
            acc = y[q]
            for l in range(k):
                acc += coef_a[k, l] * ks[l, q]
            ystage[q] = acc
        fk = rhs(ystage, *p)  # noqa: F821 - the system's generated right-hand side
        for q in range(n):
            acc = fk[q]
            for l in range(k):
                acc += coef_c[k, l] / h * ks[l, q]
            ks[k, q] = acc
        _solve(jacobian, a, reduced, lu, lu_red, piv, ks[k], work)
    for q in range(n):
        acc = y[q]
        for k in range(6):
            acc += coef_m[k] * ks[k, q]
        ynew[q] = acc
        if not np.isfinite(acc) or not np.isfinite(ks[5, q]):
            return -1
    return 6


def rodas(y0, p, t_eval, rtol, atol, v, levels, bound, max_steps, coef_a, coef_c, coef_m,  # noqa: ANN001, ANN201
          gamma, coef_d):
    """Integrate ``y' = rhs(y, *p)`` from ``y0`` at ``t = 0`` through the output times ``t_eval`` (ascending,
    ``t_eval[0] = 0``). Returns ``(Y, R, S, LAM, n_out, status, t_reached, component, t_events, stats)``: states
    and observables (``observe(y, *p) = (r, s, λ)``) at the first ``n_out`` output times, the status code, the last
    time reached, the state component that failed (−1: none), the first time ``L/L(0)`` fell to each level (NaN:
    not reached) and ``(n_rhs, n_jac, n_steps, n_rejected)``."""
    n = y0.size
    n_eval = t_eval.size
    d = p[0].shape[1]
    m = v.size
    out_y = np.full((n_eval, n), np.nan)
    out_r = np.full((n_eval, d), np.nan)
    out_s = np.full(n_eval, np.nan)
    out_lam = np.full((n_eval, m), np.nan)
    t_events = np.full(levels.size, np.nan)
    y = y0.copy()
    ynew = np.empty(n)
    ytry = np.empty(n)
    ks = np.empty((6, n))
    ks_try = np.empty((6, n))
    lu = np.empty((n, n))
    lu_red = np.empty((n // 2, n // 2))
    work = np.empty(n // 2)
    piv = np.zeros(n, dtype=np.int64)
    yout = np.empty(n)
    n_rhs, n_jac, n_steps, n_rej = 0, 0, 0, 0
    r0, s0, lam0 = observe(y, *p)  # noqa: F821 - the system's generated observables
    out_y[0] = y
    out_r[0], out_s[0], out_lam[0] = r0, s0, lam0
    k_out = 1
    t = 0.0
    h = 1e-6 * max(t_eval[n_eval - 1], 1.0) if n_eval > 1 else 0.0
    status = 0
    component = -1
    rejected = False
    loss_old = _relative_loss(v, y)
    t_end = t_eval[n_eval - 1]
    while k_out < n_eval:
        if n_steps >= max_steps:
            status = -3
            break
        hit = t + 1.05 * h >= t_end
        if hit:
            h = t_end - t
        jacobian = jac(y, *p)  # noqa: F821 - the system's generated exact Jacobian
        reduced = _reducible(jacobian)
        n_jac += 1
        while True:
            used = _rodas_step(y, p, jacobian, reduced, h, lu, lu_red, piv, work, ks, ynew, coef_a, coef_c, coef_m,
                               gamma)
            n_steps += 1
            err = np.inf
            if used > 0:
                n_rhs += used
                acc = 0.0
                for q in range(n):
                    scale = atol + rtol * max(abs(y[q]), abs(ynew[q]))
                    acc += (ks[5, q] / scale) ** 2
                err = np.sqrt(acc / n)
            if err <= 1.0:
                break
            n_rej += 1
            if np.isfinite(err):
                h *= max(0.2, 0.9 * err ** -0.25)
            else:
                h *= 0.1
            hit = False
            rejected = True
            if t + h == t or h < 1e-300:
                status = -2
                break
        if status != 0:
            break
        big = 0.0
        for q in range(n):
            if not abs(ynew[q]) <= bound:
                big = np.inf
                component = q
                break
        if big > 0.0:
            status = -1
            break
        t_new = t_end if hit else t + h
        loss_new = _relative_loss(v, ynew)
        for e in range(levels.size):
            if np.isnan(t_events[e]) and loss_old > levels[e] >= loss_new:
                lo, hi = 0.0, t_new - t
                g_lo, g_hi = loss_old - levels[e], loss_new - levels[e]
                side = 0
                tau = hi
                for _ in range(100):
                    tau = hi - g_hi * (hi - lo) / (g_hi - g_lo)
                    if not lo < tau < hi:
                        tau = 0.5 * (lo + hi)
                    if _rodas_step(y, p, jacobian, reduced, tau, lu, lu_red, piv, work, ks_try, ytry, coef_a, coef_c,
                                   coef_m, gamma) < 0:
                        break
                    n_rhs += 6
                    g = _relative_loss(v, ytry) - levels[e]
                    if g > 0.0:
                        lo, g_lo = tau, g
                        if side == 1:
                            g_hi *= 0.5
                        side = 1
                    else:
                        hi, g_hi = tau, g
                        if side == -1:
                            g_lo *= 0.5
                        side = -1
                    if hi - lo <= 1e-14 * (t + hi) or g == 0.0:
                        break
                t_events[e] = t + tau
        fac = min(6.0, max(0.2, 0.9 * err ** -0.25)) if err > 0.0 else 6.0
        if rejected:
            fac = min(fac, 1.0)
        h_taken = h
        h = h_taken * fac
        rejected = False
        # the output times of this step: the dense output inside it, the new state at its end
        while k_out < n_eval and (hit or t_eval[k_out] < t_new):
            if hit and k_out == n_eval - 1:
                for q in range(n):
                    yout[q] = ynew[q]
            else:
                sc = (t_eval[k_out] - t) / h_taken
                for q in range(n):
                    q2 = 0.0
                    q3 = 0.0
                    for k in range(5):
                        q2 += coef_d[0, k] * ks[k, q]
                        q3 += coef_d[1, k] * ks[k, q]
                    yout[q] = (1.0 - sc) * y[q] + sc * (ynew[q] + (1.0 - sc) * (q2 + sc * q3))
            r, s, lam = observe(yout, *p)  # noqa: F821
            out_y[k_out] = yout
            out_r[k_out], out_s[k_out], out_lam[k_out] = r, s, lam
            k_out += 1
        t = t_new
        for q in range(n):
            y[q] = ynew[q]
        loss_old = loss_new
    return (out_y, out_r, out_s, out_lam, k_out, status, t, component, t_events,
            np.array([n_rhs, n_jac, n_steps, n_rej]))


_TEMPLATES = (_lu_factor, _lu_solve, _relative_loss, _reducible, _factor, _solve, _rodas_step, rodas)


#: The templates numba inlines into their callers (``inline='always'``): a call between compiled functions costs
#: 25–40 ns (its array arguments passed and released), as much as a 2×2 solve, and a RODAS4 step makes about 20 of
#: them; inlined, the same instructions run in the same order (bitwise the same states). ``_rodas_step`` and
#: ``rodas`` stay calls: inlining the step into ``rodas`` made it slower and doubled the compile time.
_INLINED = (_lu_factor, _lu_solve, _relative_loss, _reducible, _factor, _solve)


def template_source() -> list[str]:
    """Source lines of the numba templates, each decorated with ``numba.njit(cache=True)`` (the helpers of
    :data:`_INLINED` with ``inline='always'``), for a generated module that defines ``rhs``, ``jac`` and
    ``observe``."""
    lines: list[str] = ["import numpy as np", "", ""]
    for fn in _TEMPLATES:
        inline = ", inline='always'" if fn in _INLINED else ""
        lines += [f"@numba.njit(cache=True, error_model='numpy'{inline})",
                  *inspect.getsource(fn).rstrip().splitlines(), "", ""]
    return lines


# ----------------------------------------------------------------------------------------------------------------
# the same integrator in NumPy (no compilation: for a solve whose numba code is not in the cache yet)
# ----------------------------------------------------------------------------------------------------------------
class _NumpyRodas:
    """:func:`rodas` written with NumPy vector operations and LAPACK's LU (SciPy), step for step the same method:
    the same stages, error norm, step-size control, dense output, events and failure checks, so its curves
    equal the compiled ones to round-off (summation order). It runs Python per step (≈ 0.1–1 ms a step), so it
    serves a few solves of a system whose numba code would first have to be compiled (seconds)."""

    def __init__(self, rhs: Callable, jac: Callable, observe: Callable) -> None:
        self.rhs, self.jac, self.observe = rhs, jac, observe

    @staticmethod
    def _factor(jacobian: np.ndarray, a: float, reduced: bool) -> Any:
        """LAPACK ``getrf`` of ``G = a I − J`` (reduced: of its Schur complement, as :func:`_factor`); ``None``
        if it is singular or non-finite."""
        n = jacobian.shape[0]
        if reduced:
            m = n // 2
            g = -jacobian[:m, :m] + jacobian[:m, m:] / a
        else:
            g = -jacobian
        g[np.diag_indices_from(g)] += a
        if not np.all(np.isfinite(g)):
            return None
        lu, piv, info = _lapack()[0](g, overwrite_a=True)
        return None if info != 0 else (lu, piv)

    @staticmethod
    def _solve(jacobian: np.ndarray, a: float, reduced: bool, lu: Any, b: np.ndarray) -> np.ndarray:
        """``G⁻¹ b`` from :meth:`_factor` (reduced: as :func:`_solve`)."""
        getrs = _lapack()[1]
        if not reduced:
            return getrs(lu[0], lu[1], b)[0]
        m = b.size // 2
        xf = getrs(lu[0], lu[1], b[:m] + (jacobian[:m, m:] @ b[m:]) / a)[0]
        return np.concatenate((xf, (b[m:] - xf) / a))

    def step(self, y: np.ndarray, p: tuple, jacobian: np.ndarray, reduced: bool, h: float
             ) -> tuple[int, np.ndarray | None, np.ndarray | None]:
        """One RODAS4 step (as :func:`_rodas_step`): ``(n_rhs, y_new, stages)``, ``(−1, None, None)`` when ``G`` is
        singular or a value is non-finite."""
        a = 1.0 / (GAMMA * h)
        lu = self._factor(jacobian, a, reduced)
        if lu is None:
            return -1, None, None
        ks = np.empty((6, y.size))
        with np.errstate(all="ignore"):
            for k in range(6):
                ystage = y + A[k, :k] @ ks[:k] if k else y.copy()
                fk = np.asarray(self.rhs(ystage, *p), dtype=float)
                if k:
                    fk = fk + (C[k, :k] / h) @ ks[:k]
                ks[k] = self._solve(jacobian, a, reduced, lu, fk)
            ynew = y + M @ ks
        if not (np.all(np.isfinite(ynew)) and np.all(np.isfinite(ks[5]))):
            return -1, None, None
        return 6, ynew, ks

    def __call__(self, y0, p, t_eval, rtol, atol, v, levels, bound, max_steps, coef_a=None, coef_c=None,  # noqa
                 coef_m=None, gamma=None, coef_d=None):
        """Same arguments and result as :func:`rodas` (the coefficients are this module's)."""
        n, n_eval, d, m = y0.size, t_eval.size, p[0].shape[1], v.size
        out_y, out_r = np.full((n_eval, n), np.nan), np.full((n_eval, d), np.nan)
        out_s, out_lam = np.full(n_eval, np.nan), np.full((n_eval, m), np.nan)
        t_events = np.full(levels.size, np.nan)
        vv = float(np.sum(v**2))

        def loss(y: np.ndarray) -> float:
            return float(np.sum((v - y[:m]) ** 2)) / vv

        y = y0.copy()
        n_rhs = n_jac = n_steps = n_rej = 0
        r0, s0, lam0 = self.observe(y, *p)
        out_y[0], out_r[0], out_s[0], out_lam[0] = y, r0, s0, lam0
        k_out, t = 1, 0.0
        h = 1e-6 * max(t_eval[n_eval - 1], 1.0) if n_eval > 1 else 0.0
        status, component, rejected = 0, -1, False
        loss_old = loss(y)
        t_end = t_eval[n_eval - 1]
        while k_out < n_eval:
            if n_steps >= max_steps:
                status = -3
                break
            hit = t + 1.05 * h >= t_end
            if hit:
                h = t_end - t
            with np.errstate(all="ignore"):
                jacobian = np.asarray(self.jac(y, *p), dtype=float)
            mm = n // 2
            reduced = n % 2 == 0 and np.array_equal(jacobian[mm:], np.hstack((-np.eye(mm), np.zeros((mm, mm)))))
            n_jac += 1
            while True:
                used, ynew, ks = self.step(y, p, jacobian, reduced, h)
                n_steps += 1
                err = np.inf
                if used > 0:
                    n_rhs += used
                    scale = atol + rtol * np.maximum(np.abs(y), np.abs(ynew))
                    err = float(np.sqrt(np.sum((ks[5] / scale) ** 2) / n))
                if err <= 1.0:
                    break
                n_rej += 1
                h *= max(0.2, 0.9 * err ** -0.25) if np.isfinite(err) else 0.1
                hit, rejected = False, True
                if t + h == t or h < 1e-300:
                    status = -2
                    break
            if status != 0:
                break
            over = ~(np.abs(ynew) <= bound)
            if over.any():
                status, component = -1, int(np.argmax(over))
                break
            t_new = t_end if hit else t + h
            loss_new = loss(ynew)
            for e in range(levels.size):
                if np.isnan(t_events[e]) and loss_old > levels[e] >= loss_new:
                    lo, hi = 0.0, t_new - t
                    g_lo, g_hi = loss_old - levels[e], loss_new - levels[e]
                    side, tau = 0, hi
                    for _ in range(100):
                        tau = hi - g_hi * (hi - lo) / (g_hi - g_lo)
                        if not lo < tau < hi:
                            tau = 0.5 * (lo + hi)
                        used, ytry, _ = self.step(y, p, jacobian, reduced, tau)
                        if used < 0:
                            break
                        n_rhs += 6
                        g = loss(ytry) - levels[e]
                        if g > 0.0:
                            lo, g_lo = tau, g
                            if side == 1:
                                g_hi *= 0.5
                            side = 1
                        else:
                            hi, g_hi = tau, g
                            if side == -1:
                                g_lo *= 0.5
                            side = -1
                        if hi - lo <= 1e-14 * (t + hi) or g == 0.0:
                            break
                    t_events[e] = t + tau
            fac = min(6.0, max(0.2, 0.9 * err ** -0.25)) if err > 0.0 else 6.0
            if rejected:
                fac = min(fac, 1.0)
            h_taken = h
            h = h_taken * fac
            rejected = False
            q2, q3 = D[:, :5] @ ks[:5]
            while k_out < n_eval and (hit or t_eval[k_out] < t_new):
                if hit and k_out == n_eval - 1:
                    yout = ynew
                else:
                    sc = (t_eval[k_out] - t) / h_taken
                    yout = (1.0 - sc) * y + sc * (ynew + (1.0 - sc) * (q2 + sc * q3))
                r, s, lam = self.observe(yout, *p)
                out_y[k_out], out_r[k_out], out_s[k_out], out_lam[k_out] = yout, r, s, lam
                k_out += 1
            t = t_new
            y = ynew
            loss_old = loss_new
        return (out_y, out_r, out_s, out_lam, k_out, status, t, component, t_events,
                np.array([n_rhs, n_jac, n_steps, n_rej]))


_LAPACK: list = []


def _lapack() -> tuple[Callable, Callable]:
    """LAPACK's ``dgetrf``/``dgetrs`` (SciPy), looked up once (``scipy.linalg.lu_*`` check their inputs each call)."""
    if not _LAPACK:
        from scipy.linalg.lapack import dgetrf, dgetrs

        _LAPACK.extend((dgetrf, dgetrs))
    return _LAPACK[0], _LAPACK[1]


def numpy_rodas(rhs: Callable, jac: Callable, observe: Callable) -> Callable:
    """:func:`rodas` for a system's NumPy ``rhs``/``jac``/``observe`` (:class:`_NumpyRodas`), callable like the
    compiled one (so :func:`run` takes either)."""
    return _NumpyRodas(rhs, jac, observe)


# ----------------------------------------------------------------------------------------------------------------
# Python entry point
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class IntegratorResult:
    """What :func:`run` returns: the states ``y`` and observables at the output times reached (``t``), the status
    (0 = reached the end; see :data:`STATUS`), the last time reached, the failing state component (``None``), the
    event times per level (``None``: not reached) and the work counters."""

    t: np.ndarray
    y: np.ndarray
    r: np.ndarray
    s: np.ndarray
    lam: np.ndarray
    status: int
    t_reached: float
    component: int | None
    t_events: tuple[float | None, ...]
    n_rhs: int
    n_jac: int
    n_steps: int
    n_rejected: int

    @property
    def message(self) -> str:
        """The status in words."""
        return STATUS[self.status]


def run(compiled_rodas: Callable, inputs: Sequence[Any], t_eval: np.ndarray, v: np.ndarray, *, rtol: float,
        atol: float, levels: Sequence[float], bound: float, max_steps: int = 200_000) -> IntegratorResult:
    """Integrate from ``y = 0`` with a module's compiled :func:`rodas` (``inputs``: the system's inputs in order)."""
    p = tuple(np.ascontiguousarray(x, dtype=float) if isinstance(x, np.ndarray) else float(x) for x in inputs)
    y0 = np.zeros(2 * np.asarray(v).size)
    out = compiled_rodas(y0, p, np.ascontiguousarray(t_eval, dtype=float), float(rtol), float(atol),
                         np.ascontiguousarray(v, dtype=float), np.asarray(levels, dtype=float), float(bound),
                         int(max_steps), A, C, M, GAMMA, D)
    y, r, s, lam, n_out, status, t_reached, component, t_events, stats = out
    return IntegratorResult(t_eval[:n_out], y[:n_out], r[:n_out], s[:n_out], lam[:n_out], int(status),
                            float(t_reached), None if component < 0 else int(component),
                            tuple(None if np.isnan(x) else float(x) for x in t_events), *map(int, stats))
