"""The per-neuron flow algebra of the second-order growth (averaged by :mod:`featureode.kernel.growth`).

Per neuron ``θ = (a, ŵ, b)`` (whitened first-layer weights ``ŵ_i ~ N(0, g_i)``, ``b ~ N(0, σ_b²)``, readout
``a`` independent of them) the mode-β feature gradient is ``∇φ_β``, ``φ_β = a A_β``,
``A_β = ŵ^β m_{|β|}(b, |ŵ|)/sqrt(β!)``, and every quantity is built from three rules

    ∂_b m_k = m_{k+1},    ∂_{ŵ_i} m_k = ŵ_i m_{k+2},    ∂_{ŵ_i} P_k = 2 g_i^k ŵ_i,   P_k = Σ_i g_i^k ŵ_i²

(``P_0 = |ŵ|² = Q``). A *scalar* is a finite sum of terms ``c · a^n · ŵ^μ · Π P_{k_j} · Π m_{j_l}`` over a finite
support of explicit directions; a *vector* (a gradient, or a tangent vector in the same coordinates) has an
``a``-component, a ``b``-component, explicit components on finitely many directions ``i`` and a *radial* part
``ŵ_i Σ_k g_i^k R_k`` in every direction (what the derivative of a function of ``Q`` and the ``P_k`` gives). The
flow metric is ``P = diag(η_a, η_w g, η_b)`` (per-group learning-rate weights, default 1); the inner product of two
vectors closes on the algebra::

    ⟨G, H⟩_P = η_a G_a H_a + η_b G_b H_b + η_w [Σ_{i explicit} g_i (G_i H_i + ŵ_i (G_i H^R(g_i) + H_i G^R(g_i)))
                                                + Σ_{k,l} G^R_k H^R_l P_{k+l+1}],   G^R(x) = Σ_k x^k G^R_k.

The coefficients are polynomials in the ``g_i`` of the explicit directions; a term carries its power of ``g_i`` as
one more field of its code (kind ``"g"``, a constant: derivatives do not touch it), so the algebra of a mode set does
not depend on the spectrum and is traced once for every spectrum (:mod:`featureode.kernel.second_order`);
:class:`~featureode.kernel.growth.Averager` puts the numbers ``g_i`` in when it averages.

The driving mode α moves the neuron along ``dθ/dε = P∇φ_α`` (``ε = γ D_α`` in the meanfield time unit), so a
scalar changes by its Lie derivative ``L_α F = ⟨∇φ_α, ∇F⟩_P`` and a vector ``G(θ)`` (components in fixed
coordinates) by ``L_α G`` componentwise, where ``L_α ŵ_i = η_w g_i (∇φ_α)_i`` turns radial parts into explicit and
radial ones. With ``u(ε) = P^{1/2}∇φ_β(θ(ε)) = u_0 + ε u_1 + ½ ε² u_2 + …`` (``u_n = L_α^n ∇φ_β``) the per-neuron
kernel is ``k_β = |u|²``; :mod:`featureode.kernel.second_order` averages ``|u_0|²`` (= the kernel's ``λ_β(0)``),
``⟨u_1, u_1'⟩``, ``⟨u_0, u_2⟩`` and ``⟨u_2, u_2'⟩``.

Terms are stored as ``(n, code)`` with an integer *code* of ``ŵ^μ Π P_k Π m_j``: one 16-bit field per *slot* (a
direction ``i``, an index ``k`` of ``P_k``, an order ``j`` of ``m_j`` or the power of a ``g_i``, numbered
process-wide as first met, :func:`slot`) holding the exponent or multiplicity, so the code of a product is the sum of the codes and a
derivative subtracts and adds single fields. :func:`fields` reads a code back.
"""
from __future__ import annotations

import math
import sys
import threading
from dataclasses import dataclass

import numpy as np

from featureode.calculus.hermite import Mode
from featureode.kernel.network import KernelError

