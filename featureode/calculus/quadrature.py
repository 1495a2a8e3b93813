"""Gaussian quadrature of an activation (theory §2) where no closed form exists.

* :func:`hermite_quad`: ``μ_n(b, s) = E[σ(s ξ + b) h_n(ξ)]`` by mpmath tanh-sinh quadrature at a stated precision,
  split at ``ξ = 0`` and at the kinks of σ; refuses (``ActivationError``) when the error estimate misses it.
* :func:`hermite_quad_all`: ``μ_0 … μ_N`` in one composite Gauss–Legendre pass (the CLI's many-degree path).
* :func:`composite_mean`: vectorised ``(b, s) ↦ m_k(b, s)`` over NumPy arrays by composite Gauss–Legendre
  quadrature of ``σ^{(j)}(b + s ξ) He_{k−j}(ξ) φ(ξ) / s^{k−j}`` (integration by parts).

Both take plain callables and numbers; :class:`featureode.calculus.activations.Activation` supplies them.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import mpmath
import numpy as np
import sympy as sp

__all__ = ["hermite_quad", "hermite_quad_all", "composite_mean", "XI_MAX", "PANELS"]

XI_MAX = 12.0  # quadrature window |ξ| ≤ 12 of composite_mean (the Gaussian mass beyond is below 1e-31)
PANELS = 24  # panels over the window at s ≤ 1 (width 1 in ξ)
_QUAD_CHUNK = 1 << 21  # evaluation points per block in composite_mean


def hermite_quad(f: Callable[[mpmath.mpf], mpmath.mpf], kinks: Sequence[float], n: int, b: float, s: float,
                 precision: int, name: str, error: type[Exception], growth: tuple[float, float] = (0.0, 0.0)
                 ) -> tuple[mpmath.mpf, mpmath.mpf]:
    """``(μ_n, error estimate)`` for ``σ = f`` (an mpmath function) at ``precision`` digits; ``error`` is raised
    when the estimate exceeds ``10^−precision`` relative. ``growth = (c_−, c_+)``: ``|σ(u)| ≲ e^{c_±|u|}``; the
    integrand ``e^{c s ξ} φ(ξ)`` then peaks at ``ξ = ±c s``, where the interval is split too."""
    he = sp.lambdify(sp.Symbol("x"), sp.hermite_prob(n, sp.Symbol("x")), modules="mpmath")
    with mpmath.workdps(precision + 10):
        norm = 1 / (mpmath.sqrt(2 * mpmath.pi) * mpmath.sqrt(mpmath.factorial(n)))
        # split at ξ = 0 and wherever σ(s ξ + b) may be non-smooth
        cuts = {(mpmath.mpf(c) - mpmath.mpf(b)) / s for c in kinks}
        for peak in (-growth[0] * s, growth[1] * s):
            if peak:
                cuts |= {mpmath.mpf(peak) + d for d in (-4, 0, 4)}
        pts = [-mpmath.inf, *sorted(cuts | {mpmath.mpf(0)}), mpmath.inf]
        val, err = mpmath.quad(lambda x: f(s * x + b) * he(x) * mpmath.exp(-x * x / 2), pts,
                               error=True, maxdegree=10)
        val, err = val * norm, err * norm
        tol = mpmath.mpf(10) ** (-precision)
        if err > tol * max(1, abs(val)):
            raise error(
                f"activation {name!r}: μ_{n}(b={b}, s={s}) by quadrature has estimated error "
                f"{float(err):.2g}, above the requested precision 1e-{precision}; "
                "lower the degree or the precision")
        return +val, +err  # inside the context: unary + rounds to the working precision


def composite_mean(dj: Callable[[np.ndarray], Any], p: int, kinks: np.ndarray, quad_nodes: int,
                   growth: tuple[float, float] = (0.0, 0.0)) -> Callable[[Any, Any], np.ndarray]:
    """``(b, s) ↦ s^{−p} E[σ^{(j)}(b + s ξ) He_p(ξ)]`` (``= m_{j+p}(b, s)``) with ``dj = σ^{(j)}`` vectorised.

    Composite Gauss–Legendre over ``|ξ| ≤ XI_MAX``, split at the kinks ``ξ_c = (c − b)/s`` of σ, each piece on
    panels of width at most ``1/max(s, 1)`` in ξ, i.e. at most 1 in ``u``, with ``quad_nodes`` nodes each: the
    features of σ (width O(1) in ``u``) stay resolved for every scale ``s`` (Gauss–Hermite would need O(s²) nodes).
    ``growth = (c_−, c_+)`` (``|σ(u)| ≲ e^{c_±|u|}``) widens the window to ``[−XI_MAX − c_− s, XI_MAX + c_+ s]``,
    where the tilted integrand ``e^{c s ξ} φ(ξ)`` lives, with proportionally more panels.
    """
    c_lo, c_hi = float(growth[0]), float(growth[1])
    nodes, weights = np.polynomial.legendre.leggauss(quad_nodes)
    he = np.polynomial.hermite_e.HermiteE.basis(p)

    def fn(b: Any, s: Any) -> np.ndarray:
        b, s = np.broadcast_arrays(np.asarray(b, float), np.asarray(s, float))
        shape = b.shape
        b, s = b.ravel(), s.ravel()
        out = np.empty(b.shape)
        lo_end, hi_end = XI_MAX + c_lo * s, XI_MAX + c_hi * s          # window per point
        spread = (lo_end + hi_end) / (2 * XI_MAX)
        level = np.ceil(np.log2(np.maximum(s * spread, 1.0))).astype(int)  # panels double with s
        for lv in np.unique(level):
            sel = np.flatnonzero(level == lv)
            panels = PANELS * 2**lv
            # nodes and weights of the composite rule on [0, 1]
            t = ((np.arange(panels)[:, None] + (nodes + 1) / 2) / panels).ravel()
            wt = np.tile(weights / (2 * panels), panels)
            step = max(1, _QUAD_CHUNK // ((kinks.size + 1) * t.size))
            for c in range(0, sel.size, step):
                rows = sel[c:c + step]
                # windows of |ξ| ≤ XI_MAX between the kinks of σ, each with the composite rule
                with np.errstate(divide="ignore", invalid="ignore"):
                    inner = (kinks - b[rows, None]) / s[rows, None]
                lo_r, hi_r = lo_end[rows, None], hi_end[rows, None]
                inner = np.clip(np.nan_to_num(inner, nan=0.0), -lo_r, hi_r)
                edges = np.sort(np.concatenate([-lo_r, inner, hi_r], axis=1), axis=1)
                width = np.diff(edges, axis=1)[..., None]
                xi = edges[:, :-1, None] + width * t
                u = b[rows, None, None] + s[rows, None, None] * xi
                w = width * wt * np.exp(-xi**2 / 2) / math.sqrt(2 * math.pi) * he(xi)
                out[rows] = np.sum(np.broadcast_to(dj(u), u.shape) * w, axis=(1, 2)) / s[rows] ** p
        return out.reshape(shape)

    return fn


def hermite_quad_all(f: Callable[[mpmath.mpf], mpmath.mpf], kinks: Sequence[float], n_max: int, b: float,
                     s: float, precision: int, name: str, error: type[Exception],
                     growth: tuple[float, float] = (0.0, 0.0)) -> list[tuple[mpmath.mpf, mpmath.mpf]]:
    """``[(μ_n, error estimate) for n = 0 … n_max]`` from one pass over the nodes (``h_n`` by the three-term
    recurrence at every node), for many degrees at once.

    Composite Gauss–Legendre (24 nodes per panel) on ``|ξ| ≤ L``, ``L`` such that ``φ(L) L^N/sqrt(N!)`` is below
    ``10^−(precision+10)``, split at ``ξ = 0`` and at the kinks of σ, panels of width at most ``1/(2 max(s, 1))``
    (the features of σ) and ``4/sqrt(N+1)`` (the oscillation of ``h_N``); the error estimate of each coefficient is
    its change when the panels are halved, and ``error`` is raised, naming the first degree, where it exceeds
    ``10^−precision`` relative. ``growth = (c_−, c_+)`` (``|σ(u)| ≲ e^{c_±|u|}``) extends the window to
    ``[−L − c_− s, L + c_+ s]``, where the integrand ``e^{c s ξ} φ(ξ)`` lives."""
    from mpmath.calculus.quadrature import GaussLegendre

    with mpmath.workdps(precision + 15):
        b, s = mpmath.mpf(b), mpmath.mpf(s)
        logfact = float(mpmath.log10(mpmath.factorial(n_max))) / 2
        L = mpmath.mpf(8)
        while float(mpmath.log10(mpmath.npdf(L))) + n_max * float(mpmath.log10(L)) - logfact > -(precision + 10):
            L += mpmath.mpf(1) / 2
        lo_end, hi_end = -L - growth[0] * s, L + growth[1] * s
        cuts = sorted({lo_end, hi_end, mpmath.mpf(0)} | {(mpmath.mpf(c) - b) / s for c in kinks
                                                          if lo_end < (mpmath.mpf(c) - b) / s < hi_end})
        nodes = GaussLegendre(mpmath.mp).calc_nodes(4, mpmath.mp.prec)  # 24 nodes on [−1, 1]
        sq = [mpmath.sqrt(n) for n in range(n_max + 2)]
        width = min(1 / (2 * max(s, 1)), 4 / mpmath.sqrt(n_max + 1))

        def run(w: mpmath.mpf) -> list[mpmath.mpf]:
            out = [mpmath.mpf(0)] * (n_max + 1)
            for lo, hi in zip(cuts[:-1], cuts[1:]):
                panels = int(mpmath.ceil((hi - lo) / w))
                h = (hi - lo) / panels
                for p in range(panels):
                    mid = lo + (p + mpmath.mpf(1) / 2) * h
                    for x, wt in nodes:
                        xi = mid + x * h / 2
                        val = f(s * xi + b) * mpmath.npdf(xi) * wt * h / 2
                        prev, cur = mpmath.mpf(0), mpmath.mpf(1)
                        for n in range(n_max + 1):
                            out[n] += val * cur
                            prev, cur = cur, (xi * cur - sq[n] * prev) / sq[n + 1]
            return out

        coarse, fine = run(width), run(width / 2)
        tol = mpmath.mpf(10) ** (-precision)
        res = []
        for n, (c, v) in enumerate(zip(coarse, fine)):
            err = abs(v - c)
            if err > tol * max(1, abs(v)):
                raise error(f"activation {name!r}: μ_{n}(b={float(b)}, s={float(s)}) by quadrature has estimated "
                            f"error {float(err):.2g}, above the requested precision 1e-{precision}; lower the "
                            "degree or the precision")
            res.append((+v, +err))
        return res
