"""``replay``: the kernel flow of theory §4 driven by the *measured* eigenvalues of a simulation (theory §6).

It tests the kernel-flow backbone apart from any closure: if the replay agrees with the network where a closure
does not, the closure's predicted ``λ_β(t)`` is what is wrong; if the replay disagrees too, the backbone (a diagonal
flow on the mode set, or the mode set itself) is. A replay uses measurements, so it is never parameter-free.

* Target basis (``lam``: ``λ_β(t)`` of the network at its measurement times ``t_k``): the exact solution
  ``f_β(t) = v_β (1 − exp(−Λ_β(t)))``, ``Λ_β(t) = ∫_0^t λ_β``, with ``λ_β`` interpolated linearly in ``t`` on
  ``[0, t_1]`` and linearly in ``log t`` between later measurement times (integrated exactly), constant after the last.
* Extended basis (``gram``: the measured eNTK Gram ``K_{αβ}(t_k)`` on the measured modes, ``n_t × M × M``):
  ``df/dt = K(t)(v − f)``, ``f(0) = 0``, integrated with ``scipy.integrate.solve_ivp`` (entries of ``K``
  interpolated as above).

* Spread-aware forms (target basis, ``spread=``): the measured ``λ_β(t)`` is only the *mean* of the mode's
  spectral measure under the kernel; with its second moment ``‖Kφ_β‖²(t)`` (``lambda_second_moment`` of a simulation
  run with ``spread=True``, or ``relative_variance`` ``s_β``: variance ``s_β λ_β(t)²``) and the top of the spectrum
  ``L(t)`` (the measured ``lambda_top``) the residual ``R_β = 1 − f_β/v_β`` of a measure that keeps its shape while
  it grows (``K(t) = c(t) K_0``, exact then) is a function of the integrated mean ``Λ = ∫λ_β``, the integrated
  standard deviation ``Σ = ∫ sqrt(max(‖Kφ_β‖² − λ_β², 0))`` and ``Λ_L = ∫L``:

  - ``"twopoint"``: atoms at ``Λ_L`` (weight ``w = Σ²/((Λ_L − Λ)² + Σ²)``) and ``ℓ = Λ − Σ²/(Λ_L − Λ)``:
    ``R = w e^{−Λ_L} + (1 − w) e^{−ℓ}``, the *smallest* residual of any measure on ``[0, Λ_L]`` with this mean and
    variance (Chebyshev–Markov–Krein; ``ℓ`` clipped at 0, i.e. ``w = Λ/Λ_L``, when the variance exceeds what
    ``[0, Λ_L]`` allows);
  - ``"bound"``: atoms at 0 and ``(Λ² + Σ²)/Λ``: ``R = 1 − p + p e^{−(Λ² + Σ²)/Λ}``, ``p = Λ²/(Λ² + Σ²)``, the
    *largest* residual with this mean and variance;
  - ``"gamma"``: the gamma law of that mean and variance, ``R = (1 + Σ²/Λ)^{−Λ²/Σ²}``.

  Every form has ``R ≥ e^{−Λ}`` (Jensen) and equals it at ``Σ = 0``. ``loss`` is the projections' loss
  ``Σ v_β² R_β²/Σ v_β²``; the array ``loss_full`` is the error of the whole function, ``Σ v_β² ∫e^{−2λ}dν_β /
  Σ v_β²`` (the form at doubled arguments; cross terms between target modes left out), which the network's test loss
  measures (it also counts what leaked onto other directions).

The result is a :class:`~featureode.results.trajectory.Trajectory` of kind ``"ode"`` named ``"replay"``, with ``loss`` the
in-support ``L/L(0) = Σ_β (v_β − f_β)² / Σ_β v_β²``, ``lam`` the eigenvalues it used and ``meta`` marking it
(``uses_measurements: true``, ``parameter_free: false``, ``basis``, ``source``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy.integrate import solve_ivp

from featureode.core.basis import check_basis
from featureode.core.errors import FeatureODEError
from featureode.results.metrics import crossing_time
from featureode.results.trajectory import Trajectory, TrajectoryFileError


class ReplayError(FeatureODEError, ValueError):
    """A replay without the measurements it needs; the message names the missing run, file or key and the fix."""


def _segments(t: np.ndarray, x: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``x`` (rows over ``t``) interpolated at ``times``: linear in ``t`` before ``t[1]`` when ``t[0] = 0``, linear in
    ``log t`` between positive times, constant outside ``[t[0], t[-1]]``."""
    t = np.asarray(t, float)
    x = np.asarray(x, float)
    flat = x.reshape(t.size, -1)
    out = np.empty((times.size, flat.shape[1]))
    for n, tau in enumerate(times):
        if tau <= t[0]:
            out[n] = flat[0]
        elif tau >= t[-1]:
            out[n] = flat[-1]
        else:
            k = int(np.searchsorted(t, tau, side="right")) - 1
            t0, t1 = t[k], t[k + 1]
            w = (tau - t0) / (t1 - t0) if t0 <= 0 else np.log(tau / t0) / np.log(t1 / t0)
            out[n] = (1 - w) * flat[k] + w * flat[k + 1]
    return out.reshape((times.size,) + x.shape[1:])


