"""``meanfield``: the network's infinite-width gradient flow, followed on a few coordinates per neuron (theory §6).

Not a closure: no law for ``λ_β(t)``. The init neurons ``θ = (a, ŵ, b)`` of the meanfield network move along

    dθ/dt = γ P ∇_θ (a Σ_{α∈S} R_α A_α(ŵ, b)),    A_α = ŵ^α m_{|α|}(b, |ŵ|)/sqrt(α!),    R = v − f,
    f_α(t) = (E[a A_α(θ(t))] − E[a A_α(θ(0))])/γ,

``P = diag(η_a, η_w g, η_b)`` (the parametrization's group rates), with ``S`` the modes of the theory's basis whose
support lies in the target's directions ``T`` (the target and its companions, e.g. ``h3(z0)*z1`` for ``z0*z1``).
``docs/validation/target_driven.md`` measured that these drivers give the loss of the flow with every mode driving
within 0.01. Then a coordinate ``i ∉ T`` of ``ŵ`` moves as ``ŵ_i(t) = ŵ_i(0) e^{η_w g_i C(t)}``, with one scalar per
neuron, ``dC/dt = γ a Σ_{α∈S} R_α ŵ^α m_{|α|+2}/sqrt(α!)``. A neuron is therefore ``(a, ŵ_T, b, C)``: ``|T| + 3``
numbers for any ``d``. The coordinates outside ``T`` enter only through ``Σ_{i∉T} g_i^p ŵ_i(0)² e^{2 η_w g_i C}``
(``p = 0`` in ``|ŵ|``, ``p = 1`` in the kernel). Both are taken as ``ξ Σ_{i∉T} g_i^{p+1} e^{2 η_w g_i C}``, with
one random scalar ``ξ`` per neuron: ``Q(0)/E Q(0)``, a weighted sum of ``χ²_1``, given the Gamma law of its mean
(1) and variance ``2 Σ g_i²/(Σ g_i)²``. That law is exact when the ``g_i`` outside ``T`` are equal. This is the
one approximation beyond the drivers.

The init law (``a ~ N(0, E[a²])``, ``ŵ_T ~ N(0, g_T)``, ``b ~ N(0, σ_b²)``, ``ξ``) is integrated by a scrambled
Sobol' rule of ``2^m`` points with a fixed seed, so the result is deterministic. ``K(0)`` agrees with the exact
quadrature of :func:`featureode.kernel.theory.kernel_theory` to the rule's error (``theory_tests/test_meanfield.py``).
Time steps are RK4 with ``h = min(h_max, c/λ_max(K), max(t_min, t/4))``, ``h_max = 5``, ``c = 1.5`` (RK4 is
stable up to ``h λ = 2.78``; ``λ_max`` is recomputed every 10 steps). Against ``c = 0.5``, ``h_max = 2`` the crossing
times move by < 0.1% on the wide suite's ``h3(z0)``, rich ``staircase(3)`` and tanh ``z0*z1``, at a third of the
steps. The means ``m_k`` come from the activation's closed form, or, without one, from its quadrature rule
tabulated on ``(b, |ŵ|)`` and splined (:class:`MeanTable`). A neuron that leaves the table stops the run there,
with its curve so far and the reason; nothing is extrapolated.

``ReducedFlow(init=(a, ŵ, b))`` follows given neurons instead, for example a network's own
(``featureode.sim.batch.init_draw``), each with its own coordinates outside ``T``. The reduction is then exact,
with no ξ law (``docs/validation/init_draw.md``).

The modes of the basis outside ``S`` do not drive; their ``f`` is what the neurons project on them. It is 0 where a
coordinate outside ``T`` has an odd power (the flow is even in each such coordinate), and otherwise each even power
is given its Gaussian moment at the neuron's scale ``ξ``: ``ŵ_i^n → (n − 1)!! (ξ g_i)^{n/2} e^{n η_w g_i C}``
(``z0*z1*h2(z5)`` for ``z0*z1``). The loss is ``Σ_α (v_α − f_α)²/Σ v²`` over the whole basis, as for the closures.

**The tail** (``tail=True``, the variant ``meanfield+tail``). The network's test loss is over every mode; the loss
above is over the basis. The flow knows more than the basis: averaged over the coordinates outside T, its output
is ``P_T f(z_T) = (F(t) − F(0))/γ`` with ``F(z_T) = E[a m_0(ŵ_T·z_T + b, s_⊥)]`` and ``s_⊥² = Σ_{i∉T} ŵ_i²`` (the
Gaussian part outside T smooths each neuron's ridge), and by Parseval ``‖P_T f − y‖²`` is the loss on *every* mode
in T. Its excess over the basis' modes in T is the tail (:meth:`ReducedFlow.tail_loss`), integrated by product
Gauss–Hermite rules on ``z_T`` and certified by two neighbouring rules (:data:`TAIL_POINTS`, :data:`TAIL_TOL`); a
neuron that grows inside T and shrinks outside it has a sharp ridge. For |T| ≥ 3 the ladder goes on with
scrambled Sobol' rules (:data:`TAIL_SOBOL`), whose integrals take the target's part exactly (Stein's form): QMC
resolves sharp ridges where a product rule of any affordable size does not, but does not integrate polynomials
exactly. A tail that the finest pair cannot resolve stops the run there (:class:`TailError`, the curve so far
kept). It is evaluated where t has grown by :data:`TAIL_EVERY` and interpolated between. Modes with coordinates
outside T beyond the basis' are not in it.

**The exact tail** (relu and erf: from where the rules first fail to certify the tail; ``exact_tail=True`` from the
start, ``False`` never). ``P_T f`` is a sum of 2n ridges ``±a m_0(ŵ_T·z_T + b, s_⊥)/(nγ)`` (the neurons now and at
init), and ``m_0(u, s_⊥) = E_ε[σ(u + s_⊥ ε)]``, so ``‖P_T f‖²`` is a sum of Gaussian pair moments ``E[σ(X_j) σ(X_k)]`` with variances ``|ŵ_T|² + s_⊥²`` and
covariances ``ŵ_T,j·ŵ_T,k`` (each neuron's own ε, the diagonal's too): the closed forms of
:mod:`featureode.kernel.population` (:meth:`ReducedFlow.ptf_square`). The tail is then exact for any sharpness of
the ridges, at ``3n²/2`` pair moments per evaluation (the init pairs are summed once): 6 s for relu at ``n = 2^12``
on one core against 0.6 s for the 14³- and 18³-point rules' tails, and erf's pairs cost about 9× relu's
(``benchmarks/results/population_benchmark.md``), which is why the rules go first. Once exact, the ladder only
certifies the whole residual's drive: the drive's rule is the coarsest rung, from the current one, whose tail is
within :data:`TAIL_TOL` of the exact one, and when even the finest misses it the run stops (:class:`TailError`).

**The whole residual driving** (``drive="whole"``, the variant ``meanfield+whole``; the tail is then counted too).
The basis' driving stops at the modes in ``S``; the gradient flow of the loss on T is driven by the whole residual
``r = y − P_T f``, every degree included. Through the tail's rule (the finer rule of the pair that certified the last
tail) with nodes ``z_q`` and weights ``w_q``, a neuron moves by ``γ P Σ_q w_q r(z_q) ∇_θ m_0(ŵ_T·z_q + b, s_⊥)``
(the ridge form: ``m_0``, ``m_1``, ``m_2`` at every neuron and node, and ``∂m_0/∂C = η_w Σ_{i∉T} g_i ŵ_i² m_2`` by
the heat equation of the smoothing). At t = 0 it equals the basis' driving to the rule's error. Its kernel
``r ↦ ΔP_T f`` holds the constant and linear modes, whose rates are far above the basis' (50× on the wide suite's
base case), so stability needs that kernel's top eigenvalue (Lanczos, :meth:`ReducedFlow.lam_max`), not the
Gram's. These modes are stiff: the flow is integrated by the damped second-order Runge–Kutta–Chebyshev method
(:func:`rkc_step`), whose step follows the accuracy rule above without ``c/λ_max`` and whose stage count grows as
``sqrt(h λ_max)`` (RK4 at ``c/λ_max`` stays available, ``run(integrator="rk4")``). ``theory_tests/test_meanfield.py``
checks it against autograd's gradient flow of ``½‖P_T f − y‖²``.

The result is a :class:`~featureode.results.trajectory.Trajectory` named ``"meanfield"`` (``"meanfield+tail"``,
``"meanfield+whole"``) on the theory's modes, with ``meta.parameter_free = true`` and ``meta.uses_measurements =
false`` (``meta.info`` lists the modes followed, projected and zero by symmetry, the driving and the tail's rule). Cost: seconds to a few minutes on the
suites' cases at ``m = 12`` (``docs/validation/reduced_flow.md``).
"""
from __future__ import annotations

