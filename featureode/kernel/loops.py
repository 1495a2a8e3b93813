"""Compiled loops of the kernel layer: the Talbot contour factors and sums, and the Talbot densities of the laws of
``|ŵ|²`` (:mod:`featureode.kernel.initlaw`) and of the tilted laws of the second-order growth
(:mod:`featureode.kernel.growth`), many γ per pass; the window sums of that growth's averages; and the bicubic
B-spline surface that the mean-field flow reads its tables of means from (:class:`featureode.ode.meanfield.MeanTable`).

Two backends with one interface, chosen from :data:`BACKENDS`: each loop is plain Python written for numba
(``_contour_factors``, ``_contour_sums``, ``_talbot_densities``, ``_tilted_densities``, ``_window_sums``) with a
NumPy twin of the same arguments (``_contour_factors_numpy``, ``_contour_sums_numpy``, ``_talbot_densities_numpy``,
``_tilted_densities_numpy``, ``_window_sums_numpy``; equal to round-off, tested against each other). A process keeps
one backend per loop for its whole life, chosen at the loop's first call, so that its numbers do not depend on how
much work came before (cached and fresh computations stay bitwise equal): numba where its machine code is in numba's
cache (a stamp in the featureode cache says so, written after its first compiled run) or where an earlier process
asked for it, else the NumPy twin. A process that gives the twin more than :data:`COMPILE_AFTER` laws asks for it (a
second stamp), and the next process compiles it (≈ 1–3 s, once per install, announced on stderr). So a single cold
solve pays no compile, and repeated work pays it once. The loops of :data:`COMPILED_AT_ONCE` skip the twin: their
callers run for minutes, where a compile of about a second is always worth it. The environment variable
``FEATUREODE_KERNEL_LOOPS`` = ``numba`` | ``numpy`` forces one backend. No fast-math: the same IEEE operations as
the NumPy expressions, in another order (a complex reciprocal as ``conj(w)/|w|²`` in the numba loops).
"""
from __future__ import annotations

import functools
import inspect
import math
import os
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["talbot_densities", "tilted_densities", "contour_factors", "contour_sums", "window_sums", "bspline_surface",
           "bspline_rows", "BACKENDS", "COMPILE_AFTER", "COMPILED_AT_ONCE", "backend"]

#: the backends of every loop
BACKENDS = ("numba", "numpy")
#: laws a process gives a loop's NumPy twin before it asks the next process to compile the numba code (≈ 0.3–1 s
#: of NumPy work)
COMPILE_AFTER = 4000
#: loops compiled at their first call in every process (no NumPy twin first): their callers run for minutes
COMPILED_AT_ONCE = frozenset({"_bspline_surface", "_bspline_rows"})


def _talbot_densities(base: np.ndarray, pbase: np.ndarray, recip: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                      dims: np.ndarray, exps: np.ndarray, starts: np.ndarray, wcoef: np.ndarray, norm: np.ndarray,
                      out: np.ndarray) -> None:
    """``out[k, r] = Re Σ_c base[r, c] Π_f recip[dims_f, r, c]^{exps_f}`` for rows ``lo_k ≤ r < hi_k`` (factors
    ``f`` of law ``k``: ``starts_k ≤ f < starts_{k+1}``), times ``(pbase[r, c] + Σ_f wcoef_f recip[dims_f, r, c]) /
    norm_k`` inside the sum when ``norm_k ≠ 0`` (the factor ``P``). Real and imaginary parts are kept in separate
    buffers over the contour so that the inner loops vectorise."""
    C = base.shape[1]
    tr = np.empty(C)
    ti = np.empty(C)
    er = np.empty(C)
    ei = np.empty(C)
    for k in range(lo.size):
        f0, f1 = starts[k], starts[k + 1]
        nk = norm[k]
        for r in range(lo[k], hi[k]):
            for c in range(C):
                tr[c] = base[r, c].real
                ti[c] = base[r, c].imag
            for f in range(f0, f1):
                row = recip[dims[f], r]
                for _ in range(exps[f]):
                    for c in range(C):
                        xr = row[c].real
                        xi = row[c].imag
                        a = tr[c] * xr - ti[c] * xi
                        ti[c] = tr[c] * xi + ti[c] * xr
                        tr[c] = a
            acc = 0.0
            if nk != 0.0:
                for c in range(C):
                    er[c] = pbase[r, c].real
                    ei[c] = pbase[r, c].imag
                for f in range(f0, f1):
                    row = recip[dims[f], r]
                    w = wcoef[f]
                    for c in range(C):
                        er[c] += w * row[c].real
                        ei[c] += w * row[c].imag
                for c in range(C):
                    acc += tr[c] * er[c] - ti[c] * ei[c]
                acc /= nk
            else:
                for c in range(C):
                    acc += tr[c]
            out[k, r] = acc