def integrated_eigenvalue(t_meas: ArrayLike, lam_meas: ArrayLike, at: ArrayLike) -> np.ndarray:
    """``Λ(τ) = ∫_0^τ λ`` at the times ``at`` for ``λ`` (``n_t × M``) measured at ``t_meas`` (increasing,
    ``t[0] ≥ 0``) and interpolated as in the module docstring; exact for that interpolant."""
    t = np.asarray(t_meas, float)
    lam = np.asarray(lam_meas, float).reshape(t.size, -1)
    times = np.asarray(at, float)
    # cumulative integral at the measurement times, segment by segment
    cum = np.zeros_like(lam)
    cum[0] = lam[0] * t[0]                      # constant before the first measurement
    for k in range(t.size - 1):
        cum[k + 1] = cum[k] + _segment_integral(t[k], t[k + 1], lam[k], lam[k + 1], t[k + 1])
    out = np.empty((times.size, lam.shape[1]))
    for n, tau in enumerate(times):
        if tau <= t[0]:
            out[n] = lam[0] * tau
        elif tau >= t[-1]:
            out[n] = cum[-1] + lam[-1] * (tau - t[-1])
        else:
            k = int(np.searchsorted(t, tau, side="right")) - 1
            out[n] = cum[k] + _segment_integral(t[k], t[k + 1], lam[k], lam[k + 1], tau)
    return out


def _segment_integral(t0: float, t1: float, l0: np.ndarray, l1: np.ndarray, tau: float) -> np.ndarray:
    """``∫_{t0}^{tau} λ`` with ``λ`` linear from ``l0`` to ``l1`` in ``t`` (``t0 = 0``) or in ``log t`` (``t0 > 0``)."""
    if t0 <= 0:
        w = (tau - t0) / (t1 - t0)
        return (tau - t0) * (l0 + 0.5 * w * (l1 - l0))
    span = np.log(t1 / t0)
    # ∫_{t0}^{tau} log(t/t0) dt = tau log(tau/t0) − (tau − t0)
    return l0 * (tau - t0) + (l1 - l0) * (tau * np.log(tau / t0) - (tau - t0)) / span


def _times(t: np.ndarray, n_points: int) -> np.ndarray:
    t = np.asarray(t, float)
    lo = t[t > 0].min() if np.any(t > 0) else 1e-2
    return np.unique(np.concatenate([t, np.geomspace(lo, t[-1], n_points)]))


SPREAD_FORMS = ("twopoint", "gamma", "bound")


