"""Curve metrics of theory §5, shared by the simulator, the report and the suites.

* :func:`crossing_time` — ``t50``, ``t10``: first time the normalised loss ``L(t)/L(0)`` falls below 0.5 / 0.1
  (log-linear interpolation);
* :class:`Ratio` — a ratio of two crossing times (ODE/MLP) that is exact when both curves cross and only bounded
  when one of them ends first;
* :func:`curve_metrics` — ``t50``, ``t10``, their ratios to a reference curve and ``log_rms``, the RMS of
  ``log L_ode − log L_mlp`` on the reference's (log-spaced) times where its loss is above ``floor`` (1e-2);
* :func:`in_support_loss` — ``Σ_β (v_β − f_β)² / Σ_β v_β²`` over the target's support.

NumPy only, so that every layer can use the one definition. No constant is fitted anywhere here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike


def crossing_time(t: ArrayLike, ratio: ArrayLike, level: float) -> float | None:
    """First time ``ratio(t) ≤ level``, interpolating ``log ratio`` linearly in ``t`` between the two samples that
    bracket the crossing (theory §5: ``t50``, ``t10``); ``None`` when the curve never gets there."""
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


def relative_loss(f: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The loss as a fraction of its value at ``f = 0``: ``L/L(0) = Σ_β (v_β − f_β)² / Σ_β v_β²``, for ``f`` of shape
    (..., M) and the target ``v`` of shape (M,). The one NumPy definition (the compiled integrator's scalar loop
    ``featureode.ode.integrate._relative_loss`` is its machine-code twin, tested equal)."""
    f, v = np.asarray(f, float), np.asarray(v, float)
    return ((f - v) ** 2).sum(-1) / float((v**2).sum())


def in_support_loss(f: np.ndarray, v: np.ndarray) -> np.ndarray:
    """:func:`relative_loss` over the target's support (``v`` ≠ 0), for ``f`` of shape (..., M): the loss on the
    target's own modes (equal to :func:`relative_loss` on the target basis; the extended basis also holds modes with
    ``v_β = 0``)."""
    support = np.asarray(v) != 0
    if not support.any():
        raise ValueError(f"the in-support loss needs a target with a nonzero coefficient v_β, got v = {v!r}")
    return relative_loss(np.asarray(f, float)[..., support], np.asarray(v, float)[support])