def _contour_factors(z: np.ndarray, g: np.ndarray, h: np.ndarray, shift: np.ndarray, base: np.ndarray,
                     psum: np.ndarray) -> None:
    """``base = e^{shift} Π_i (1 + 2 z g_i)^{−1/2}`` (principal roots) and ``psum = Σ_i h_i g_i/(1 + 2 z g_i)`` at
    every point of ``z`` (rows × contour, closed upper half-plane, ``g_i > 0``): the running product with its
    half-turns counted of the NumPy twin :func:`_contour_factors_numpy` (which says why it is exact), point by point
    in real arithmetic (``1/w = conj(w)/|w|²``; the scale check on ``|Re| + |Im|``: equal to the twin to
    round-off)."""
    R, C = z.shape
    for r in range(R):
        for c in range(C):
            zr = z[r, c].real
            zi = z[r, c].imag
            pr = 1.0
            pi = 0.0
            sr = 0.0
            si = 0.0
            turns = 0.0
            negative = False
            log_scale = 0.0
            for n in range(g.size):
                ar = 1.0 + 2.0 * g[n] * zr   # the factor 1 + 2 z g_n, in real arithmetic
                ai = 2.0 * g[n] * zi
                x = pr * ar - pi * ai
                pi = pr * ai + pi * ar
                pr = x
                f = h[n] * g[n] / (ar * ar + ai * ai)   # h_n g_n / (1 + 2 z g_n) = f · conj(1 + 2 z g_n)
                sr += f * ar
                si -= f * ai
                now = pi < 0
                if now != negative:
                    turns += 1.0
                negative = now
                if n % 4 == 3:
                    size = abs(pr) + abs(pi)
                    if size > 1e60 or size < 1e-60:   # factors below 1 in modulus (Re z < 0) shrink it
                        log_scale += np.log(size)
                        pr /= size
                        pi /= size
            # p = |p| e^{ia}, a = arg p in (−π, π]; θ = a + kπ with k even (the twin's docstring), so
            # p^{−1/2} = |p|^{−1/2} (−1)^{k/2} conj(e^{ia/2}), and e^{ia/2} is the principal root of the unit vector
            # p/|p| (the stable half-angle pair): no arctan2, exp, cos or sin per point
            m = np.hypot(pr, pi)
            ur = pr / m
            ui = pi / m
            if ur >= 0.0:
                cr = math.sqrt(0.5 * (1.0 + ur))
                ci = ui / (2.0 * cr)
            else:
                ci = math.copysign(math.sqrt(0.5 * (1.0 - ur)), ui)
                cr = ui / (2.0 * ci)
            k = turns
            if turns % 2 == 1:   # a > 0: arctan2's sign, −0 included
                k = turns - 1 if ui > 0.0 or (ui == 0.0 and ur < 0.0 and math.copysign(1.0, ui) > 0.0) \
                    else turns + 1
            mag = math.exp(shift[r, c]) / math.sqrt(m) if log_scale == 0.0 else \
                math.exp(shift[r, c] - 0.5 * (math.log(m) + log_scale))
            if int(k) // 2 % 2 == 1:
                mag = -mag
            base[r, c] = complex(mag * cr, -mag * ci)
            psum[r, c] = complex(sr, si)


def _contour_sums(z: np.ndarray, gpow: np.ndarray, g: np.ndarray, ns: np.ndarray, out: np.ndarray) -> None:
    """``out[q] = Σ_i gpow[q, i] (1 + 2 z g_i)^{−ns_q}`` at every point of ``z`` (rows × contour), ``ns``
    ascending: per point and direction the reciprocal ``1/w = conj(w)/|w|²`` once and its powers by repeated
    products, in real arithmetic. A row's contour points are one vector (the innermost loops run over them, in
    separate real and imaginary buffers, so they vectorise); each point's operations and their order are those of
    a point-by-point loop."""
    R, C = z.shape
    Qn = ns.size
    zr = np.empty(C)
    zi = np.empty(C)
    wr = np.empty(C)
    wi = np.empty(C)
    pr = np.empty(C)
    pi = np.empty(C)
    sr = np.empty((Qn, C))   # the sums of one row, kept apart from the strided output
    si = np.empty((Qn, C))
    for r in range(R):
        for c in range(C):
            zr[c] = z[r, c].real
            zi[c] = z[r, c].imag
        sr[:, :] = 0.0
        si[:, :] = 0.0
        for i in range(g.size):
            g2 = 2.0 * g[i]
            for c in range(C):
                ar = 1.0 + g2 * zr[c]
                ai = g2 * zi[c]
                inv = 1.0 / (ar * ar + ai * ai)
                wr[c] = ar * inv
                wi[c] = -ai * inv
                pr[c] = wr[c]
                pi[c] = wi[c]
            k = 1
            for q in range(Qn):
                while k < ns[q]:
                    for c in range(C):
                        x = pr[c] * wr[c] - pi[c] * wi[c]
                        pi[c] = pr[c] * wi[c] + pi[c] * wr[c]
                        pr[c] = x
                    k += 1
                f = gpow[q, i]
                for c in range(C):
                    sr[q, c] += f * pr[c]
                    si[q, c] += f * pi[c]
        for q in range(Qn):
            for c in range(C):
                out[q, r, c] = complex(sr[q, c], si[q, c])