__all__ = ["Rates", "Vector", "Algebra", "GrowthError", "mul", "times_code", "slot", "unit", "g_unit", "odd_mask",
           "fields", "slot_kinds", "g_mask"]

# a term key: (power of a, code of ŵ^μ Π P_k Π m_j)
Key = tuple[int, int]
Scalar = dict  # Key -> float

#: bits per field of a code (exponents and multiplicities stay far below 2^15, so sums of two never carry)
FIELD_BITS = 16


class GrowthError(KernelError):
    """A second-order average that cannot be computed as asked (it diverges, or its quadrature cannot be trusted)."""


@dataclass(frozen=True)
class Rates:
    """Per-group learning-rate weights of the flow metric ``P = diag(η_a, η_w g, η_b)`` (readout, whitened weights,
    bias); ``(1, 1, 1)`` is plain gradient flow."""

    a: float = 1.0
    w: float = 1.0
    b: float = 1.0

    def __post_init__(self) -> None:
        for name in ("a", "w", "b"):
            val = getattr(self, name)
            if not (isinstance(val, (int, float)) and math.isfinite(val) and val >= 0):
                raise GrowthError(f"learning-rate weight eta_{name} must be a finite number ≥ 0, got {val!r}")


# ----------------------------------------------------------------------------------------------------------------
# codes
# ----------------------------------------------------------------------------------------------------------------
_SLOTS: list[tuple[str, int]] = []            # slot -> ("w", direction) | ("P", k) | ("m", order) | ("g", direction)
_SLOT_OF: dict[tuple[str, int], int] = {}
_UNIT: dict[tuple[str, int], int] = {}        # (kind, value) -> the code of that one factor
_LOCK = threading.Lock()
#: the lowest bit of every direction's field: ``code & odd_mask()`` is the pattern of odd exponents of ``ŵ^μ``
_ODD = [0]
#: every bit of the fields of kind "g": ``code & ~g_mask()`` is the code without its factor ``Π g_i^{e_i}``
_GMASK = [0]


def slot(kind: str, value: int) -> int:
    """The field number of a direction (``kind="w"``), an index of ``P_k`` (``"P"``), an order of ``m_j``
    (``"m"``) or the power of the constant ``g_i`` of a direction (``"g"``), registered on first use (process-wide;
    codes of one process are comparable)."""
    n = _SLOT_OF.get((kind, value))
    if n is None:
        with _LOCK:
            n = _SLOT_OF.get((kind, value))
            if n is None:
                n = len(_SLOTS)
                _SLOTS.append((kind, value))
                _UNIT[(kind, value)] = 1 << FIELD_BITS * n
                if kind == "w":
                    _ODD[0] |= 1 << FIELD_BITS * n
                if kind == "g":
                    _GMASK[0] |= ((1 << FIELD_BITS) - 1) << FIELD_BITS * n
                _SLOT_OF[(kind, value)] = n
    return n


def unit(kind: str, value: int) -> int:
    """The code of one factor ``ŵ_i``, ``P_k`` or ``m_j``."""
    code = _UNIT.get((kind, value))
    if code is None:
        slot(kind, value)
        code = _UNIT[(kind, value)]
    return code


def g_unit(i: int) -> int:
    """The code of the constant factor ``g_i``."""
    return unit("g", i)


def g_mask() -> int:
    """The bits of every registered ``g`` field (:func:`slot`)."""
    return _GMASK[0]


def odd_mask() -> int:
    """The bits of :func:`slot`'s directions that make an exponent odd."""
    return _ODD[0]


def slot_kinds() -> list[tuple[str, int]]:
    """Every registered slot's ``(kind, value)``, by field number."""
    return list(_SLOTS)


def fields(codes: "list[int]", n: int) -> np.ndarray:
    """The first ``n`` fields of ``codes`` (all of them when ``n`` slots are registered) as a ``len(codes) × n``
    integer array."""
    raw = b"".join(c.to_bytes(2 * n, sys.byteorder) for c in codes)
    return np.frombuffer(raw, dtype=np.uint16).reshape(len(codes), n)