def interp_log(t_new: np.ndarray, t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``y(t_new)`` interpolating ``log y`` linearly in ``t`` (``y > 0``); NaN outside ``[t_0, t_end]``."""
    t, y = np.asarray(t, float), np.asarray(y, float)
    out = np.exp(np.interp(t_new, t, np.log(np.maximum(y, 1e-300))))
    out[(t_new < t[0]) | (t_new > t[-1])] = np.nan
    return out


def normalised(loss: ArrayLike) -> np.ndarray:
    """``L(t)/L(0)`` (the first sample is ``t = 0``)."""
    arr = np.asarray(loss, float)
    if arr.size == 0 or not arr[0] > 0:
        raise ValueError(f"a loss curve must start with a positive L(0), got {arr[:1]}")
    return arr / arr[0]


@dataclass(frozen=True)
class Ratio:
    """Where a ratio ``a/b`` of two crossing times lies: ``lo ≤ a/b ≤ hi`` (``hi = ∞``: no upper bound).

    Exact (``lo == hi``) when both curves cross; ``(a_end/b, ∞)`` when only the reference crosses (the other curve
    ends at ``a_end`` before crossing, so its crossing is later); ``(0, a/b_end)`` when only the first crosses;
    :meth:`unknown` ``(0, ∞)`` when neither does, when ``b = 0``, or when the curve that does not cross ends at
    ``t ≤ 0``. JSON form (:meth:`to_json`): ``[lo, hi]`` with ``hi = null`` for ∞, and ``null`` for unknown.
    """

    lo: float
    hi: float

    def __post_init__(self) -> None:
        if not (0 <= self.lo <= self.hi) or math.isnan(self.hi):
            raise ValueError(f"a Ratio needs 0 ≤ lo ≤ hi, got lo = {self.lo}, hi = {self.hi}")

    @classmethod
    def exact(cls, x: float) -> "Ratio":
        """The known value ``x``."""
        return cls(float(x), float(x))

    @classmethod
    def unknown(cls) -> "Ratio":
        """No information: ``[0, ∞)``."""
        return cls(0.0, math.inf)

    @classmethod
    def of_crossings(cls, a: float | None, a_end: float, b: float | None, b_end: float) -> "Ratio":
        """The ratio ``a/b`` of two crossing times (``None``: that curve ends at ``a_end`` / ``b_end`` without
        crossing)."""
        if b == 0 or (a is None and b is None) or (a is None and a_end <= 0) or (b is None and b_end <= 0):
            return cls.unknown()
        if a is not None and b is not None:
            return cls.exact(a / b)
        if a is None:
            assert b is not None
            return cls(a_end / b, math.inf)
        return cls(0.0, a / b_end)

    @property
    def is_exact(self) -> bool:
        """Both curves crossed: the ratio is known."""
        return self.lo == self.hi

    @property
    def is_unknown(self) -> bool:
        """Nothing is known (``[0, ∞)``)."""
        return self.lo == 0 and math.isinf(self.hi)

    @property
    def value(self) -> float | None:
        """The ratio when exact, else ``None``."""
        return self.lo if self.is_exact else None

    def text(self, digits: int = 3) -> str:
        """The value, ``< hi``, ``> lo``, ``[lo, hi]``, or ``—`` when unknown."""
        if self.is_unknown:
            return "—"
        if self.is_exact:
            return f"{self.lo:.{digits}g}"
        if self.lo == 0:
            return f"< {self.hi:.{digits}g}"
        if math.isinf(self.hi):
            return f"> {self.lo:.{digits}g}"
        return f"[{self.lo:.{digits}g}, {self.hi:.{digits}g}]"

    def in_band(self, lo: float, hi: float) -> bool | None:
        """Is the ratio known to lie in ``[lo, hi]`` (``True``), known to lie outside (``False``), or neither
        (``None``)?"""
        if self.is_unknown:
            return None
        if self.is_exact:
            return lo <= self.lo <= hi
        if lo <= self.lo and self.hi <= hi:
            return True
        return False if self.hi <= lo or self.lo >= hi else None

    def to_json(self) -> list[float | None] | None:
        """``[lo, hi]`` (``hi = None`` for ∞), ``None`` when unknown."""
        if self.is_unknown:
            return None
        return [self.lo, self.hi if math.isfinite(self.hi) else None]

    @classmethod
    def from_json(cls, data: Sequence[float | None] | None) -> "Ratio":
        """The inverse of :meth:`to_json`."""
        if data is None:
            return cls.unknown()
        lo, hi = data
        return cls(float(lo), math.inf if hi is None else float(hi))  # type: ignore[arg-type]  # to_json writes lo as a number

    @classmethod
    def from_entry(cls, entry: dict[str, Any], key: str) -> "Ratio":
        """The ratio ``key`` (``"t50_ratio"``, ``"t10_ratio"``) of a stored report entry: its ``key + "_range"``
        when present, else the exact value, else unknown."""
        if f"{key}_range" in entry:
            return cls.from_json(entry[f"{key}_range"])
        x = entry.get(key)
        return cls.unknown() if x is None else cls.exact(x)


@dataclass(frozen=True)
class CurveMetrics:
    """theory §5 metrics of one curve against a reference: the curve's ``t50``/``t10``, the ratios to the
    reference's, and ``log_rms`` (``None`` where no reference time qualifies)."""

    t50: float | None
    t10: float | None
    t50_ratio: Ratio
    t10_ratio: Ratio
    log_rms: float | None

    def ratio(self, key: str) -> Ratio:
        """``"t50"`` or ``"t10"`` → its :class:`Ratio`."""
        return {"t50": self.t50_ratio, "t10": self.t10_ratio}[key]

    def to_json(self) -> dict[str, Any]:
        """``t50``, ``t10``, ``t50_ratio``/``t10_ratio`` (the exact value or ``None``), ``t50_ratio_range``/
        ``t10_ratio_range`` (:meth:`Ratio.to_json`), ``log_rms``."""
        return {"t50": self.t50, "t10": self.t10, "t50_ratio": self.t50_ratio.value,
                "t10_ratio": self.t10_ratio.value, "t50_ratio_range": self.t50_ratio.to_json(),
                "t10_ratio_range": self.t10_ratio.to_json(), "log_rms": self.log_rms}


def curve_metrics(t_ode: ArrayLike, loss_ode: ArrayLike, t_ref: ArrayLike,
                  loss_ref: ArrayLike, floor: float = 1e-2) -> CurveMetrics:
    """Metrics of theory §5 for one ODE curve against one reference (MLP) curve, both normalised here to
    ``L/L(0)``. A curve that ends before it crosses still bounds the ratio (:meth:`Ratio.of_crossings`)."""
    t_o, l_o = np.asarray(t_ode, float), normalised(loss_ode)
    t_r, l_r = np.asarray(t_ref, float), normalised(loss_ref)
    crossings, ratios = {}, {}
    for key, level in (("t50", 0.5), ("t10", 0.1)):
        a, b = crossing_time(t_o, l_o, level), crossing_time(t_r, l_r, level)
        crossings[key] = a
        ratios[key] = Ratio.of_crossings(a, float(t_o[-1]), b, float(t_r[-1]))
    mask = (l_r > floor) & (t_r > 0) & (t_r <= t_o[-1])
    log_rms = None
    if mask.any():
        diff = np.log(interp_log(t_r[mask], t_o, l_o)) - np.log(l_r[mask])
        log_rms = float(np.sqrt(np.nanmean(diff**2)))
    return CurveMetrics(crossings["t50"], crossings["t10"], ratios["t50"], ratios["t10"], log_rms)