_ANNOUNCED: set[str] = set()
_NUMPY_LAWS: dict[str, int] = {}      # laws given to each NumPy twin in this process
_READY: set[str] = set()     # loops whose 'wanted' stamp this process wrote


#: helpers the loops call, written for numba like them: :func:`_compiled` compiles each and hands it to the loops
HELPERS = ("_span_basis",)


@functools.lru_cache(maxsize=None)
def _compiled(name: str) -> Any:   # a numba dispatcher (callable, with .stats)
    """Loop (or helper) ``name`` compiled by numba. A loop sees every one of :data:`HELPERS` compiled: it is
    compiled as a copy of itself whose globals name the helpers' dispatchers (the module keeps the plain Python
    functions, so importing it needs no numba)."""
    import types

    import numba

    fn = globals()[name]
    if name not in HELPERS:
        scope = dict(fn.__globals__, **{helper: _compiled(helper) for helper in HELPERS})
        clone = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
        clone.__qualname__, clone.__doc__ = fn.__qualname__, fn.__doc__
        fn = clone
    return numba.njit(cache=True, fastmath=False, boundscheck=False, nogil=True)(fn)


@functools.lru_cache(maxsize=None)
def _stamp(name: str, kind: str = "ready") -> Path:
    """The file that says loop ``name``'s machine code is in numba's cache (``ready``) or that a process asked for it
    (``wanted``); per source text and numba version."""
    import hashlib

    from featureode.core.cache import cache_dir

    text = "".join(inspect.getsource(globals()[part]) for part in (name, *HELPERS))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return cache_dir() / f"kernel_loop{name}_{digest}.{kind}-{metadata.version('numba')}"


_CHOSEN: dict[str, str] = {}          # the backend of each loop in this process, fixed at its first call


def backend(name: str) -> str:
    """The backend loop ``name`` runs on in this process (module docstring)."""
    forced = os.environ.get("FEATUREODE_KERNEL_LOOPS", "").strip().lower()
    if forced:
        if forced not in BACKENDS:
            raise ValueError(f"FEATUREODE_KERNEL_LOOPS must be one of {', '.join(BACKENDS)} (or unset), got "
                             f"{forced!r}")
        return forced
    chosen = _CHOSEN.get(name)
    if chosen is None:
        cached = _stamp(name).exists() or _stamp(name, "wanted").exists()
        chosen = _CHOSEN[name] = "numba" if cached or name in COMPILED_AT_ONCE else "numpy"
    return chosen