def _derivative_steps(code: int) -> tuple[tuple, tuple, tuple]:
    """What a derivative needs of a code: per m order ``j`` (ascending) ``(count, code step to m_{j+1}, to
    m_{j+2})``, per direction ``i`` (ascending) ``(i, exponent, code of ŵ_i)``, per ``P_k`` (ascending)
    ``(k, count, code of P_k)``."""
    ms: list[tuple[int, int]] = []
    mo: list[tuple[int, int]] = []
    pk: list[tuple[int, int]] = []
    raw = memoryview(code.to_bytes(2 * len(_SLOTS), sys.byteorder)).cast("H")   # the 16-bit fields
    for n, c in enumerate(raw):
        if c:
            kind, v = _SLOTS[n]
            if kind != "g":   # a power of the constant g_i: no derivative
                (ms if kind == "m" else mo if kind == "w" else pk).append((v, c))
    return (tuple((c, unit("m", j + 1) - unit("m", j), unit("m", j + 2) - unit("m", j)) for j, c in sorted(ms)),
            tuple((i, e, unit("w", i)) for i, e in sorted(mo)),
            tuple((k, c, unit("P", k)) for k, c in sorted(pk)))


# ----------------------------------------------------------------------------------------------------------------
# scalars and vectors
# ----------------------------------------------------------------------------------------------------------------
def _add(out: Scalar, key: Key, c: float) -> None:
    if c:
        out[key] = out.get(key, 0.0) + c


def mul(F: Scalar, G: Scalar) -> Scalar:
    """The product of two scalars."""
    out: Scalar = {}
    get = out.get
    for (na, code), c in F.items():
        for (nb, code2), c2 in G.items():
            cc = c * c2
            if cc:
                key = (na + nb, code + code2)
                out[key] = get(key, 0.0) + cc
    return out


def times_code(F: Scalar, code: int, factor: float = 1.0) -> Scalar:
    """``factor · F`` times the factor of code ``code`` (``ŵ_i`` or ``P_k``)."""
    return {(na, c + code): factor * v for (na, c), v in F.items()}


def _axpy(out: Scalar, F: Scalar, c: float = 1.0) -> None:
    get = out.get
    for key, val in F.items():
        cv = c * val
        if cv:
            out[key] = get(key, 0.0) + cv


@dataclass
class Vector:
    """A tangent vector / gradient: ``a``-, ``b``-components, explicit components ``E[i]`` and the radial part
    ``ŵ_i Σ_k g_i^k R[k]`` in every direction (module docstring)."""

    A: Scalar
    B: Scalar
    E: dict
    R: dict

    @classmethod
    def zero(cls) -> "Vector":
        return cls({}, {}, {}, {})


