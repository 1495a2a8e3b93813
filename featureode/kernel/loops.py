"""Compiled loops of the kernel layer: the Talbot densities of the laws of ``|ŵ|²`` (:mod:`featureode.kernel.initlaw`)
for many multi-indices γ at once.

Each loop is plain Python written for numba and compiled on first use (``cache=True``: once per install, ≈ 1–2 s; the
compile is announced on stderr once per process). No fast-math: the same IEEE operations as the NumPy expressions
they replace, in another order (results equal to round-off).
"""
from __future__ import annotations

import functools
import sys
import time
from typing import Any, Callable

import numpy as np

__all__ = ["talbot_densities"]


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


_ANNOUNCED: set[str] = set()


@functools.lru_cache(maxsize=None)
def _compiled(name: str) -> Callable[..., Any]:
    import numba

    return numba.njit(cache=True, fastmath=False, boundscheck=False, nogil=True)(globals()[name])


def _call(name: str, *args: Any) -> None:
    """Run the compiled ``name``; the first call of a process that compiles (a numba cache miss) says so on stderr."""
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


def talbot_densities(base: np.ndarray, pbase: np.ndarray, recip: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                     dims: np.ndarray, exps: np.ndarray, starts: np.ndarray, wcoef: np.ndarray,
                     norm: np.ndarray) -> np.ndarray:
    """The densities of :func:`_talbot_densities` (shape ``len(lo) × rows``; 0 outside each ``lo_k:hi_k``)."""
    out = np.zeros((lo.size, base.shape[0]))
    _call("_talbot_densities", base, pbase, recip, lo, hi, dims, exps, starts, wcoef, norm, out)
    return out