def spread_residual(form: str, Lam: np.ndarray, Sig: np.ndarray, LamL: np.ndarray | None = None) -> np.ndarray:
    """The residual ``R = ∫ e^{−λ} dν`` of the spread form ``form`` (module docstring) with integrated mean ``Lam``,
    integrated standard deviation ``Sig`` and (``"twopoint"``) integrated top eigenvalue ``LamL``, elementwise."""
    Lam, Sig = np.asarray(Lam, float), np.asarray(Sig, float)
    var = Sig**2
    with np.errstate(all="ignore"):
        if form == "gamma":
            out = np.exp(-np.where(var > 0, Lam**2 / var * np.log1p(var / np.where(Lam > 0, Lam, 1.0)), Lam))
        elif form == "bound":
            m2 = Lam**2 + var
            p = np.where(m2 > 0, Lam**2 / np.where(m2 > 0, m2, 1.0), 1.0)
            out = 1 - p + p * np.exp(-np.where(Lam > 0, m2 / np.where(Lam > 0, Lam, 1.0), 0.0))
        elif form == "twopoint":
            if LamL is None:
                raise ReplayError("replay: the 'twopoint' spread form needs the top eigenvalue (lambda_top)")
            LamL = np.maximum(np.asarray(LamL, float), Lam)
            gap = LamL - Lam
            low = np.where(gap > 0, Lam - var / np.where(gap > 0, gap, 1.0), Lam)
            w = np.where(gap > 0, var / (gap**2 + var + (var == 0)), 0.0)
            clip = low < 0               # variance beyond what [0, Λ_L] allows: the atom at 0, mean kept
            w = np.where(clip, Lam / np.where(LamL > 0, LamL, 1.0), w)
            low = np.where(clip, 0.0, low)
            out = w * np.exp(-LamL) + (1 - w) * np.exp(-low)
        else:
            raise ReplayError(f"replay: spread must be one of {', '.join(SPREAD_FORMS)} (or None), got {form!r}")
    return np.where(np.isfinite(out), out, np.exp(-Lam))