def _touch(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    except OSError:   # a read-only cache: the next process decides again
        pass


def _call(name: str, laws: int, *args: Any) -> None:
    """Run loop ``name`` on its backend (:func:`backend`); a compile (a numba cache miss) says so on stderr, once."""
    if backend(name) == "numpy":
        _NUMPY_LAWS[name] = _NUMPY_LAWS.get(name, 0) + laws
        globals()[name + "_numpy"](*args)
        if _NUMPY_LAWS[name] > COMPILE_AFTER and name not in _READY:   # the next process compiles
            _touch(_stamp(name, "wanted"))
            _READY.add(name)
        return
    fn = _compiled(name)
    if name in _ANNOUNCED:
        fn(*args)
        return
    start = time.perf_counter()
    fn(*args)
    _ANNOUNCED.add(name)
    if fn.stats.cache_misses:
        print(f"featureode: compiled the kernel loop {name.lstrip('_')} with numba in "
              f"{time.perf_counter() - start:.1f} s (once; cached in {fn.stats.cache_path})", file=sys.stderr,
              flush=True)
    _touch(_stamp(name))


def _talbot_densities_numpy(base: np.ndarray, pbase: np.ndarray, recip: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                            dims: np.ndarray, exps: np.ndarray, starts: np.ndarray, wcoef: np.ndarray,
                            norm: np.ndarray, out: np.ndarray) -> None:
    """The NumPy twin of :func:`_talbot_densities` (one law at a time, the contour as arrays)."""
    for k in range(lo.size):
        rows = slice(int(lo[k]), int(hi[k]))
        terms = base[rows]
        for f in range(starts[k], starts[k + 1]):
            for _ in range(exps[f]):   # repeated products: NumPy's complex power is ~20× slower
                terms = terms * recip[dims[f], rows]
        if norm[k] != 0.0:
            extra = pbase[rows]
            for f in range(starts[k], starts[k + 1]):
                extra = extra + wcoef[f] * recip[dims[f], rows]
            out[k, rows] = np.sum(terms * extra, axis=1).real / norm[k]
        else:
            out[k, rows] = np.sum(terms, axis=1).real


def _tilted_densities_numpy(base: np.ndarray, recip: np.ndarray, csum: np.ndarray, row0: np.ndarray,
                            row1: np.ndarray, fstart: np.ndarray, fdim: np.ndarray, fexp: np.ndarray,
                            qstart: np.ndarray, qsum: np.ndarray, qpow: np.ndarray, qscale: np.ndarray,
                            qcoef: np.ndarray, istart: np.ndarray, iop: np.ndarray, iarg: np.ndarray,
                            nreg: np.ndarray, jstart: np.ndarray, jreg: np.ndarray, jlo: np.ndarray, jhi: np.ndarray,
                            out: np.ndarray) -> None:
    """The NumPy twin of :func:`_tilted_densities` (one law at a time, rows × contour as arrays)."""
    for g in range(row0.size):
        L, H = int(row0[g]), int(row1[g])
        f0, f1 = int(fstart[g]), int(fstart[g + 1])
        terms = base[L:H]
        for f in range(f0, f1):
            for _ in range(fexp[f]):
                terms = terms * recip[fdim[f], L:H]
        reg: list = [None] * int(nreg[g])
        for q in range(qstart[g], qstart[g + 1]):
            val = csum[qsum[q], L:H]
            for f in range(f0, f1):
                power = recip[fdim[f], L:H]
                for _ in range(qpow[q] - 1):
                    power = power * recip[fdim[f], L:H]
                val = val + qcoef[q, f - f0] * power
            reg[q - qstart[g]] = val * qscale[q]
        for n in range(istart[g], istart[g + 1]):
            d, a, b = iarg[n]
            reg[d] = reg[a] * reg[b] if iop[n] == 0 else reg[a] + reg[b]
        for j in range(jstart[g], jstart[g + 1]):
            lo, hi = int(jlo[j]), int(jhi[j])
            out[j, lo:hi] = np.einsum("rc,rc->r", terms[lo - L: hi - L], reg[jreg[j]][lo - L: hi - L]).real


def _contour_factors_numpy(z: np.ndarray, g: np.ndarray, h: np.ndarray, shift: np.ndarray, base: np.ndarray,
                           psum: np.ndarray) -> None:
    """The NumPy twin of :func:`_contour_factors` (every point at once, one direction at a time): ``base =
    e^{shift} Π_i (1 + 2 z g_i)^{−1/2}`` (principal roots) and ``psum = Σ_i h_i g_i/(1 + 2 z g_i)`` for ``z`` in
    the closed upper half-plane, ``g_i > 0``. The product without a logarithm per factor: every factor has its argument in
    ``[0, π)``, so the argument ``θ`` of the running product grows by less than a half-turn per factor and its
    half-turns are counted by the sign changes of the product's imaginary part; then
    ``Π_i (…)^{−1/2} = |p|^{−1/2} e^{−iθ/2}`` with ``θ = arg p + (half-turns)·π`` (the sum of the factors' principal
    arguments, as ``exp(−½ Σ_i log(1 + 2 z g_i))`` has it; ~3× closer to an extended-precision reference than that
    sum, and ~5× faster). The product is rescaled every four factors once above 1e60 (a factor is at most ~1e27 on
    the grid: ``|z| ≤ 230/Q``, ``Q ≥ 1e-24 Σ_i g_i``) or below 1e-60 (factors of modulus below 1 where
    ``Re z < 0``: at d = 10 000 the product reaches 1e-560), its scale kept as a logarithm, which ``shift`` (the
    caller's ``Re(Q z)``, whose exponential alone can underflow where the product's root overflows) joins before
    the one exponential."""
    p = np.ones(z.shape, dtype=complex)
    psum[...] = 0.0
    turns = np.zeros(z.shape)
    negative = np.zeros(z.shape, dtype=bool)
    log_scale = np.zeros(z.shape)
    for n, (gi, hi) in enumerate(zip(g, h)):
        one = 1 + 2 * gi * z
        p *= one
        psum += hi * gi / one
        now = p.imag < 0
        turns += now != negative
        negative = now
        if n % 4 == 3:
            size = np.abs(p)
            big = (size > 1e60) | (size < 1e-60)   # factors below 1 in modulus (Re z < 0) shrink it
            if big.any():
                log_scale[big] += np.log(size[big])
                p[big] /= size[big]
    a = np.angle(p)   # in (−π, π]: θ − a is an even number of half-turns
    odd = turns % 2 == 1
    theta = a + np.where(odd, np.where(a > 0, turns - 1, turns + 1), turns) * math.pi
    base[...] = np.exp(shift - 0.5 * (np.log(np.abs(p)) + log_scale) - 0.5j * theta)


def contour_factors(z: np.ndarray, g: np.ndarray, h: np.ndarray,
                    shift: "np.ndarray | None" = None) -> tuple[np.ndarray, np.ndarray]:
    """``(e^{shift} Π_i (1 + 2 z g_i)^{−1/2}, Σ_i h_i g_i/(1 + 2 z g_i))`` at every point of ``z``
    (:func:`_contour_factors`; ``shift`` real, ``z``'s shape, 0 by default)."""
    base = np.empty(z.shape, dtype=complex)
    psum = np.empty(z.shape, dtype=complex)
    shift = np.zeros(z.shape) if shift is None else np.ascontiguousarray(shift, dtype=float)
    _call("_contour_factors", z.shape[0] // 10, z, np.ascontiguousarray(g, dtype=float),
          np.ascontiguousarray(h, dtype=float), shift, base, psum)
    return base, psum


def _contour_sums_numpy(z: np.ndarray, gpow: np.ndarray, g: np.ndarray, ns: np.ndarray, out: np.ndarray) -> None:
    """The NumPy twin of :func:`_contour_sums`: the reciprocals of every direction at once, their powers by repeated
    multiplication (NumPy's complex power is ~20× slower), contracted with ``gpow``."""
    inv = 1 / (1 + 2 * g[:, None, None] * z[None])
    power, k = inv, 1
    for q in range(ns.size):
        while k < ns[q]:
            power = power * inv
            k += 1
        out[q] = np.tensordot(gpow[q], power, axes=1)


def contour_sums(z: np.ndarray, g: np.ndarray, pairs: "list[tuple[int, int]]") -> np.ndarray:
    """``Σ_i g_i^e (1 + 2 z g_i)^{−n}`` for each ``(e, n)`` of ``pairs`` at every point of ``z``
    (``len(pairs) × rows × contour``; :func:`_contour_sums`)."""
    g = np.ascontiguousarray(g, dtype=float)
    order = sorted(range(len(pairs)), key=lambda q: pairs[q][1])
    ns = np.array([pairs[q][1] for q in order], dtype=np.int64)
    gpow = np.array([g ** pairs[q][0] for q in order]).reshape(len(order), g.size)
    sums = np.empty((len(pairs),) + z.shape, dtype=complex)
    _call("_contour_sums", len(pairs), np.ascontiguousarray(z), gpow, g, ns, sums)
    out = np.empty_like(sums)
    out[order] = sums
    return out


def talbot_densities(base: np.ndarray, pbase: np.ndarray, recip: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                     dims: np.ndarray, exps: np.ndarray, starts: np.ndarray, wcoef: np.ndarray,
                     norm: np.ndarray) -> np.ndarray:
    """The densities of :func:`_talbot_densities` (shape ``len(lo) × rows``; 0 outside each ``lo_k:hi_k``)."""
    out = np.zeros((lo.size, base.shape[0]))
    _call("_talbot_densities", lo.size, base, pbase, recip, lo, hi, dims, exps, starts, wcoef, norm, out)
    return out


def _tilted_densities(base: np.ndarray, recip: np.ndarray, csum: np.ndarray, row0: np.ndarray, row1: np.ndarray,
                      fstart: np.ndarray, fdim: np.ndarray, fexp: np.ndarray, qstart: np.ndarray, qsum: np.ndarray,
                      qpow: np.ndarray, qscale: np.ndarray, qcoef: np.ndarray, istart: np.ndarray, iop: np.ndarray,
                      iarg: np.ndarray, nreg: np.ndarray, jstart: np.ndarray, jreg: np.ndarray, jlo: np.ndarray,
                      jhi: np.ndarray, out: np.ndarray) -> None:
    """The densities of the tilted laws ``ν_{γ,K}`` (:class:`featureode.kernel.growth._TiltedLaws`) of many γ.

    For law ``g`` (rows ``row0_g ≤ r < row1_g``), at each row and contour point: the product
    ``t = base Π_f recip[fdim_f]^{fexp_f}`` over its factors ``f``; its cumulants ``κ_q = qscale_q (csum[qsum_q] +
    Σ_f qcoef[q, f] recip[fdim_f]^{qpow_q})`` (registers ``0 … ``, one per ``q``); then its program, instructions
    ``(op, dst, a, b)`` (``op`` 0: ``dst = a·b``, 1: ``dst = a + b``) over registers; each job ``j`` of the law adds
    ``Re Σ_c t · reg[jreg_j]`` to ``out[j, r]`` for ``jlo_j ≤ r < jhi_j``. Real and imaginary parts are kept apart
    over the contour so that the inner loops vectorise."""
    C = base.shape[1]
    R = int(nreg.max()) if nreg.size else 1
    rr = np.empty((R, C))
    ri = np.empty((R, C))
    tr = np.empty(C)
    ti = np.empty(C)
    pr = np.empty(C)
    pi = np.empty(C)
    for g in range(row0.size):
        f0, f1 = fstart[g], fstart[g + 1]
        q0, q1 = qstart[g], qstart[g + 1]
        for r in range(row0[g], row1[g]):
            for c in range(C):
                tr[c] = base[r, c].real
                ti[c] = base[r, c].imag
            for f in range(f0, f1):
                row = recip[fdim[f], r]
                for _ in range(fexp[f]):
                    for c in range(C):
                        xr = row[c].real
                        xi = row[c].imag
                        a = tr[c] * xr - ti[c] * xi
                        ti[c] = tr[c] * xi + ti[c] * xr
                        tr[c] = a
            for q in range(q0, q1):
                k = q - q0
                src = csum[qsum[q], r]
                for c in range(C):
                    rr[k, c] = src[c].real
                    ri[k, c] = src[c].imag
                for f in range(f0, f1):
                    w = qcoef[q, f - f0]
                    row = recip[fdim[f], r]
                    for c in range(C):
                        pr[c] = row[c].real
                        pi[c] = row[c].imag
                    for _ in range(qpow[q] - 1):
                        for c in range(C):
                            xr = row[c].real
                            xi = row[c].imag
                            a = pr[c] * xr - pi[c] * xi
                            pi[c] = pr[c] * xi + pi[c] * xr
                            pr[c] = a
                    for c in range(C):
                        rr[k, c] += w * pr[c]
                        ri[k, c] += w * pi[c]
                s = qscale[q]
                if s != 1.0:
                    for c in range(C):
                        rr[k, c] *= s
                        ri[k, c] *= s
            for n in range(istart[g], istart[g + 1]):
                d, a, b = iarg[n, 0], iarg[n, 1], iarg[n, 2]
                if iop[n] == 0:
                    for c in range(C):
                        x = rr[a, c] * rr[b, c] - ri[a, c] * ri[b, c]
                        ri[d, c] = rr[a, c] * ri[b, c] + ri[a, c] * rr[b, c]
                        rr[d, c] = x
                else:
                    for c in range(C):
                        rr[d, c] = rr[a, c] + rr[b, c]
                        ri[d, c] = ri[a, c] + ri[b, c]
            for j in range(jstart[g], jstart[g + 1]):
                if jlo[j] <= r < jhi[j]:
                    k = jreg[j]
                    acc = 0.0
                    for c in range(C):
                        acc += tr[c] * rr[k, c] - ti[c] * ri[k, c]
                    out[j, r] = acc


def tilted_densities(base: np.ndarray, recip: np.ndarray, csum: np.ndarray, row0: np.ndarray, row1: np.ndarray,
                     fstart: np.ndarray, fdim: np.ndarray, fexp: np.ndarray, qstart: np.ndarray, qsum: np.ndarray,
                     qpow: np.ndarray, qscale: np.ndarray, qcoef: np.ndarray, istart: np.ndarray, iop: np.ndarray,
                     iarg: np.ndarray, nreg: np.ndarray, jstart: np.ndarray, jreg: np.ndarray, jlo: np.ndarray,
                     jhi: np.ndarray) -> np.ndarray:
    """The densities of :func:`_tilted_densities` (shape ``jobs × rows``; 0 outside each job's ``lo:hi``)."""
    out = np.zeros((jreg.size, base.shape[0]))
    _call("_tilted_densities", jreg.size, base, recip, csum, row0, row1, fstart, fdim, fexp, qstart, qsum, qpow,
          qscale, qcoef, istart, iop, iarg, nreg, jstart, jreg, jlo, jhi, out)
    return out


def _window_sums(P: np.ndarray, dense: np.ndarray, row: np.ndarray, col: np.ndarray, start: np.ndarray,
                 stop: np.ndarray, offset: np.ndarray, out: np.ndarray) -> None:
    """``out[p] = Σ_{r ∈ [start_p, stop_p)} P[row_p, r] dense[offset_p + r − start_p]`` for each pair ``p``: the
    averages of the second-order growth (:meth:`featureode.kernel.growth.Averager.evaluate`), each one sum over its
    own law's window of rows, in row order (its value depends on that window alone, not on the batch)."""
    for p in range(out.size):
        j, a, o = row[p], start[p], offset[p] - start[p]
        acc = 0.0
        for r in range(a, stop[p]):
            acc += P[j, r] * dense[o + r]
        out[p] = acc


def _window_sums_numpy(P: np.ndarray, dense: np.ndarray, row: np.ndarray, col: np.ndarray, start: np.ndarray,
                       stop: np.ndarray, offset: np.ndarray, out: np.ndarray) -> None:
    """The NumPy twin of :func:`_window_sums`: the pairs of one window at a time (consecutive pairs with the same
    ``col`` share their window), each summed in row order like the numba loop (a running sum, ``np.cumsum``, so
    bitwise equal to it: a sum with SIMD lanes, as ``einsum``'s, would depend on where the window starts)."""
    cuts = np.flatnonzero(np.diff(col)) + 1
    for first, last in zip(np.r_[0, cuts].tolist(), np.r_[cuts, out.size].tolist()):
        a, b, o = int(start[first]), int(stop[first]), int(offset[first])
        if b > a:
            out[first:last] = np.cumsum(P[row[first:last], a:b] * dense[o:o + b - a], axis=1)[:, -1]


def window_sums(P: np.ndarray, dense: np.ndarray, row: np.ndarray, col: np.ndarray, start: np.ndarray,
                stop: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """The sums of :func:`_window_sums`, one per pair (``col``: the window of each pair, pairs of one window
    consecutive)."""
    out = np.zeros(row.size)
    if row.size:
        _call("_window_sums", int(np.count_nonzero(np.diff(col))) + 1, P, dense, row, col, start, stop, offset, out)
    return out


def _span_basis(t: np.ndarray, n: int, v: float, basis: np.ndarray, left: np.ndarray, right: np.ndarray) -> int:
    """The knot interval ``[t[span], t[span + 1])`` holding ``v`` (bisection over ``t[3..n]``; ``v ≥ t[n]`` belongs
    to the last interval) and the four cubic B-splines nonzero there, written into ``basis`` by the Cox–de Boor
    recurrence (``left``, ``right``: scratch of length 4). Returns ``span``. For the loops (:data:`HELPERS`)."""
    if v >= t[n]:
        span = n - 1
    else:
        lo = 3
        hi = n
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if v < t[mid]:
                hi = mid
            else:
                lo = mid
        span = lo
    basis[0] = 1.0
    for j in range(1, 4):
        left[j] = v - t[span + 1 - j]
        right[j] = t[span + j] - v
        saved = 0.0
        for r in range(j):
            temp = basis[r] / (right[r + 1] + left[j - r])
            basis[r] = saved + right[r + 1] * temp
            saved = left[j - r] * temp
        basis[j] = saved
    return span


def _bspline_surface(tx: np.ndarray, ty: np.ndarray, coefs: np.ndarray, x: np.ndarray, y: np.ndarray,
                     out: np.ndarray) -> None:
    """``out[k, p] = Σ_ij coefs[k, i, j] B_i(x_p) B_j(y_p)``: bicubic tensor-product B-splines on the knots ``tx``,
    ``ty`` (FITPACK's layout: four equal knots at each end, as in ``RectBivariateSpline.tck``), one coefficient
    table per ``k``, at points inside the knots' span (:func:`_span_basis` per point and axis)."""
    nx = tx.size - 4
    ny = ty.size - 4
    bx = np.empty(4)
    by = np.empty(4)
    left = np.empty(4)
    right = np.empty(4)
    for p in range(x.size):
        ix = _span_basis(tx, nx, x[p], bx, left, right) - 3
        iy = _span_basis(ty, ny, y[p], by, left, right) - 3
        for k in range(coefs.shape[0]):
            acc = 0.0
            for r in range(4):
                row = 0.0
                for q in range(4):
                    row += coefs[k, ix + r, iy + q] * by[q]
                acc += bx[r] * row
            out[k, p] = acc


def _bspline_surface_numpy(tx: np.ndarray, ty: np.ndarray, coefs: np.ndarray, x: np.ndarray, y: np.ndarray,
                           out: np.ndarray) -> None:
    """The NumPy twin of :func:`_bspline_surface`: the same recurrence on every point of a chunk at once."""
    def spans_and_basis(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = t.size - 4
        span = np.clip(np.searchsorted(t, v, side="right") - 1, 3, n - 1)
        basis = np.zeros((4, v.size))
        basis[0] = 1.0
        left = np.zeros((4, v.size))
        right = np.zeros((4, v.size))
        for j in range(1, 4):
            left[j] = v - t[span + 1 - j]
            right[j] = t[span + j] - v
            saved = np.zeros(v.size)
            for r in range(j):
                temp = basis[r] / (right[r + 1] + left[j - r])
                basis[r] = saved + right[r + 1] * temp
                saved = left[j - r] * temp
            basis[j] = saved
        return span - 3, basis

    chunk = 1 << 16
    for start in range(0, x.size, chunk):
        part = slice(start, start + chunk)
        ix, bx = spans_and_basis(tx, x[part])
        iy, by = spans_and_basis(ty, y[part])
        for k in range(coefs.shape[0]):
            acc = np.zeros(ix.size)
            for r in range(4):
                row = np.zeros(ix.size)
                for q in range(4):
                    row += coefs[k, ix + r, iy + q] * by[q]
                acc += bx[r] * row
            out[k, part] = acc


def bspline_surface(tx: np.ndarray, ty: np.ndarray, coefs: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The surfaces of :func:`_bspline_surface` (``coefs``: ``K × (len(tx) − 4) × (len(ty) − 4)``) at the points
    ``(x, y)`` (arrays of one shape, or broadcast to one), shape ``K × shape``. The caller keeps the points inside
    ``[tx[0], tx[-1]] × [ty[0], ty[-1]]``."""
    x, y = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(y, dtype=float))
    shape = x.shape
    x = np.ascontiguousarray(x).ravel()
    y = np.ascontiguousarray(y).ravel()
    out = np.empty((coefs.shape[0], x.size))
    _call("_bspline_surface", 1, np.ascontiguousarray(tx, dtype=float), np.ascontiguousarray(ty, dtype=float),
          np.ascontiguousarray(coefs, dtype=float), x, y, out)
    return out.reshape((coefs.shape[0],) + shape)


def _bspline_rows(tx: np.ndarray, ty: np.ndarray, coefs: np.ndarray, x: np.ndarray, y: np.ndarray,
                  out: np.ndarray) -> None:
    """:func:`_bspline_surface` at the points ``(x[n, p], y[n])``: one ``y`` per row, so the spline is first
    reduced to a cubic in ``x`` per row (``Σ_j coefs[k, i, j] B_j(y[n])``), then read at the row's points."""
    nx = tx.size - 4
    ny = ty.size - 4
    K = coefs.shape[0]
    bx = np.empty(4)
    by = np.empty(4)
    left = np.empty(4)
    right = np.empty(4)
    rowc = np.empty((K, nx))
    for n in range(x.shape[0]):
        iy = _span_basis(ty, ny, y[n], by, left, right) - 3
        for k in range(K):
            for i in range(nx):
                row = 0.0
                for q in range(4):
                    row += coefs[k, i, iy + q] * by[q]
                rowc[k, i] = row
        for p in range(x.shape[1]):
            ix = _span_basis(tx, nx, x[n, p], bx, left, right) - 3
            for k in range(K):
                acc = 0.0
                for r in range(4):
                    acc += bx[r] * rowc[k, ix + r]
                out[k, n, p] = acc


def _bspline_rows_numpy(tx: np.ndarray, ty: np.ndarray, coefs: np.ndarray, x: np.ndarray, y: np.ndarray,
                        out: np.ndarray) -> None:
    """The NumPy twin of :func:`_bspline_rows`: :func:`_bspline_surface_numpy` on every point."""
    flat = np.empty((coefs.shape[0], x.size))
    _bspline_surface_numpy(tx, ty, coefs, x.ravel(), np.repeat(y, x.shape[1]), flat)
    out[...] = flat.reshape(out.shape)


def bspline_rows(tx: np.ndarray, ty: np.ndarray, coefs: np.ndarray, x: np.ndarray, y: np.ndarray,
                 out: np.ndarray | None = None) -> np.ndarray:
    """:func:`bspline_surface` at the points ``(x[n, p], y[n])`` (``x``: rows × points, ``y``: one per row), shape
    ``K × rows × points`` (:func:`_bspline_rows`: the spline reduced to a cubic in ``x`` once per row), written into
    ``out`` when given (a C-contiguous float array of that shape, reused across calls)."""
    x = np.ascontiguousarray(x, dtype=float)
    y = np.ascontiguousarray(y, dtype=float).ravel()
    if x.ndim != 2 or y.size != x.shape[0]:
        raise ValueError(f"bspline_rows needs x of rows × points and one y per row, got {x.shape} and {y.shape}")
    from featureode.calculus.numerics import out_array

    out = out_array(out, (coefs.shape[0],) + x.shape)
    _call("_bspline_rows", 1, np.ascontiguousarray(tx, dtype=float), np.ascontiguousarray(ty, dtype=float),
          np.ascontiguousarray(coefs, dtype=float), x, y, out)
    return out
