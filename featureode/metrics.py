"""Curve metrics shared by the simulator and the comparison (DESIGN §5): crossing times and the in-support loss.

NumPy only, so that every layer can use the one definition.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def crossing_time(t: Sequence[float], ratio: Sequence[float], level: float) -> float | None:
    """First time ``ratio(t) ≤ level``, interpolating ``log ratio`` linearly in ``t`` between the two samples that
    bracket the crossing (DESIGN §5: ``t50``, ``t10``); ``None`` when the curve never gets there."""
    t_arr, r_arr = np.asarray(t, float), np.asarray(ratio, float)
    below = np.nonzero(r_arr <= level)[0]
    if below.size == 0:
        return None
    k = int(below[0])
    if k == 0:
        return float(t_arr[0])
    r0, r1 = max(r_arr[k - 1], 1e-300), max(r_arr[k], 1e-300)
    if r0 == r1:
        return float(t_arr[k])
    frac = (math.log(level) - math.log(r0)) / (math.log(r1) - math.log(r0))
    return float(t_arr[k - 1] + frac * (t_arr[k] - t_arr[k - 1]))


def in_support_loss(f: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``Σ_β (v_β − f_β)² / Σ_β v_β²`` over the target's support (``v`` ≠ 0), for ``f`` of shape (..., M)."""
    support = np.asarray(v) != 0
    if not support.any():
        raise ValueError(f"the in-support loss needs a target with a nonzero coefficient v_β, got v = {v!r}")
    v_s = np.asarray(v, float)[support]
    return ((np.asarray(f, float)[..., support] - v_s) ** 2).sum(-1) / float((v_s**2).sum())


def ratio_range(a: float | None, a_end: float, b: float | None, b_end: float) -> tuple[float, float] | None:
    """Where the ratio ``a/b`` of two crossing times can lie when either curve may end before crossing.

    ``a``, ``b``: crossing times (``None``: the curve ends at ``a_end`` / ``b_end`` without crossing, so the crossing,
    if any, is later). Returns ``(lo, hi)``: ``(a/b, a/b)`` when both crossed; ``(a_end/b, ∞)`` when only ``b``
    did; ``(0, a/b_end)`` when only ``a`` did (the ratio is below ``a/b_end``); ``None`` when neither did, when
    ``b = 0``, or when the curve that did not cross ends at ``t ≤ 0`` (no information).
    """
    if b == 0 or (a is None and b is None) or (a is None and a_end <= 0) or (b is None and b_end <= 0):
        return None
    if a is not None and b is not None:
        return a / b, a / b
    if a is None:
        return a_end / b, math.inf
    return 0.0, a / b_end