class Algebra:
    """The operations of the module docstring for metric weights ``rates`` (for every spectrum: the ``g_i`` are
    fields of the codes)."""

    def __init__(self, rates: Rates = Rates()):
        self.rates = rates
        self._steps: dict[int, tuple[tuple, tuple, tuple]] = {}   # code -> _derivative_steps(code)
        self._ops: dict[int, tuple[Vector, _LieOps]] = {}          # id(drive) -> (drive, its _LieOps)

    # gradients ---------------------------------------------------------------------------------------------------
    def grad(self, F: Scalar) -> Vector:
        """``∇F`` in ``(a, ŵ, b)``."""
        out = Vector.zero()
        R = out.R
        steps = self._steps
        for (na, code), c in F.items():
            if na:
                _add(out.A, (na - 1, code), c * na)
            st = steps.get(code)
            if st is None:
                st = steps[code] = _derivative_steps(code)
            ms, mo, pk = st
            for n, step1, step2 in ms:
                _add(out.B, (na, code + step1), c * n)
                _add(R.setdefault(0, {}), (na, code + step2), c * n)
            for i, e, wi in mo:
                _add(out.E.setdefault(i, {}), (na, code - wi), c * e)
            for k, n, pk_code in pk:
                _add(R.setdefault(k, {}), (na, code - pk_code), 2 * c * n)
        return out

    def phi_gradient(self, mode: Mode) -> Vector:
        """``∇φ_β`` with ``φ_β = a ŵ^β m_{|β|}/sqrt(β!)``."""
        code = sum(e * unit("w", i) for i, e in mode.items) + unit("m", mode.degree)
        return self.grad({(1, code): 1 / math.sqrt(mode.factorial)})

    # inner product -----------------------------------------------------------------------------------------------
    def radial_at(self, R: dict, i: int) -> Scalar:
        """The radial coefficient ``Σ_k g_i^k R_k`` of direction ``i``."""
        out: Scalar = {}
        gi = g_unit(i)
        for k, F in R.items():
            _axpy(out, times_code(F, k * gi) if k else F)
        return out

    def dot(self, G: Vector, H: Vector, parts: bool = False) -> "Scalar | dict[str, Scalar]":
        """``⟨G, H⟩_P`` (``parts``: the readout, weights and bias contributions separately)."""
        r = self.rates
        ra = mul(G.A, H.A) if r.a else {}
        rb = mul(G.B, H.B) if r.b else {}
        rw: Scalar = {}
        if r.w:
            for i in set(G.E) | set(H.E):
                gi = g_unit(i)
                if i in G.E and i in H.E:
                    _axpy(rw, times_code(mul(G.E[i], H.E[i]), gi))
                if i in G.E and H.R:
                    _axpy(rw, times_code(mul(G.E[i], self.radial_at(H.R, i)), unit("w", i) + gi))
                if i in H.E and G.R:
                    _axpy(rw, times_code(mul(H.E[i], self.radial_at(G.R, i)), unit("w", i) + gi))
            for k, Gk in G.R.items():
                for l, Hl in H.R.items():
                    _axpy(rw, times_code(mul(Gk, Hl), unit("P", k + l + 1)))
        if parts:
            return {"readout": {k: r.a * v for k, v in ra.items()}, "weights": {k: r.w * v for k, v in rw.items()},
                    "bias": {k: r.b * v for k, v in rb.items()}}
        total: Scalar = {}
        for part, weight in ((ra, r.a), (rw, r.w), (rb, r.b)):
            _axpy(total, part, weight)
        return total

    # the flow ----------------------------------------------------------------------------------------------------
    def lie(self, drive: Vector, F: Scalar) -> Scalar:
        """``L F = ⟨drive, ∇F⟩_P`` (``drive = ∇φ_α``): :meth:`dot` of the drive with :meth:`grad`, fused: each
        derivative of each term of ``F`` meets the drive's components it pairs with (:class:`_LieOps`)."""
        ops = self._lie_ops(drive)
        out: Scalar = {}
        steps = self._steps
        for (na, code), c in F.items():
            st = steps.get(code)
            if st is None:
                st = steps[code] = _derivative_steps(code)
            ms, mo, pk = st
            if na:
                _apply(out, na - 1, code, c * na, ops.A)
            for n, step1, step2 in ms:
                _apply(out, na, code + step1, c * n, ops.B)
                _apply(out, na, code + step2, c * n, ops.radial(0))
            for i, e, wi in mo:
                _apply(out, na, code - wi, c * e, ops.explicit(i))
            for k, n, pk_code in pk:
                _apply(out, na, code - pk_code, 2 * c * n, ops.radial(k))
        return out

    def _lie_ops(self, drive: Vector) -> "_LieOps":
        hit = self._ops.get(id(drive))
        if hit is None or hit[0] is not drive:
            hit = self._ops[id(drive)] = (drive, _LieOps(self, drive))
        return hit[1]

    def lie_vector(self, drive: Vector, G: Vector) -> Vector:
        """``L G`` componentwise (``L ŵ_i = η_w g_i (drive)_i``)."""
        ew = self.rates.w
        out = Vector(self.lie(drive, G.A), self.lie(drive, G.B), {}, {})
        for i, F in G.E.items():
            out.E[i] = self.lie(drive, F)
        if ew and G.R:
            for i, Fa in drive.E.items():       # the explicit part of L ŵ_i times the radial coefficient
                _axpy(out.E.setdefault(i, {}), times_code(mul(Fa, self.radial_at(G.R, i)), g_unit(i)), ew)
        for k, F in G.R.items():
            _axpy(out.R.setdefault(k, {}), self.lie(drive, F))
            if ew:
                for l, Fa in drive.R.items():   # the radial part of L ŵ_i: η_w g_i^{1+l} ŵ_i drive^R_l
                    _axpy(out.R.setdefault(k + l + 1, {}), mul(Fa, F), ew)
        return out