import functools
import hashlib
import io
import math
import os
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy.interpolate import RectBivariateSpline
from scipy.stats import gamma as gamma_law
from scipy.stats import norm, qmc
from sympy import srepr as sp_srepr

from featureode.calculus.activations import get_activation
from featureode.core.cache import atomic_bytes
from featureode.core.errors import FeatureODEError
from featureode.kernel.population import PopulationError, has_exact_population_loss, smoothed_square
from featureode.results.metrics import crossing_time, in_support_loss
from featureode.results.trajectory import Status, Trajectory
from featureode.ode.variants import MEANFIELD, MEANFIELD_TAIL, MEANFIELD_WHOLE

#: Version of the cached tables of means (:class:`MeanTable`): bump it when the rule that fills them changes.
TABLE_VERSION = 2
#: Version of the flow's numerics in a checkpoint's key (:meth:`ReducedFlow.run`): bump it with any change that moves
#: a run's curve (a rule, a step, a mean), so that a run kept by the old code is refused rather than continued by
#: the new one. (A digest of the sources would also refuse after every edit of a docstring, and the three- and
#: four-direction runs that span sessions would start again each time.)
FLOW_VERSION = 1


class MeanFieldError(FeatureODEError, ValueError):
    """A mean-field flow that cannot be followed: bad settings, a parametrization it does not cover, a neuron outside
    the table of means, or a non-finite state. The message names the value and the fix."""


def rk4_step(velocity: Callable[[tuple], tuple], state: tuple, h: float) -> tuple:
    """One classical RK4 step of length ``h`` for a state held as a tuple of arrays (``velocity`` returns one
    derivative per entry)."""
    k1 = velocity(state)
    k2 = velocity(tuple(x + h / 2 * k for x, k in zip(state, k1)))
    k3 = velocity(tuple(x + h / 2 * k for x, k in zip(state, k2)))
    k4 = velocity(tuple(x + h * k for x, k in zip(state, k3)))
    return tuple(x + h / 6 * (p + 2 * q + 2 * r + s) for x, p, q, r, s in zip(state, k1, k2, k3, k4))


#: RK4's stability bound on the negative real axis (``h λ ≤ 2.785``)
RK4_BOUND = 2.785
#: RKC's damping ε (Verwer, Hundsdorfer & Sommeijer's choice): the stability region stays a distance from 0 along
#: the real axis, at the price of a bound ``β(s) ≈ 0.65 s²`` instead of ``2 s²``
RKC_DAMPING = 2.0 / 13.0


@functools.lru_cache(maxsize=None)
def rkc_coefficients(s: int) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The damped second-order Runge–Kutta–Chebyshev method of ``s ≥ 2`` stages (Sommeijer, Shampine & Verwer
    1997): its real stability bound ``β = (1 + w0)/w1`` and, for stages ``j = 1..s``, ``μ_j, ν_j, μ̃_j, γ̃_j``
    (index j; entries 0 and, for μ, ν, γ̃, 1 unused), from the Chebyshev polynomials ``T_j`` at
    ``w0 = 1 + ε/s²``. Cached per ``s`` (every step asks for them): the arrays are shared, not to be written."""
    w0 = 1.0 + RKC_DAMPING / s**2
    T, dT, d2T = np.zeros(s + 1), np.zeros(s + 1), np.zeros(s + 1)
    T[0], T[1], dT[1] = 1.0, w0, 1.0
    for j in range(2, s + 1):
        T[j] = 2 * w0 * T[j - 1] - T[j - 2]
        dT[j] = 2 * T[j - 1] + 2 * w0 * dT[j - 1] - dT[j - 2]
        d2T[j] = 4 * dT[j - 1] + 2 * w0 * d2T[j - 1] - d2T[j - 2]
    w1 = dT[s] / d2T[s]
    b = np.empty(s + 1)
    b[2:] = d2T[2:] / dT[2:] ** 2
    b[0] = b[1] = b[2]
    mu, nu, mut, gat = np.zeros(s + 1), np.zeros(s + 1), np.zeros(s + 1), np.zeros(s + 1)
    mut[1] = b[1] * w1
    for j in range(2, s + 1):
        mu[j] = 2 * w0 * b[j] / b[j - 1]
        nu[j] = -b[j] / b[j - 2]
        mut[j] = 2 * w1 * b[j] / b[j - 1]
        gat[j] = -(1 - b[j - 1] * T[j - 1]) * mut[j]
    return (1 + w0) / w1, mu, nu, mut, gat, b


def rkc_stages(h_lam: float) -> int:
    """The fewest stages ``s ≥ 2`` whose stability bound holds ``h λ_max``."""
    s = 2
    while rkc_coefficients(s)[0] < h_lam:
        s += 1
    return s


def rkc_step(velocity: Callable[[tuple], tuple], state: tuple, h: float, s: int) -> tuple:
    """One step of length ``h`` of the damped second-order RKC method of ``s`` stages (:func:`rkc_coefficients`):
    explicit, stable for real negative rates up to ``β(s) ≈ 0.65 s²`` over ``h``, for a state held as a tuple of
    arrays."""
    _, mu, nu, mut, gat, _ = rkc_coefficients(s)
    f0 = velocity(state)
    prev2, prev = state, tuple(x + mut[1] * h * k for x, k in zip(state, f0))
    for j in range(2, s + 1):
        fj = velocity(prev)
        new = tuple((1 - mu[j] - nu[j]) * y + mu[j] * a + nu[j] * c + mut[j] * h * k + gat[j] * h * k0
                    for y, a, c, k, k0 in zip(state, prev, prev2, fj, f0))
        prev2, prev = prev, new
    return prev


class MeanTable:
    """``m_k(b, s)`` of an activation without a closed-form mean: its quadrature rule (``Activation.mean_numpy``)
    on a table of ``b ∈ [−10151, 10151]`` (421 points, ``3 sinh``-spaced: 0.13 apart near 0, 4 apart at |b| = 100,
    4% of |b| at the ends) × ``s ∈ [0.02, 100]`` (140 points, log-spaced), one interpolating bicubic spline per order
    (SciPy's ``RectBivariateSpline``, evaluated by the compiled loop :func:`featureode.kernel.loops.bspline_surface`,
    which reads several orders in one pass; :meth:`many`). A neuron outside it stops the run there, with its curve
    so far. Trained neurons keep growing long after the loss has fallen, and a neuron that learns a linear part of
    the target goes far out in b, where σ is its asymptote: a wide2 SiLU bias reached 102 at t ≈ 416 on
    ``0.5*z0 + z1*z2*z3``, past the first table's |b| ≤ 100 (the points within it are the first table's, 201 of them;
    ``TABLE_VERSION`` 2). A table is computed once per machine and kept in the cache
    (:func:`featureode.core.cache.cache_dir`, named by a hash of the activation's SymPy expression, the order and
    the grid), so a later process only reads it."""

    B = 3.0 * np.sinh(2 * math.asinh(100 / 3) / 200 * np.arange(-210, 211))
    S = np.geomspace(0.02, 100.0, 140)
    #: (srepr of the expression, order) → the spline's (knots in b, knots in s, coefficients)
    _splines: dict[tuple[str, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def __init__(self, act: Any) -> None:
        self.act = act
        self.expr = sp_srepr(act.expr)   # the key: two activations of one name but other expressions differ

    def values(self, k: int) -> np.ndarray:
        """The table of ``m_k`` on ``B × S``, from the cache or computed (and then cached)."""
        import hashlib
        import io

        from featureode.core.cache import atomic_bytes, cache_dir

        key = hashlib.sha256(f"{TABLE_VERSION}|{self.expr}|{k}|{self.B.tobytes().hex()}|"
                             f"{self.S.tobytes().hex()}".encode()).hexdigest()[:24]
        path = cache_dir() / f"meanfield_table_{key}.npy"
        try:
            vals = np.load(path, allow_pickle=False)
            if vals.shape == (self.B.size, self.S.size) and np.all(np.isfinite(vals)):
                return vals
        except (OSError, ValueError):
            pass
        bb, ss = np.meshgrid(self.B, self.S, indexing="ij")
        with np.errstate(all="ignore"):
            vals = self.act.mean_numpy(k)(bb.ravel(), ss.ravel()).reshape(bb.shape)
        if not np.all(np.isfinite(vals)):
            raise MeanFieldError(f"meanfield: m_{k} of {self.act.name} is not finite on its table (b in "
                                 f"[{self.B[0]:.0f}, {self.B[-1]:.0f}], |w| in [{self.S[0]}, {self.S[-1]:.0f}]); "
                                 "this activation needs a closed-form mean")
        buf = io.BytesIO()
        np.save(buf, vals, allow_pickle=False)
        try:
            atomic_bytes(path, buf.getvalue(), durable=False)
        except OSError:
            pass   # a read-only cache: the table is only recomputed next time
        return vals

    def _spline(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        key = (self.expr, k)
        spline = self._splines.get(key)
        if spline is None:
            tx, ty, c = RectBivariateSpline(self.B, self.S, self.values(k), kx=3, ky=3).tck
            spline = self._splines[key] = (tx, ty, np.asarray(c).reshape(tx.size - 4, ty.size - 4))
        return spline

    def many(self, ks: tuple[int, ...], b: np.ndarray, s: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``m_k(b, s)`` for every order of ``ks`` (shape ``len(ks) × b.shape``), in one pass over the points. With
        ``b`` of rows × points and ``s`` a column (one value per row: a neuron's ``s`` at every node of a rule),
        the spline is reduced to a cubic in ``b`` once per row (:func:`featureode.kernel.loops.bspline_rows`), and
        written into ``out`` when given."""
        b, s = np.asarray(b, float), np.asarray(s, float)
        rows = b.ndim == 2 and s.shape == (b.shape[0], 1)
        if not rows:
            b, s = np.broadcast_arrays(b, s)
        if b.min() < self.B[0] or b.max() > self.B[-1] or s.min() < self.S[0] or s.max() > self.S[-1]:
            raise MeanFieldError(f"meanfield: a neuron left the table of m_k of {self.act.name} (b in "
                                 f"[{b.min():.3g}, {b.max():.3g}], |w| in [{s.min():.3g}, {s.max():.3g}]; the "
                                 f"table holds |b| ≤ {self.B[-1]:.0f}, {self.S[0]} ≤ |w| ≤ {self.S[-1]:.0f}); "
                                 "shorten t_max or lower the richness γ")
        from featureode.kernel.loops import bspline_rows, bspline_surface

        splines = [self._spline(k) for k in ks]
        tx, ty, _ = splines[0]   # one grid, so the same knots for every order
        coefs = np.stack([c for _, _, c in splines])
        if rows:
            return bspline_rows(tx, ty, coefs, b, s[:, 0], out=out)
        vals = bspline_surface(tx, ty, coefs, b, s)
        if out is not None:
            out[...] = vals
            return out
        return vals

    def __call__(self, k: int, b: np.ndarray, s: np.ndarray) -> np.ndarray:
        return self.many((k,), b, s)[0]


