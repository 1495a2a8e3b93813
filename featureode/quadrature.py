"""Gaussian quadrature of an activation (DESIGN §2) where no closed form exists.

* :func:`hermite_quad`: ``μ_n(b, s) = E[σ(s ξ + b) h_n(ξ)]`` by mpmath tanh-sinh quadrature at a stated precision,
  split at ``ξ = 0`` and at the kinks of σ; refuses (``ActivationError``) when the error estimate misses it.
* :func:`composite_mean`: vectorised ``(b, s) ↦ m_k(b, s)`` over NumPy arrays by composite Gauss–Legendre
  quadrature of ``σ^{(j)}(b + s ξ) He_{k−j}(ξ) φ(ξ) / s^{k−j}`` (integration by parts).

Both take plain callables and numbers; :class:`featureode.activations.Activation` supplies them.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import mpmath
import numpy as np
import sympy as sp

__all__ = ["hermite_quad", "composite_mean", "XI_MAX", "PANELS"]

XI_MAX = 12.0  # quadrature window |ξ| ≤ 12 of composite_mean (the Gaussian mass beyond is below 1e-31)
PANELS = 24  # panels over the window at s ≤ 1 (width 1 in ξ)
_QUAD_CHUNK = 1 << 21  # evaluation points per block in composite_mean


def hermite_quad(f: Callable[[mpmath.mpf], mpmath.mpf], kinks: Sequence[float], n: int, b: float, s: float,
                 precision: int, name: str, error: type[Exception]) -> tuple[mpmath.mpf, mpmath.mpf]:
    """``(μ_n, error estimate)`` for ``σ = f`` (an mpmath function) at ``precision`` digits; ``error`` is raised
    when the estimate exceeds ``10^−precision`` relative."""
    he = sp.lambdify(sp.Symbol("x"), sp.hermite_prob(n, sp.Symbol("x")), modules="mpmath")
    with mpmath.workdps(precision + 10):
        norm = 1 / (mpmath.sqrt(2 * mpmath.pi) * mpmath.sqrt(mpmath.factorial(n)))
        # split at ξ = 0 and wherever σ(s ξ + b) may be non-smooth
        cuts = {(mpmath.mpf(c) - mpmath.mpf(b)) / s for c in kinks}
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


def composite_mean(dj: Callable[[np.ndarray], Any], p: int, kinks: np.ndarray, quad_nodes: int
                   ) -> Callable[[Any, Any], np.ndarray]:
    """``(b, s) ↦ s^{−p} E[σ^{(j)}(b + s ξ) He_p(ξ)]`` (``= m_{j+p}(b, s)``) with ``dj = σ^{(j)}`` vectorised.

    Composite Gauss–Legendre over ``|ξ| ≤ XI_MAX``, split at the kinks ``ξ_c = (c − b)/s`` of σ, each piece on
    panels of width at most ``1/max(s, 1)`` in ξ, i.e. at most 1 in ``u``, with ``quad_nodes`` nodes each: the
    features of σ (width O(1) in ``u``) stay resolved for every scale ``s`` (Gauss–Hermite would need O(s²) nodes).
    """
    nodes, weights = np.polynomial.legendre.leggauss(quad_nodes)
    he = np.polynomial.hermite_e.HermiteE.basis(p)

    def fn(b: Any, s: Any) -> np.ndarray:
        b, s = np.broadcast_arrays(np.asarray(b, float), np.asarray(s, float))
        shape = b.shape
        b, s = b.ravel(), s.ravel()
        out = np.empty(b.shape)
        level = np.ceil(np.log2(np.maximum(s, 1.0))).astype(int)  # panels double with s
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
                inner = np.clip(np.nan_to_num(inner, nan=0.0), -XI_MAX, XI_MAX)
                ends = np.full((rows.size, 1), XI_MAX)
                edges = np.sort(np.concatenate([-ends, inner, ends], axis=1), axis=1)
                width = np.diff(edges, axis=1)[..., None]
                xi = edges[:, :-1, None] + width * t
                u = b[rows, None, None] + s[rows, None, None] * xi
                w = width * wt * np.exp(-xi**2 / 2) / math.sqrt(2 * math.pi) * he(xi)
                out[rows] = np.sum(np.broadcast_to(dj(u), u.shape) * w, axis=(1, 2)) / s[rows] ** p
        return out.reshape(shape)

    return fn