def _apply(out: Scalar, n: int, code: int, c: float, ops: list[tuple[int, int, float]]) -> None:
    """``out += c · a^n [code] · Σ_ops f a^{n_d} [code_d]``."""
    get = out.get
    for nd, cd, f in ops:
        v = c * f
        if v:
            key = (n + nd, code + cd)
            out[key] = get(key, 0.0) + v


class _LieOps:
    """The drive ``D = ∇φ_α`` as the terms each component of a gradient ``∇F`` meets in ``⟨D, ∇F⟩_P``: a list of
    ``(power of a, code, factor)`` per component (the ``a``- and ``b``-components, the explicit component of a
    direction ``i``, the radial coefficient ``R_l``), with the metric's weights, the ``g_i`` and the factors ``ŵ_i``
    and ``P_{k+l+1}`` of the module docstring's inner product folded in."""

    def __init__(self, alg: Algebra, drive: Vector):
        r = alg.rates
        self.rates, self.drive = r, drive
        self.A = [(nd, cd, r.a * v) for (nd, cd), v in drive.A.items()] if r.a else []
        self.B = [(nd, cd, r.b * v) for (nd, cd), v in drive.B.items()] if r.b else []
        self._explicit: dict[int, list[tuple[int, int, float]]] = {}
        self._radial: dict[int, list[tuple[int, int, float]]] = {}

    def explicit(self, i: int) -> list[tuple[int, int, float]]:
        """What ``(∇F)_i`` meets: ``η_w g_i (D_i + ŵ_i D^R(g_i))``."""
        ops = self._explicit.get(i)
        if ops is None:
            ops = self._explicit[i] = []
            w = self.rates.w
            if w:
                gi = g_unit(i)
                ops += [(nd, cd + gi, w * v) for (nd, cd), v in self.drive.E.get(i, {}).items()]
                wi = unit("w", i)
                for k, Rk in self.drive.R.items():
                    ops += [(nd, cd + wi + (1 + k) * gi, w * v) for (nd, cd), v in Rk.items()]
        return ops

    def radial(self, l: int) -> list[tuple[int, int, float]]:
        """What the radial coefficient ``(∇F)^R_l`` meets: ``η_w (Σ_i g_i^{1+l} ŵ_i D_i + Σ_k D^R_k P_{k+l+1})``."""
        ops = self._radial.get(l)
        if ops is None:
            ops = self._radial[l] = []
            w = self.rates.w
            if w:
                for i, Ei in self.drive.E.items():
                    wi = unit("w", i) + (1 + l) * g_unit(i)
                    ops += [(nd, cd + wi, w * v) for (nd, cd), v in Ei.items()]
                for k, Rk in self.drive.R.items():
                    pk = unit("P", k + l + 1)
                    ops += [(nd, cd + pk, w * v) for (nd, cd), v in Rk.items()]
        return ops