#: the tail loss (:meth:`ReducedFlow.tail_loss`) is evaluated where t has grown by this factor since its last value
TAIL_EVERY = 1.1
#: Gauss–Hermite points per direction of the tail's rules, coarse to fine, by the number of directions |T|: two
#: neighbours are compared, and a finer pair is taken when they disagree (:meth:`ReducedFlow.tail_loss`)
TAIL_POINTS = {1: (48, 64, 96, 128, 192), 2: (18, 24, 32, 48, 64), 3: (10, 14, 18, 24), 4: (6, 8, 10, 12)}
#: the tail is certified when two neighbouring rules agree within this (in units of L(0))
TAIL_TOL = 2e-3
#: for |T| ≥ 3, after the product rules: scrambled Sobol' rules of ``2^m`` points on z_T (a fixed seed), with the
#: target's part of every integral exact (:meth:`ReducedFlow._tail_at`, :meth:`ReducedFlow.velocity`). The neurons'
#: ridges sharpen (``s_⊥`` shrinks as ``ŵ_T`` grows) until no affordable product rule resolves them; on the wide2
#: suite's ``z0*z1*z2`` where 18³ and 24³ disagree, the tail by 40³ points is still 1e-3 off, by 2^14..2^16 Sobol'
#: points within 1e-3 of each other and 2^15's drive moves f within 2% of 2^16's (``docs/validation/sharp_ridges.md``).
#: Two rungs: the drive's means take 3 arrays of neurons × nodes, 3 GB at 2^15 nodes and 4096 neurons
TAIL_SOBOL = (14, 15)
TAIL_SOBOL_SEED = 0


def _target_at(T: list[int], target: list[tuple[Any, float]], Z: np.ndarray) -> np.ndarray:
    """``y(z_T) = Σ_β v_β He_β(z)/sqrt(β!)`` at the nodes ``Z``."""
    from numpy.polynomial.hermite_e import hermeval

    pos = {i: j for j, i in enumerate(T)}
    y = np.zeros(Z.shape[0])
    for mode, coeff in target:
        term = np.full(Z.shape[0], float(coeff))
        for i, order in mode.items:
            unit = np.zeros(order + 1)
            unit[order] = 1.0
            term *= hermeval(Z[:, pos[i]], unit) / math.sqrt(math.factorial(order))
        y += term
    return y