def replay(mlp: Trajectory, *, basis: str = "target", n_points: int = 200, rtol: float = 1e-8,
           atol: float = 1e-10, name: str = "replay", source: str = "", spread: str | None = None,
           relative_variance: "Sequence[float] | np.ndarray | None" = None) -> Trajectory:
    """The kernel flow driven by the measurements of ``mlp`` (a simulation's :class:`Trajectory`): its ``lam``
    (target basis) or its ``gram`` array (extended basis), on ``mlp.modes`` with target ``mlp.target``; output
    at the measurement times plus ``n_points`` log-spaced times. ``spread`` (target basis): one of
    :data:`SPREAD_FORMS`, with the measured ``lambda_second_moment`` or, when given, ``relative_variance`` ``s_β``
    (variance ``s_β λ_β(t)²``, e.g. the init prediction of :mod:`featureode.kernel.spread`). Raises
    :class:`ReplayError` naming what is missing."""
    where = f" of {source}" if source else ""
    check_basis(basis, ReplayError, "replay: basis")
    if spread is not None and basis != "target":
        raise ReplayError("replay: the spread forms are for the target basis (the extended basis already carries "
                          "the spread within the basis through the measured Gram)")
    if spread is not None and spread not in SPREAD_FORMS:
        raise ReplayError(f"replay: spread must be one of {', '.join(SPREAD_FORMS)} (or None), got {spread!r}")
    if mlp.kind != "mlp":
        raise ReplayError(f"replay needs a simulation (kind 'mlp'), got a trajectory of kind {mlp.kind!r}{where}")
    v = np.asarray(mlp.target, float)
    t = np.asarray(mlp.t, float)
    if t.size < 2 or v.size == 0 or not np.any(v):
        raise ReplayError(f"replay needs measurement times and a nonzero target on the measured modes{where}; "
                          f"got {t.size} times and target {v.tolist()}")
    times = _times(t, n_points)
    if basis == "target":
        lam = mlp.lam
        if lam is None:
            raise ReplayError(f"replay (target basis) needs the measured eigenvalues 'lambda' in mlp.json{where}; "
                              "rerun `featureode simulate CONFIG --out DIR`")
        lam = np.asarray(lam, float)
        if not np.all(np.isfinite(lam)):
            raise ReplayError(f"replay: the measured 'lambda'{where} holds non-finite values")
        Lam = integrated_eigenvalue(t, lam, times)
        if spread is None:
            f = v * (1 - np.exp(-Lam))
        else:
            if relative_variance is not None:
                rv = np.asarray(relative_variance, float)
                if rv.shape != (lam.shape[1],) or not np.all(np.isfinite(rv)) or np.any(rv < 0):
                    raise ReplayError(f"replay: relative_variance must hold {lam.shape[1]} finite values ≥ 0, got "
                                      f"{rv.tolist()}")
                sd = np.sqrt(rv)[None, :] * np.abs(lam)
            else:
                second = mlp.get("lambda_second_moment")
                if second is None:
                    raise ReplayError(f"replay (spread {spread!r}) needs the measured 'lambda_second_moment'{where};"
                                      " simulate with spread=True (featureode.sim.mlp.simulate_config), or give "
                                      "relative_variance")
                second = np.asarray(second, float)
                if second.shape != lam.shape:
                    raise ReplayError(f"replay: 'lambda_second_moment'{where} has shape {second.shape}, expected "
                                      f"{lam.shape}")
                sd = np.sqrt(np.maximum(np.nan_to_num(second - lam**2, nan=0.0), 0.0))
            Sig = integrated_eigenvalue(t, sd, times)
            LamL = None
            if spread == "twopoint":
                top = mlp.get("lambda_top")
                if top is None:
                    raise ReplayError(f"replay (spread 'twopoint') needs the measured 'lambda_top'{where}")
                top = np.repeat(np.asarray(top, float).reshape(-1, 1), lam.shape[1], axis=1)
                LamL = integrated_eigenvalue(t, top, times)
            f = v * (1 - spread_residual(spread, Lam, Sig, LamL))
            # the whole function's error ‖e^{−∫K} φ_β‖² = ∫ e^{−2λ} dν: the same form at doubled arguments
            full = spread_residual(spread, 2 * Lam, 2 * Sig, None if LamL is None else 2 * LamL)
            loss_full = np.sum(v**2 * full, axis=1) / np.sum(v**2)
        lam_out = _segments(t, lam, times)
    else:
        gram = mlp.get("gram")
        if gram is None:
            raise ReplayError(f"replay (extended basis) needs the measured Gram 'gram' in mlp.json{where}; "
                              "rerun the simulation with a simulator that records it")
        gram = np.asarray(gram, float)
        m = v.size
        if gram.shape != (t.size, m, m) or not np.all(np.isfinite(gram)):
            raise ReplayError(f"replay: 'gram'{where} must be finite with shape {(t.size, m, m)}, got "
                              f"{gram.shape}")

        def rhs(tau: float, y: np.ndarray) -> np.ndarray:
            return _segments(t, gram, np.array([tau]))[0] @ (v - y)

        sol = solve_ivp(rhs, (0.0, float(times[-1])), np.zeros(m), t_eval=times, rtol=rtol, atol=atol,
                        method="LSODA")
        if sol.status < 0:
            raise ReplayError(f"replay: the integration failed{where}: {sol.message}")
        f = sol.y.T
        lam_out = np.einsum("tmm->tm", _segments(t, gram, times))
    loss = np.sum((v - f) ** 2, axis=1) / np.sum(v**2)
    arrays = {}
    if basis == "target" and spread is not None:
        arrays["loss_full"] = loss_full
    meta = {"uses_measurements": True, "parameter_free": False, "basis": basis, "source": source,
            "spread": spread, "spread_source": None if spread is None else (
                "relative_variance" if relative_variance is not None else "lambda_second_moment")}
    return Trajectory("ode", name, tuple(mlp.modes), v, times, loss, f=f, lam=lam_out, in_support_loss=loss,
                      t50=crossing_time(times, loss, 0.5), t10=crossing_time(times, loss, 0.1), meta=meta,
                      arrays=arrays)


def replay_run(folder: "str | Path", basis: str = "target", **kwargs: Any) -> Trajectory:
    """:func:`replay` of the simulation stored in ``folder`` (``folder/mlp.json`` and ``mlp.npz``)."""
    folder = Path(folder)
    path = folder / "mlp.json"
    if not path.is_file():
        raise ReplayError(f"replay needs the simulation of this run, but {path} does not exist; run "
                          f"`featureode simulate CONFIG --out {folder}` (or compare) first")
    try:
        mlp = Trajectory.load(folder, "mlp", kind="mlp")
    except TrajectoryFileError as exc:
        raise ReplayError(f"replay: {exc}") from None
    return replay(mlp, basis=basis, source=str(path), **kwargs)
