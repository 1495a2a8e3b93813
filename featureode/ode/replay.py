"""``replay``: the kernel flow of DESIGN §4 driven by the *measured* eigenvalues of a simulation (DESIGN §6).

It tests the kernel-flow backbone apart from any closure: if the replay agrees with the network where a closure
does not, the closure's predicted ``λ_β(t)`` is what is wrong; if the replay disagrees too, the backbone (a diagonal
flow on the mode set, or the mode set itself) is. A replay uses measurements, so it is never parameter-free.

* Target basis (``lam``: ``λ_β(t)`` of the network at its measurement times ``t_k``): the exact solution
  ``f_β(t) = v_β (1 − exp(−Λ_β(t)))``, ``Λ_β(t) = ∫_0^t λ_β``, with ``λ_β`` interpolated linearly in ``t`` on
  ``[0, t_1]`` and linearly in ``log t`` between later measurement times (integrated exactly), constant after the last.
* Extended basis (``gram``: the measured eNTK Gram ``K_{αβ}(t_k)`` on the measured modes, ``n_t × M × M``):
  ``df/dt = K(t)(v − f)``, ``f(0) = 0``, integrated with ``scipy.integrate.solve_ivp`` (entries of ``K``
  interpolated as above).

The result is a :class:`~featureode.results.trajectory.Trajectory` of kind ``"ode"`` named ``"replay"``, with ``loss`` the
in-support ``L/L(0) = Σ_β (v_β − f_β)² / Σ_β v_β²``, ``lam`` the eigenvalues it used and ``meta`` marking it
(``uses_measurements: true``, ``parameter_free: false``, ``basis``, ``source``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
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


def integrated_eigenvalue(t: Sequence[float], lam: np.ndarray, times: Sequence[float]) -> np.ndarray:
    """``Λ(τ) = ∫_0^τ λ`` at ``times`` for ``λ`` (``n_t × M``) measured at ``t`` (increasing, ``t[0] ≥ 0``) and
    interpolated as in the module docstring; exact for that interpolant."""
    t = np.asarray(t, float)
    lam = np.asarray(lam, float).reshape(t.size, -1)
    times = np.asarray(times, float)
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


def replay(mlp: Trajectory, *, basis: str = "target", n_points: int = 200, rtol: float = 1e-8,
           atol: float = 1e-10, name: str = "replay", source: str = "") -> Trajectory:
    """The kernel flow driven by the measurements of ``mlp`` (a simulation's :class:`Trajectory`): its ``lam``
    (target basis) or its ``gram`` array (extended basis), on ``mlp.modes`` with target ``mlp.target``; output
    at the measurement times plus ``n_points`` log-spaced times. Raises :class:`ReplayError` naming what is missing."""
    where = f" of {source}" if source else ""
    check_basis(basis, ReplayError, "replay: basis")
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
        f = v * (1 - np.exp(-integrated_eigenvalue(t, lam, times)))
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
    meta = {"uses_measurements": True, "parameter_free": False, "basis": basis, "source": source}
    return Trajectory("ode", name, tuple(mlp.modes), v, times, loss, f=f, lam=lam_out, in_support_loss=loss,
                      t50=crossing_time(times, loss, 0.5), t10=crossing_time(times, loss, 0.1), meta=meta)


def replay_run(folder: "str | Path", basis: str = "target", **kwargs: object) -> Trajectory:
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