def _tail_rule(T: list[int], target: list[tuple[Any, float]], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The product Gauss–Hermite rule of ``n`` points per direction on ``z_T`` (nodes, weights summing to 1) and
    the target at its nodes (:func:`_target_at`)."""
    from numpy.polynomial.hermite_e import hermegauss

    x, w = hermegauss(n)
    Z = np.stack([g.ravel() for g in np.meshgrid(*[x] * len(T), indexing="ij")], 1)
    wq = np.prod(np.stack([g.ravel() for g in np.meshgrid(*[w / w.sum()] * len(T), indexing="ij")], 1), 1)
    return Z, wq, _target_at(T, target, Z)


def _sobol_rule(T: list[int], target: list[tuple[Any, float]], m: int,
                seed: int = TAIL_SOBOL_SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A scrambled Sobol' rule of ``2^m`` points on ``z_T`` (scrambled with ``seed``; equal weights) and the
    target at its nodes."""
    u = np.clip(qmc.Sobol(len(T), scramble=True, seed=seed).random_base2(m), 1e-12, 1 - 1e-12)
    Z = norm.ppf(u)
    return Z, np.full(Z.shape[0], 1.0 / Z.shape[0]), _target_at(T, target, Z)


class TailError(MeanFieldError):
    """The loss outside the basis is not resolved by the tail's rules (the run stops there, its curve kept)."""


class ClosedMeans:
    """``m_k(b, s)`` of an activation with a closed-form mean (``Activation.mean_numpy``), with
    :class:`MeanTable`'s interface."""

    def __init__(self, act: Any) -> None:
        self.act = act

    def __call__(self, k: int, b: np.ndarray, s: np.ndarray) -> np.ndarray:
        return np.asarray(self.act.mean_numpy(k)(b, s))

    def many(self, ks: tuple[int, ...], b: np.ndarray, s: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``m_k(b, s)`` for every order of ``ks`` (shape ``len(ks) × b.shape``; ``s`` broadcast to ``b``, a column
        read once per row), the orders in one pass with their common parts shared (``Activation.means_numpy``),
        written into ``out`` when given."""
        return self.act.means_numpy(tuple(ks))(b, s, out=out)


def _means(activation: str) -> "ClosedMeans | MeanTable":
    act = get_activation(activation)
    return ClosedMeans(act) if act.mean0 is not None else MeanTable(act)


class ReducedFlow:
    """The flow of the module docstring on ``2^m`` Sobol' init neurons: ``g`` the spectrum, ``modes``/``v`` the
    basis and the target on it, ``gamma`` γ, ``rates`` ``(η_a, η_w, η_b)``, ``readout_variance`` ``E[a²]``."""

    def __init__(self, g: np.ndarray, modes: list, v: np.ndarray, gamma: float, bias_std: float, activation: str,
                 m: int = 12, rates: tuple[float, float, float] = (1.0, 1.0, 1.0), readout_variance: float = 1.0,
                 seed: int = 0, init: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
                 tail: bool = False, drive: str = "basis", exact_tail: bool | None = None) -> None:
        g, v = np.asarray(g, dtype=float), np.asarray(v, dtype=float)
        if drive not in ("basis", "whole"):
            raise MeanFieldError(f"meanfield: drive = {drive!r} is not 'basis' (the basis' modes in T drive, "
                                 "meanfield) or 'whole' (the whole residual on T drives, meanfield+whole)")
        self.drive = drive
        tail = tail or drive == "whole"   # the whole residual's rule is the tail's
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 4 <= m <= 20:
            raise MeanFieldError(f"meanfield: m = {m!r} is not an integer in 4..20 (2^m init neurons; 12 is the "
                                 "default)")
        if not (math.isfinite(gamma) and gamma > 0):
            raise MeanFieldError(f"meanfield: the richness γ = {gamma!r} must be a finite number > 0")
        if not np.any(v):
            raise MeanFieldError("meanfield: the target is zero on every mode, so L/L(0) is undefined; give a "
                                 "nonzero target")
        T = sorted({i for mode, x in zip(modes, v) if x != 0.0 for i in mode.support})
        self.keep = [k for k, mode in enumerate(modes) if set(mode.support) <= set(T)]
        self.modes = [modes[k] for k in self.keep]
        self.v, self.v_all = v[self.keep], v
        # the other modes of the basis: f = 0 where a coordinate outside T has an odd power (the flow is even in
        # it); the rest are projected, not driven (``off``)
        self.off = [k for k, mode in enumerate(modes) if k not in self.keep
                    and all(n % 2 == 0 for i, n in mode.items if i not in T)]
        self.gamma, self.T = float(gamma), T
        self.eta = tuple(float(x) for x in rates)
        self.gT = g[T] * self.eta[1]             # the metric of ŵ_T: η_w g
        self.gperp = np.delete(g, T)
        pos = {i: j for j, i in enumerate(T)}
        self.items = [[(pos[i], n) for i, n in mode.items] for mode in self.modes]
        self.fact = np.array([math.sqrt(math.prod(math.factorial(n) for _, n in mode.items)) for mode in self.modes])
        self.deg = [mode.degree for mode in self.modes]
        self.orders = sorted({q + j for q in self.deg for j in (0, 1, 2)})
        self.off_items = [([(pos[i], n) for i, n in modes[k].items if i in pos],
                           [(float(g[i]), n, i - sum(t < i for t in T)) for i, n in modes[k].items if i not in pos],
                           math.sqrt(math.prod(math.factorial(n) for _, n in modes[k].items)), modes[k].degree)
                          for k in self.off]
        self._mean = _means(activation)
        self.activation = activation
        self.perp0: np.ndarray | None = None
        self._last: tuple[tuple, tuple] | None = None   # the last state's parts (:meth:`_parts`)
        # the loss on the modes in T outside the basis (:meth:`tail_loss`): its Gauss–Hermite rules on z_T, built
        # when first needed (nodes, weights, the target at the nodes; F at the init neurons). None without the
        # tail, or without coordinates outside T (nothing smooths the ridges there)
        self.tail_points: tuple[int, ...] | None = (TAIL_POINTS.get(len(T), (4, 5, 6)) if tail and self.gperp.size
                                                    else None)
        #: the Sobol' rungs after the product rules (:data:`TAIL_SOBOL`, for |T| ≥ 3)
        self.tail_sobol: tuple[int, ...] = TAIL_SOBOL if self.tail_points is not None and len(T) >= 3 else ()
        self._tail_rules: dict[int, tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {}
        self._tail_target = [(mode, x) for mode, x in zip(modes, v) if x != 0.0]
        #: the coarser rule of the pair that certified the last tail; with the exact tail, the drive's rung less one
        self._rung = 0
        if exact_tail and not has_exact_population_loss(activation):
            raise MeanFieldError(f"meanfield: exact_tail=True needs closed-form pair moments (relu, erf), not "
                                 f"{activation}; leave exact_tail=None for the rules' tail")
        #: whether :meth:`tail_loss` is exact (pair moments, :meth:`ptf_square`) rather than a rule's: from the
        #: start (``exact_tail=True``), or from where the rules first fail to certify it (``None``, relu and erf)
        self.exact_tail = bool(exact_tail) and self.tail_points is not None
        self._exact_fallback = exact_tail is None and has_exact_population_loss(activation)
        self._exact_policy = exact_tail   # as given (``exact_tail`` turns True during a run): the checkpoint's key
        #: ``(‖F(0)‖²/γ², s_⊥ of the init neurons)`` (:meth:`ptf_square`)
        self._init_square: tuple[float, np.ndarray] | None = None
        if drive == "whole" and self.tail_points is None:
            raise MeanFieldError("meanfield: drive='whole' (meanfield+whole) needs coordinates outside the target's "
                                 "directions to smooth the neurons' ridges (data dim > the target's); use meanfield")
        self._whole: tuple[tuple, int, tuple[np.ndarray, ...]] | None = None   # (state, rung, (M0, M1, M2))
        self._buffers: tuple[np.ndarray, np.ndarray] | None = None   # u and (M0, M1, M2) of :meth:`_whole_means`
        self.integrator = "rk4"   # the integrator of the last :meth:`run`
        self._eigvec: np.ndarray | None = None   # the last top eigenvector of the whole flow's kernel (warm start)
        #: ``(t, tail)`` of the last :meth:`run`: the tail loss where it was evaluated (:meth:`loss`)
        self.tail_path: tuple[np.ndarray, np.ndarray] = (np.zeros(1), np.zeros(1))
        #: where the last :meth:`run` resumed from its checkpoint: ``{"t": …, "seconds": …}`` (the t it went on from
        #: and the wall seconds spent before it), or None when it started at t = 0
        self.resumed: dict[str, float] | None = None
        if init is not None:   # given neurons (a, ŵ, b), e.g. a network's own: the coordinates outside T exactly
            a, W_all, b = (np.asarray(x, dtype=float) for x in init)
            if W_all.ndim != 2 or W_all.shape[1] != g.size or not a.shape == b.shape == (W_all.shape[0],):
                raise MeanFieldError(f"meanfield: init must be (a (n,), ŵ (n, {g.size}), b (n,)), got shapes "
                                     f"{a.shape}, {W_all.shape}, {b.shape}")
            self.perp0 = np.delete(W_all, T, axis=1) ** 2
            self.xi = np.zeros(a.size)
            self._start(a, W_all[:, T], b)
            return
        k = len(T)
        dims = 1 + k + (bias_std > 0) + (self.gperp.size > 0)
        u = np.clip(qmc.Sobol(dims, scramble=True, seed=seed).random_base2(m), 1e-12, 1 - 1e-12)
        a = math.sqrt(readout_variance) * norm.ppf(u[:, 0])
        W = norm.ppf(u[:, 1:1 + k]) * np.sqrt(g[T])
        col, b = 1 + k, np.zeros(u.shape[0])
        if bias_std > 0:
            b, col = bias_std * norm.ppf(u[:, col]), col + 1
        self.xi = np.zeros(u.shape[0])
        if self.gperp.size:
            shape = float(self.gperp.sum() ** 2 / (2 * (self.gperp**2).sum()))
            self.xi = gamma_law.ppf(u[:, col], shape, scale=1 / shape)
        self._start(a, W, b)

    @classmethod
    def from_theory(cls, theory: Any, **options: Any) -> "ReducedFlow":
        """The flow of a kernel theory (:func:`featureode.kernel.theory.kernel_theory` of a meanfield config): its
        spectrum, basis, target, γ, σ_b, activation and its parametrization's rates and readout variance;
        ``options`` as for the constructor (``m``, ``seed``, ``tail``, ``drive``, ``init``)."""
        par = theory.parametrization
        return cls(np.asarray(theory.g, float), list(theory.modes), np.asarray(theory.target, float),
                   float(theory.gamma), float(theory.bias_std), str(theory.activation),
                   rates=par.part_weights(), readout_variance=par.readout_variance, **options)

    def _start(self, a: np.ndarray, W: np.ndarray, b: np.ndarray) -> None:
        self.state0 = (a, W, b, np.zeros(a.size))
        self.phi0 = (a[:, None] * self._parts(self.state0)[0]).mean(0)
        self.phi0_off = self._off_projections(self.state0)

    def _perp(self, C: np.ndarray, power: int) -> np.ndarray:
        """``Σ_{i∉T} g_i^{power−1} ŵ_i(0)² e^{2 η_w g_i C}`` per neuron: ``ŵ_i(0)²`` is ``ξ g_i`` for the Sobol'
        neurons, and each neuron's own for given ones (``init``)."""
        if not self.gperp.size:
            return np.zeros_like(C)
        growth = np.exp(2 * self.eta[1] * np.outer(C, self.gperp))
        if self.perp0 is not None:
            return (self.perp0 * growth) @ self.gperp ** (power - 1)
        return self.xi * (growth @ self.gperp**power)

    def _parts(self, state: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``A (n, M)``, ``∂A/∂ŵ_T (n, M, k)``, ``∂A/∂b (n, M)`` and ``A' = ŵ^α m_{|α|+2}/sqrt(α!)`` (n, M). The
        last state's parts are kept: :meth:`run` reads ``f`` at a new state, then the next step's first velocity
        (and every tenth step the Gram) needs the same parts of that same state."""
        if self._last is not None and self._last[0] is state:
            return self._last[1]
        parts = self._compute_parts(state)
        self._last = (state, parts)
        return parts

    def _compute_parts(self, state: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        _, W, b, C = state
        s = np.sqrt((W**2).sum(1) + self._perp(C, 1))
        m = dict(zip(self.orders, self._mean.many(tuple(self.orders), b, s)))
        n, k = W.shape
        M = len(self.modes)
        A, dW, db, dperp = np.empty((n, M)), np.zeros((n, M, k)), np.empty((n, M)), np.empty((n, M))
        for j, (items, q) in enumerate(zip(self.items, self.deg)):
            val = np.ones(n) / self.fact[j]
            for i, e in items:
                val = val * W[:, i] ** e
            A[:, j], db[:, j], dperp[:, j] = val * m[q], val * m[q + 1], val * m[q + 2]
            dW[:, j, :] = dperp[:, j][:, None] * W
            for i, e in items:
                rest = np.ones(n) / self.fact[j]
                for i2, e2 in items:
                    rest = rest * (W[:, i2] ** e2 if i2 != i else e2 * W[:, i2] ** (e2 - 1))
                dW[:, j, i] += rest * m[q]
        return A, dW, db, dperp

    def f(self, state: tuple) -> np.ndarray:
        """``f_α`` on ``S``."""
        return ((state[0][:, None] * self._parts(state)[0]).mean(0) - self.phi0) / self.gamma

    def _off_projections(self, state: tuple) -> np.ndarray:
        """``E[a A_α]`` of the modes ``off``: ``A_α = ŵ_T^{α_T} Π_{i∉T} ŵ_i^{n_i} m_{|α|}/sqrt(α!)`` with each even
        power of a coordinate outside T given its Gaussian moment at the scale ``ξ``:
        ``ŵ_i^{n} → (n − 1)!! (ξ g_i)^{n/2} e^{n η_w g_i C}`` (given neurons: their own ``ŵ_i(0)^n e^{n η_w g_i C}``)."""
        if not self.off:
            return np.zeros(0)
        a, W, b, C = state
        s = np.sqrt((W**2).sum(1) + self._perp(C, 1))
        means: dict[int, np.ndarray] = {}
        out = np.empty(len(self.off))
        for j, (items_T, items_perp, fact, q) in enumerate(self.off_items):
            if q not in means:
                means[q] = self._mean(q, b, s)
            val = a * means[q] / fact
            for i, n in items_T:
                val = val * W[:, i] ** n
            for gi, n, col in items_perp:
                own = (self.perp0[:, col] ** (n // 2) if self.perp0 is not None
                       else math.prod(range(n - 1, 0, -2)) * (self.xi * gi) ** (n // 2))
                val = val * own * np.exp(n * self.eta[1] * gi * C)
            out[j] = val.mean()
        return out

    def f_all(self, state: tuple) -> np.ndarray:
        """``f_α`` on every mode of the basis: ``S`` followed, ``off`` projected, 0 on the odd ones."""
        out = np.zeros(self.v_all.size)
        out[self.keep] = self.f(state)
        if self.off:
            out[self.off] = (self._off_projections(state) - self.phi0_off) / self.gamma
        return out

    def _ridge_mean(self, state: tuple, Z: np.ndarray) -> np.ndarray:
        """``F(z_T) = E[a m_0(ŵ_T·z_T + b, s_⊥)]`` at the nodes ``Z``, ``s_⊥² = Σ_{i∉T} ŵ_i(t)²``: the network's
        output averaged over the coordinates outside T."""
        a, W, b, C = state
        s = np.sqrt(self._perp(C, 1))
        F = np.empty(Z.shape[0])
        for k in range(0, Z.shape[0], 256):   # blocks of nodes: (n neurons × 256) at a time
            U = W @ Z[k:k + 256].T + b[:, None]
            F[k:k + 256] = a @ self._mean.many((0,), U, s[:, None])[0] / a.size
        return F

    def _rungs(self) -> int:
        """How many rules the tail's ladder has: the product rules, then the Sobol' ones."""
        return 0 if self.tail_points is None else len(self.tail_points) + len(self.tail_sobol)

    def _exact_target(self, rung: int) -> bool:
        """Whether rung ``rung`` is a Sobol' rule: its integrals take the target's part exactly."""
        return self.tail_points is not None and rung >= len(self.tail_points)

    def _rule_label(self, rung: int) -> str:
        assert self.tail_points is not None
        if self._exact_target(rung):
            return f"Sobol' 2^{self.tail_sobol[rung - len(self.tail_points)]}"
        return f"Gauss–Hermite {self.tail_points[rung]}^{len(self.T)}"

    def _rule(self, rung: int) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        """Rung ``rung``'s rule (nodes, weights, the target there) and ``F`` of the init neurons on it (cached)."""
        assert self.tail_points is not None
        if rung not in self._tail_rules:
            if self._exact_target(rung):
                rule = _sobol_rule(self.T, self._tail_target, self.tail_sobol[rung - len(self.tail_points)])
            else:
                rule = _tail_rule(self.T, self._tail_target, self.tail_points[rung])
            self._tail_rules[rung] = (rule, self._ridge_mean(self.state0, rule[0]))
        return self._tail_rules[rung]

    def _tail_at(self, state: tuple, rung: int, basis: float) -> float:
        (Z, wq, y), F0 = self._rule(rung)
        PTf = (self._ridge_mean(state, Z) - F0) / self.gamma
        if self._exact_target(rung):
            # ‖P_T f − y‖² − Σ_S (v − f)² = ‖P_T f‖² − Σ_S f²: the target's parts exact (v lies on S), the
            # rule integrating P_T f² alone
            tail = float(wq @ PTf**2) - float((self.f(state) ** 2).sum())
        else:
            tail = float(wq @ (PTf - y) ** 2) - basis
        return max(tail, 0.0) / float((self.v_all**2).sum())

    def ptf_square(self, state: tuple) -> float:
        """``‖P_T f‖² = E_{z_T}[((F(t) − F(0))/γ)²]`` exactly: ``P_T f`` is a sum of the 2n ridges
        ``±a m_0(ŵ_T·z_T + b, s_⊥)/(nγ)`` (the neurons now and at init), each smoothed by its own Gaussian of
        standard deviation ``s_⊥``, so its square is a sum of Gaussian pair moments
        (:func:`~featureode.kernel.population.smoothed_square`; relu and erf). The pairs of two init neurons are
        summed once (a quarter of the pairs)."""
        a, W, b, C = state
        a0, W0, b0, C0 = self.state0
        n = a.size
        coef = np.concatenate([a, -a0]) / (n * self.gamma)
        if self._init_square is None:   # the init neurons' s_⊥ and their pairs: fixed, so once
            perp0 = np.sqrt(np.maximum(self._perp(C0, 1), 0.0))
            self._init_square = (smoothed_square(self.activation, coef[n:], W0, b0, perp0), perp0)
        square0, perp0 = self._init_square
        perp = np.concatenate([np.sqrt(np.maximum(self._perp(C, 1), 0.0)), perp0])
        return square0 + smoothed_square(self.activation, coef, np.vstack([W, W0]), np.concatenate([b, b0]), perp,
                                         rows=n)

    def _exact_tail_loss(self, state: tuple) -> float:
        """The tail by :meth:`ptf_square` (``‖P_T f‖² − Σ_S f²``, as the Sobol' rungs' form, with no rule). With the
        whole residual's drive, the drive's rule is then the coarsest rung from the current one whose tail agrees
        with the exact one within :data:`TAIL_TOL`; when even the finest does not, :class:`TailError`."""
        norm2 = float((self.v_all**2).sum())
        try:
            square = self.ptf_square(state)
        except PopulationError as exc:   # an erf pair whose quadrature did not converge: no number, a stop
            raise TailError(f"meanfield: the exact tail could not be certified: {exc}") from None
        f = self.f(state)
        exact = max(square - float((f**2).sum()), 0.0) / norm2
        if self.drive != "whole":
            return exact
        basis = float(((self.v - f) ** 2).sum())
        rung = self._drive_rung()
        while abs(self._tail_at(state, rung, basis) - exact) > TAIL_TOL:
            if rung + 1 >= self._rungs():
                raise TailError(f"meanfield: the whole residual's drive is not resolved: the finest rule "
                                f"({self._rule_label(rung)} nodes on z_T) misses the exact loss on T by more than "
                                f"{TAIL_TOL:g} of L(0) (the neurons' ridges are sharper than the rule; finer Sobol' "
                                "rungs, TAIL_SOBOL, may resolve it)")
            rung += 1
        self._rung = rung - 1
        return exact

    def tail_loss(self, state: tuple) -> float:
        """``Σ_{α ⊂ T, α ∉ S} f_α²/Σ v²``: the loss on every mode in the target's directions that the basis does not
        hold. By Parseval it is ``‖P_T f − y‖² − Σ_{α∈S} (v_α − f_α)²``, with ``P_T f(z_T) = (F(t) − F(0))/γ`` the
        output averaged over the coordinates outside T (:meth:`_ridge_mean`) and ``‖·‖²`` a rule on ``z_T``. The averaging smooths each neuron's ridge by ``s_⊥``; a neuron that shrinks outside T while
        it grows inside has a sharp ridge. So two neighbouring rules of the ladder (:data:`TAIL_POINTS`, then for
        |T| ≥ 3 :data:`TAIL_SOBOL`) are compared, finer pairs taken until they agree within :data:`TAIL_TOL`, and
        the finer value returned. When the finest pair disagrees, the tail is exact from then on for relu and erf
        (:meth:`ptf_square`, unless ``exact_tail=False``), and otherwise :class:`TailError`. A rule's error can put
        a tail that is 0 slightly below 0, which is read as 0. 0 when the flow has no tail."""
        if self.tail_points is None:
            return 0.0
        if self.exact_tail:
            return self._exact_tail_loss(state)
        basis = float(((self.v - self.f(state)) ** 2).sum())
        rung = self._rung
        coarse = self._tail_at(state, rung, basis)
        while rung + 1 < self._rungs():
            fine = self._tail_at(state, rung + 1, basis)
            if abs(fine - coarse) <= TAIL_TOL:
                self._rung = rung
                return fine
            rung, coarse = rung + 1, fine
        if self._exact_fallback:   # the rules cannot certify the tail: it is exact from here on
            self.exact_tail = True
            return self._exact_tail_loss(state)
        raise TailError(f"meanfield: the loss outside the basis is not resolved: rules up to "
                        f"{self._rule_label(self._rungs() - 1)} nodes on z_T still differ by more than {TAIL_TOL:g} "
                        "of L(0) (the neurons' ridges are sharper than the rules); tail=False follows the basis' loss "
                        "alone")

    def loss(self, ts: np.ndarray, fs: np.ndarray) -> np.ndarray:
        """``L/L(0)`` at ``ts`` (a curve of :meth:`run`): the basis' ``Σ_α (v_α − f_α)²/Σ v²`` plus the tail
        (:meth:`tail_loss`), interpolated linearly in t between the times :meth:`run` evaluated it."""
        base = ((self.v_all - fs) ** 2).sum(-1) / float((self.v_all**2).sum())
        return base + np.interp(ts, *self.tail_path)

    def loss_on_T(self, ts: np.ndarray, fs: np.ndarray) -> np.ndarray:
        """:meth:`loss` less the basis' modes outside T (where the target is 0, so their part is ``f_α²/Σ v²``).
        With the whole residual driving, the flow does not read the basis (the drive is ``y − P_T f`` on the
        rule; the basis enters only the loss and the rung of the tail's certification, through a difference of
        two rules' tails in which the basis' part cancels), so this is the loss that a run on the target basis
        reports: ``‖P_T f − y‖²/Σ v²`` (``theory_tests/test_meanfield.py`` runs both bases)."""
        out_T = [k for k in range(self.v_all.size) if k not in self.keep]
        return self.loss(ts, fs) - (fs[:, out_T] ** 2).sum(-1) / float((self.v_all**2).sum())

    def _drive_rule(self) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
        """The rule the whole residual drives through: the finer of the pair of the ladder (:data:`TAIL_POINTS`, then
        :data:`TAIL_SOBOL`) that certified the last tail (so it moves to a finer rule when the tail does), with
        ``F`` of the init neurons on it."""
        return self._rule(self._drive_rung())

    def _drive_rung(self) -> int:
        return min(self._rung + 1, self._rungs() - 1)

    def _whole_means(self, state: tuple) -> tuple[np.ndarray, ...]:
        """``m_0, m_1, m_2`` at every neuron × node of :meth:`_drive_rule` (``u = ŵ_T·z_T + b``, ``s_⊥``); the last
        state's are kept (the step's first stage and :meth:`lam_max` read the same state)."""
        rung = self._rung
        if self._whole is not None and self._whole[0] is state and self._whole[1] == rung:
            return self._whole[2]
        (Z, _, _), _ = self._drive_rule()
        _, W, b, C = state
        self._whole = None
        # u and the means in arrays kept from call to call (neurons × nodes each: 1 GB apiece at 2^12 × 2^15),
        # not made afresh: faulting in 4 GB of new pages made a velocity 1.8× slower (bench_whole_velocity.py)
        shape = (W.shape[0], Z.shape[0])
        if self._buffers is None or self._buffers[0].shape != shape:
            self._buffers = None   # the old rung's go first
            self._buffers = (np.empty(shape), np.empty((3, *shape)))
        U, out = self._buffers
        np.matmul(W, Z.T, out=U)
        U += b[:, None]
        means = tuple(self._mean.many((0, 1, 2), U, np.sqrt(self._perp(C, 1))[:, None], out=out))
        self._whole = (state, rung, means)
        return means

    def _pull(self, state: tuple, rw: np.ndarray) -> tuple[np.ndarray, ...]:
        """``γ P Σ_q rw_q ∇_θ m_0(u_q)`` per neuron (``rw`` a function at the rule's nodes times the weights): the
        velocity that a residual ``r`` with ``rw = w r`` drives, in the coordinates ``(a, ŵ_T, b, C)``."""
        (Z, _, _), _ = self._drive_rule()
        a = state[0]
        M0, M1, M2 = self._whole_means(state)
        ea, _, eb = self.eta
        g = self.gamma
        # no array of neurons × nodes beyond the means: (M1 · rw) @ Z as M1 @ (rw Z)
        return (ea * g * (M0 @ rw), g * a[:, None] * (M1 @ (rw[:, None] * Z)) * self.gT, eb * g * a * (M1 @ rw),
                g * a * (M2 @ rw))

    def _push(self, state: tuple, d: tuple[np.ndarray, ...]) -> np.ndarray:
        """The change of ``P_T f`` at the rule's nodes along a velocity ``d`` (``∂m_0/∂C = η_w Σ_{i∉T} g_i ŵ_i² m_2``
        by the heat equation of the Gaussian smoothing)."""
        (Z, _, _), _ = self._drive_rule()
        a, _, _, C = state
        M0, M1, M2 = self._whole_means(state)
        da, dW, db, dC = d
        # Σ_n a_n M1[n, q] (dŵ_n·z_q + db_n) without an array of neurons × nodes
        out = da @ M0 + (a * db) @ M1 + (((a[:, None] * dW).T @ M1) * Z.T).sum(0) \
            + (a * self.eta[1] * self._perp(C, 2) * dC) @ M2
        return out / (a.size * self.gamma)

    def _ptf_on_rule(self, state: tuple) -> np.ndarray:
        """``P_T f = (F(t) − F(0))/γ`` at the nodes of :meth:`_drive_rule`."""
        _, F0 = self._drive_rule()
        a = state[0]
        return (a @ self._whole_means(state)[0] / a.size - F0) / self.gamma

    def residual_on_rule(self, state: tuple) -> np.ndarray:
        """``r = y − P_T f`` at the nodes of :meth:`_drive_rule`."""
        (_, _, y), _ = self._drive_rule()
        return y - self._ptf_on_rule(state)

    def lam_max(self, state: tuple) -> float:
        """The largest rate of the flow's kernel: of the Gram on ``S`` (:meth:`gram`) for the basis' driving; for
        the whole residual's, of the kernel on functions of ``z_T`` at the rule's nodes, ``r ↦ push(pull(w r))``,
        which is symmetric in the weighted product and has rates far above the basis' (the constant and linear
        modes, 50× on the wide suite's base case at t = 0). Lanczos on ``x = w^{1/2} r``, warm-started from the last
        eigenvector (then in a Krylov space of 4), to 10⁻³."""
        if self.drive == "basis":
            return float(np.linalg.eigvalsh(self.gram(state)).max())
        from scipy.sparse.linalg import LinearOperator, eigsh

        (_, wq, _), _ = self._drive_rule()
        root = np.sqrt(wq)
        op = LinearOperator((wq.size, wq.size), dtype=float,
                            matvec=lambda x: root * self._push(state, self._pull(state, root * np.ravel(x))))
        start = self._eigvec if self._eigvec is not None and self._eigvec.size == wq.size else None
        # warm: a Krylov space of 4 converges in ~5 products (ARPACK's default 20 takes 21 for the same value)
        vals, vecs = eigsh(op, k=1, which="LA", tol=1e-3, v0=start, ncv=None if start is None else 4)
        self._eigvec = vecs[:, 0]
        return float(vals[0])

    def velocity(self, state: tuple) -> tuple[np.ndarray, ...]:
        """``d(a, ŵ_T, b, C)/dt``: driven by the basis' residuals in ``S`` (``drive='basis'``), or by the whole
        residual ``r = y − P_T f`` on T through the rule of :meth:`_drive_rule` (``drive='whole'``)."""
        if self.drive == "whole":
            (_, wq, _), _ = self._drive_rule()
            if not self._exact_target(self._drive_rung()):
                return self._pull(state, wq * self.residual_on_rule(state))
            # a Sobol' rule: r = y − P_T f with the target's part exact (the basis' driving by v), the rule
            # integrating P_T f's part alone
            return tuple(x - p for x, p in zip(self._stein_velocity(state, self.v),
                                               self._pull(state, wq * self._ptf_on_rule(state))))
        a = state[0]
        A = self._parts(state)[0]
        return self._stein_velocity(state, self.v - ((a[:, None] * A).mean(0) - self.phi0) / self.gamma)

    def _stein_velocity(self, state: tuple, R: np.ndarray) -> tuple[np.ndarray, ...]:
        """The velocity that a residual ``Σ_{α∈S} R_α h_α`` drives, by the modes' projections (Stein's form)."""
        a = state[0]
        A, dW, db, dperp = self._parts(state)
        ga = self.gamma * a
        ea, _, eb = self.eta
        return (ea * self.gamma * (A @ R), ga[:, None] * np.einsum("nkd,k->nd", dW, R) * self.gT,
                eb * ga * (db @ R), ga * (dperp @ R))

    def gram(self, state: tuple) -> np.ndarray:
        """``K_βα = E[⟨P^{1/2}∇(a A_β), P^{1/2}∇(a A_α)⟩]`` on ``S``."""
        a, _, _, C = state
        A, dW, db, dperp = self._parts(state)
        ea, ew, eb = self.eta
        u = np.concatenate([math.sqrt(ea) * A[:, :, None], (a[:, None, None] * np.sqrt(self.gT)) * dW,
                            math.sqrt(eb) * (a[:, None] * db)[:, :, None],
                            (a * np.sqrt(ew * self._perp(C, 2)))[:, None, None] * dperp[:, :, None]], 2)
        return np.tensordot(u, u, axes=([0, 2], [0, 2])) / u.shape[0]

    def step(self, state: tuple, h: float) -> tuple:
        """One RK4 step of length ``h``."""
        return rk4_step(self.velocity, state, h)

    def run(self, t_max: float, t_min: float = 0.01, h_max: float = 5.0, c: float = 1.5, max_steps: int = 20000,
            every: int = 10, stop_loss: float = 0.0, progress: Callable[[float], None] | None = None,
            integrator: str | None = None, checkpoint: str | os.PathLike[str] | None = None,
            checkpoint_every: float = 300.0) -> tuple[np.ndarray, np.ndarray, str | None]:
        """``f`` on every mode of the basis (:meth:`f_all`) at the steps' times until ``t_max`` (or a loss
        ``≤ stop_loss``), with the reason it stopped early (``None`` when it reached ``t_max``). ``progress`` is
        called with t after every step. ``integrator``: ``"rk4"`` at ``h = min(h_max, c/λ_max, max(t_min, t/4))``
        or ``"rkc"``, the damped second-order Runge–Kutta–Chebyshev method (:func:`rkc_step`) at
        ``h = min(h_max, max(t_min, t/4))`` with as many stages as ``h λ_max`` needs at RK4's margin
        (``β(s) ≥ h λ_max · 2.785/c``). Default: ``"rkc"`` for the whole residual's driving, whose constant and
        linear modes are stiff, else ``"rk4"``. Against RK4 the crossing times of ``rkc`` differ by ≤ 0.2% on four
        cases, at 1.7–3.6× less CPU (``docs/validation/whole_residual.md``).

        ``checkpoint``: a file (``.npz``) where the run keeps its place every ``checkpoint_every`` wall seconds (the
        state, the curve so far, the tail's rung and the integrator's memory), written atomically. A run given a
        checkpoint that exists goes on from it (:attr:`resumed` says from where) and returns what the run without a
        break returns; one of another flow or other settings is refused. The file is removed when the run ends
        (reaching ``t_max``, ``stop_loss`` or a stop with its reason), so the hours-long runs of the
        three-direction targets can span sessions."""
        if integrator is None:
            integrator = "rkc" if self.drive == "whole" else "rk4"
        self.integrator = integrator
        if integrator not in ("rk4", "rkc"):
            raise MeanFieldError(f"meanfield: integrator = {integrator!r} is not 'rk4' or 'rkc' (or None: rkc for "
                                 "the whole residual's driving, else rk4)")
        state, t, steps, h = self.state0, 0.0, 0, h_max
        ts, fs = [0.0], [np.zeros_like(self.v_all)]
        tail_t, tail = [0.0], [0.0]
        norm2 = float((self.v_all**2).sum())
        lam = math.nan
        self.resumed = None
        path = None if checkpoint is None else Path(checkpoint)
        if isinstance(checkpoint_every, bool) or not (isinstance(checkpoint_every, (int, float))
                                                      and checkpoint_every >= 0):
            raise MeanFieldError(f"meanfield: checkpoint_every = {checkpoint_every!r} must be a number of seconds "
                                 "≥ 0")
        key = "" if path is None else self._checkpoint_key((t_max, t_min, h_max, c, max_steps, every, stop_loss,
                                                           integrator))
        wall, kept = time.monotonic(), 0.0
        if path is not None and path.exists():
            saved = self._read_checkpoint(path, key)
            state, t, steps, h, lam = saved["state"], saved["t"], saved["steps"], saved["h"], saved["lam"]
            ts, fs, tail_t, tail = saved["ts"], saved["fs"], saved["tail_t"], saved["tail"]
            kept = saved["seconds"]
            self.resumed = {"t": t, "seconds": kept}

        def keep() -> None:   # the run's place, for a run that goes on from it
            assert path is not None
            buf = io.BytesIO()
            a, W, b, C = state
            np.savez(buf, key=np.array(key), a=a, W=W, b=b, C=C,
                     scalars=np.array([t, steps, h, lam, self._rung, self.exact_tail, kept]),
                     ts=np.array(ts), fs=np.array(fs), tail_t=np.array(tail_t), tail=np.array(tail),
                     eigvec=np.zeros(0) if self._eigvec is None else self._eigvec)
            atomic_bytes(path, buf.getvalue(), durable=False)

        def done(error: str | None) -> tuple[np.ndarray, np.ndarray, str | None]:
            if self.tail_points is not None and tail_t[-1] < ts[-1] and error is None:
                try:
                    tail.append(self.tail_loss(state))
                    tail_t.append(ts[-1])
                except MeanFieldError:
                    pass
            self.tail_path = (np.array(tail_t), np.array(tail))
            if path is not None:
                path.unlink(missing_ok=True)
            return np.array(ts), np.array(fs), error

        while t < t_max:
            if steps >= max_steps:
                return done(f"stopped after max_steps = {max_steps} RK4 steps at t = {t:.4g}; raise max_steps or "
                            "shorten t_max")
            try:
                if steps % every == 0:
                    lam = self.lam_max(state)
                if integrator == "rkc":   # the step from accuracy alone; the stages from stability
                    h = min(h_max, max(t_min, t / 4), t_max - t)
                    new = rkc_step(self.velocity, state, h, rkc_stages(h * lam * RK4_BOUND / c))
                else:
                    h = min(h_max, c / lam, max(t_min, t / 4), t_max - t)
                    new = self.step(state, h)
                f = self.f_all(new)
                # the tail is slow and smooth: evaluated where t has grown by TAIL_EVERY since the last time
                if self.tail_points is not None and t + h >= TAIL_EVERY * tail_t[-1]:
                    tail.append(self.tail_loss(new))
                    tail_t.append(t + h)
            except MeanFieldError as exc:   # a neuron left the table of means: the curve so far is kept
                return done(f"stopped at t = {t:.4g}: {exc}")
            state = new
            t += h
            steps += 1
            if not np.all(np.isfinite(f)):
                return done(f"the state became non-finite at t ≈ {t:.4g}")
            ts.append(t)
            fs.append(f)
            if progress is not None:
                progress(t)
            if stop_loss > 0 and float(((self.v_all - f) ** 2).sum()) / norm2 + tail[-1] <= stop_loss:
                break
            now = time.monotonic()
            if path is not None and now - wall >= checkpoint_every:
                kept, wall = kept + now - wall, now   # the wall seconds of every session so far
                keep()
        return done(None)

    def _checkpoint_key(self, settings: tuple) -> str:
        """A digest of everything a run's curve depends on: the init neurons, the spectrum, target, basis and
        rates, the tail's rules and policy, and :meth:`run`'s settings."""
        digest = hashlib.sha256()
        a, W, b, _ = self.state0
        for x in (a, W, b, self.xi, self.gT, self.gperp, self.v_all, self.phi0,
                  np.zeros(0) if self.perp0 is None else self.perp0):
            digest.update(np.ascontiguousarray(x, dtype=float).tobytes())
        digest.update(repr((self.gamma, self.eta, self.activation, self.drive, self.keep, self.off,
                            [str(m) for m in self.modes], self.tail_points, self.tail_sobol, self._exact_policy,
                            TAIL_EVERY, TAIL_TOL, TAIL_SOBOL_SEED, TABLE_VERSION, FLOW_VERSION,
                            tuple(float(x) if isinstance(x, (int, float)) else x for x in settings))).encode())
        return digest.hexdigest()

    def _read_checkpoint(self, path: Path, key: str) -> dict[str, Any]:
        """The run's place kept in ``path`` (:meth:`run`), checked to be this flow's with these settings."""
        try:
            with np.load(path, allow_pickle=False) as z:
                saved = {name: z[name] for name in z.files}
            if str(saved["key"]) != key:
                raise MeanFieldError(f"meanfield: the checkpoint {path} is of another flow or other run settings; "
                                     "delete it to start again, or give this run another checkpoint path")
            t, steps, h, lam, rung, exact, seconds = (float(x) for x in saved["scalars"])
        except MeanFieldError:
            raise
        except Exception as exc:   # a file cut short or not an npz: refused, not guessed at
            raise MeanFieldError(f"meanfield: the checkpoint {path} cannot be read ({type(exc).__name__}: {exc}); "
                                 "delete it to start again") from None
        self._rung, self.exact_tail = int(rung), bool(exact)
        self._eigvec = saved["eigvec"] if saved["eigvec"].size else None
        return {"state": (saved["a"], saved["W"], saved["b"], saved["C"]), "t": t, "steps": int(steps), "h": h,
                "lam": lam, "ts": list(saved["ts"]), "fs": list(saved["fs"]), "tail_t": list(saved["tail_t"]),
                "tail": list(saved["tail"]), "seconds": seconds}


def meanfield_trajectory(theory: Any, t_max: float | None = None, *, t_min: float | None = None,
                         n_points: int | None = None, m: int = 12, h_max: float = 5.0, c: float = 1.5,
                         max_steps: int = 20000, seed: int = 0, tail: bool = False,
                         drive: str = "basis", exact_tail: bool | None = None, progress: bool = False,
                         checkpoint: str | os.PathLike[str] | None = None) -> Trajectory:
    """Follow the mean-field flow of the module docstring for ``theory`` (a
    :class:`~featureode.kernel.theory.KernelTheory` of the meanfield parametrization) up to ``t_max`` (default: the
    theory's config's) and return its curve on ``n_points`` log-spaced times from ``t_min`` (plus ``t = 0``).

    The loss is ``Σ_α (v_α − f_α)²/Σ v²`` on the whole basis plus, with ``tail=True`` (the variant
    ``meanfield+tail``), the loss on the modes in the target's directions that the basis does not hold
    (:meth:`ReducedFlow.tail_loss`): the test loss of the infinite-width network, but for the modes outside T that
    the basis leaves out. With ``drive="whole"`` (the variant ``meanfield+whole``; the tail is then counted too)
    the neurons are driven by the whole residual ``y − P_T f`` on T, as the gradient flow of that loss drives them,
    not by the basis' modes only. A run that stops early (non-finite state, ``max_steps``, a tail its rules
    cannot resolve) keeps its curve with ``status.error`` set. ``exact_tail``: the tail by pair moments (relu, erf)
    from the start (True), never (False), or from where the rules first fail to certify it (None, the default;
    :meth:`ReducedFlow.ptf_square`). Bad settings, or a parametrization other than
    meanfield, raise :class:`MeanFieldError`. ``progress``: a bar on stderr over t (the whole residual's runs take
    minutes). ``checkpoint``: a file where the run keeps its place every five minutes and from which a run of the
    same theory and settings goes on (:meth:`ReducedFlow.run`; ``meta.info.resumed_from_t``).
    """
    own = dict(getattr(theory, "settings", None) or {})
    t_max = own.get("t_max") if t_max is None else t_max
    if t_max is None or not (isinstance(t_max, (int, float)) and math.isfinite(t_max) and t_max > 0):
        raise MeanFieldError(f"meanfield: t_max = {t_max!r} must be a finite time > 0 (give t_max=…, or build the "
                             "theory with kernel_theory(cfg))")
    t_min = float(t_min if t_min is not None else min(own.get("t_min", 0.01), t_max / 10))
    n_points = int(n_points if n_points is not None else own.get("n_points", 200))
    par = theory.parametrization
    if getattr(par, "name", "") != "meanfield":
        raise MeanFieldError(f"meanfield: the flow is derived for the meanfield parametrization, this theory has "
                             f"{getattr(par, 'name', par)!r}; use a closure variant (e.g. rational) instead")
    if not (isinstance(h_max, (int, float)) and h_max > 0 and isinstance(c, (int, float)) and 0 < c <= 2.5):
        raise MeanFieldError(f"meanfield: need h_max > 0 and 0 < c ≤ 2.5 (RK4 is stable for h λ_max < 2.78), got "
                             f"h_max = {h_max!r}, c = {c!r}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise MeanFieldError(f"meanfield: max_steps = {max_steps!r} must be an integer ≥ 1")
    start = time.perf_counter()
    flow = ReducedFlow.from_theory(theory, m=m, seed=seed, tail=bool(tail), drive=drive, exact_tail=exact_tail)
    name = MEANFIELD_WHOLE if flow.drive == "whole" else MEANFIELD_TAIL if tail else MEANFIELD
    from tqdm.auto import tqdm

    with tqdm(total=float(t_max), disable=not progress, unit="t", dynamic_ncols=True, desc=name, leave=False,
              bar_format="{l_bar}{bar}| t = {n:.4g}/{total:.4g} [{elapsed}<{remaining}]") as bar:
        ts, fs, error = flow.run(float(t_max), t_min=t_min, h_max=float(h_max), c=float(c), max_steps=max_steps,
                                 progress=lambda t: bar.update(t - bar.n), checkpoint=checkpoint)
    v_all = flow.v_all
    loss = flow.loss(ts, fs)
    t50, t10 = crossing_time(ts, loss, 0.5), crossing_time(ts, loss, 0.1)
    grid = np.concatenate([[0.0], np.geomspace(t_min, float(t_max), n_points)])
    grid = grid[grid <= ts[-1]]
    f_out = np.stack([np.interp(grid, ts, fs[:, j]) for j in range(v_all.size)], 1)
    info = {"variant": name, "basis": getattr(theory, "basis", None), "modes_kept": len(flow.modes),
            "modes_of_basis": len(theory.modes), "directions": len(flow.T), "neurons": 2**m, "rule": "scrambled Sobol'",
            "modes_projected": [str(theory.modes[k]) for k in flow.off],
            "modes_zero_by_symmetry": [str(x) for k, x in enumerate(theory.modes)
                                       if k not in flow.keep and k not in flow.off],
            "seed": seed, "steps": len(ts) - 1, "h_max": h_max, "c": c, "drive": flow.drive,
            "integrator": flow.integrator,
            "tail": None if flow.tail_points is None else {
                "rule": flow._rule_label(flow._drive_rung()), "exact": flow.exact_tail,
                "evaluations": int(flow.tail_path[0].size - 1), "at_end": float(flow.tail_path[1][-1])},
            "seconds": time.perf_counter() - start + (flow.resumed or {}).get("seconds", 0.0),
            "resumed_from_t": None if flow.resumed is None else flow.resumed["t"]}
    return Trajectory("ode", name, tuple(str(x) for x in theory.modes), v_all, grid, flow.loss(grid, f_out),
                      f=f_out, in_support_loss=in_support_loss(f_out, v_all), t50=t50, t10=t10,
                      meta={"info": info, "parameter_free": True, "uses_measurements": False},
                      status=Status(complete=error is None, reached_t=float(ts[-1]),
                                    error=None if error is None else f"variant {name!r}: {error}"))
