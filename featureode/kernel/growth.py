"""The per-neuron flow algebra and its deterministic average: the exact second-order growth of the init kernel.

Per neuron ``θ = (a, ŵ, b)`` (whitened first-layer weights ``ŵ_i ~ N(0, g_i)``, ``b ~ N(0, σ_b²)``, readout
``a`` independent of them with the parametrization's moments ``E[a^n]``) the mode-β feature gradient is
``∇φ_β``, ``φ_β = a A_β``, ``A_β = ŵ^β m_{|β|}(b, |ŵ|)/sqrt(β!)``, and every quantity is built from three rules

    ∂_b m_k = m_{k+1},    ∂_{ŵ_i} m_k = ŵ_i m_{k+2},    ∂_{ŵ_i} P_k = 2 g_i^k ŵ_i,   P_k = Σ_i g_i^k ŵ_i²

(``P_0 = |ŵ|² = Q``). A *scalar* is a finite sum of terms ``c · a^n · ŵ^μ · Π P_{k_j} · Π m_{j_l}`` over a finite
support of explicit directions; a *vector* (a gradient, or a tangent vector in the same coordinates) has an
``a``-component, a ``b``-component, explicit components on finitely many directions ``i`` and a *radial* part
``ŵ_i Σ_k g_i^k R_k`` in every direction (what the derivative of a function of ``Q`` and the ``P_k`` gives). The
flow metric is ``P = diag(η_a, η_w g, η_b)`` (per-group learning-rate weights, default 1); the inner product of two
vectors closes on the algebra::

    ⟨G, H⟩_P = η_a G_a H_a + η_b G_b H_b + η_w [Σ_{i explicit} g_i (G_i H_i + ŵ_i (G_i H^R(g_i) + H_i G^R(g_i)))
                                                + Σ_{k,l} G^R_k H^R_l P_{k+l+1}],   G^R(x) = Σ_k x^k G^R_k.

The driving mode α moves the neuron along ``dθ/dε = P∇φ_α`` (``ε = γ D_α`` in the meanfield time unit), so a
scalar changes by its Lie derivative ``L_α F = ⟨∇φ_α, ∇F⟩_P`` and a vector ``G(θ)`` (components in fixed
coordinates) by ``L_α G`` componentwise, where ``L_α ŵ_i = η_w g_i (∇φ_α)_i`` turns radial parts into explicit and
radial ones. With ``u(ε) = P^{1/2}∇φ_β(θ(ε)) = u_0 + ε u_1 + ½ ε² u_2 + …`` (``u_n = L_α^n ∇φ_β``) the per-neuron
kernel is ``k_β = |u|²``; :mod:`featureode.kernel.second_order` averages ``|u_0|²`` (= the kernel's ``λ_β(0)``),
``⟨u_1, u_1'⟩``, ``⟨u_0, u_2⟩`` and ``⟨u_2, u_2'⟩``.

Averages. ``E[a^n]`` from the parametrization; a monomial ``ŵ^μ`` with an odd exponent averages to 0, an even one
``ŵ^{2γ}`` size-biases the law of ``Q``; a product ``Π_j P_{k_j}`` tilts it further: with the cumulants
``κ_B(t) = (|B|−1)! 2^{|B|−1} Σ_i (2γ_i+1) g_i^{|B| + Σ_{j∈B} k_j} / (1 + 2t g_i)^{|B|}`` of the ``P_k`` under
``ŵ^{2γ} e^{−tQ}``, ``E[ŵ^{2γ} Π_j P_{k_j} e^{−tQ}] = M_γ L_γ(t) Σ_{partitions π} Π_{B∈π} κ_B(t)``
(``derivations/growth_algebra.py`` derives it). The measure is recovered on the kernel's logarithmic ``Q`` grid by
the same Talbot inversion as :class:`~featureode.kernel.initlaw.QLaw` (accepted only when it reproduces the exact
mass, mean and second moment of the tilted law), and ``E_b[Π m_j](Q)`` on the kernel's bias rule. For ``Π P = 1``
and ``Π P = P_1`` the kernel's own measures are used, so ``E|u_0|²`` equals the kernel's ``λ_β(0)``.
"""
from __future__ import annotations

import math
from collections import defaultdict
from functools import lru_cache
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from featureode.calculus.hermite import Mode
from featureode.kernel.initlaw import Gamma, QLaw
from featureode.kernel.averagers import _finite_means, _mean_table
from featureode.kernel.network import KernelError
from featureode.kernel.network import Network

__all__ = ["Rates", "Vector", "Algebra", "Averager", "GrowthError", "readout_moment"]

# a term key: (power of a, monomial ((dim, exponent), …) sorted by dim, P indices sorted, m orders sorted)
Key = tuple[int, tuple[tuple[int, int], ...], tuple[int, ...], tuple[int, ...]]
Scalar = dict  # Key -> float


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


def readout_moment(parametrization: object, n: int) -> float:
    """``E[a^n]`` of the init readout law: the parametrization's ``readout_moment(n)`` when it has one, else the
    centred Gaussian of variance ``readout_variance`` (``E[a^{2m}] = (2m−1)!! E[a²]^m``)."""
    own = getattr(parametrization, "readout_moment", None)
    if callable(own):
        return float(own(n))
    if n % 2:
        return 0.0
    var = float(parametrization.readout_variance)  # type: ignore[attr-defined]  # a Parametrization (duck-typed here)
    return float(math.prod(range(n - 1, 0, -2))) * var ** (n // 2)


# ----------------------------------------------------------------------------------------------------------------
# scalars and vectors
# ----------------------------------------------------------------------------------------------------------------
def _add(out: Scalar, key: Key, c: float) -> None:
    if c:
        out[key] = out.get(key, 0.0) + c


def _mono_mul(m1: tuple, m2: tuple) -> tuple:
    if not m1:
        return m2
    if not m2:
        return m1
    return _mono_mul_cached(m1, m2)


@lru_cache(maxsize=1 << 16)
def _mono_mul_cached(m1: tuple, m2: tuple) -> tuple:
    d = dict(m1)
    for i, e in m2:
        d[i] = d.get(i, 0) + e
    return tuple(sorted(d.items()))


@lru_cache(maxsize=1 << 16)
def _mono_shift(m: tuple, i: int, by: int) -> tuple:
    d = dict(m)
    e = d.get(i, 0) + by
    if e:
        d[i] = e
    else:
        d.pop(i, None)
    return tuple(sorted(d.items()))


def _merge(a: tuple, b: tuple) -> tuple:
    return _merge_cached(a, b) if a and b else (a or b)


@lru_cache(maxsize=1 << 16)
def _merge_cached(a: tuple, b: tuple) -> tuple:
    return tuple(sorted(a + b))


@lru_cache(maxsize=1 << 14)
def _replace_one(ms: tuple, j: int, by: int) -> tuple:
    lst = list(ms)
    lst.remove(j)
    lst.append(j + by)
    return tuple(sorted(lst))


@lru_cache(maxsize=1 << 14)
def _remove_one(ms: tuple, k: int) -> tuple:
    lst = list(ms)
    lst.remove(k)
    return tuple(lst)


def mul(F: Scalar, G: Scalar) -> Scalar:
    """The product of two scalars."""
    out: Scalar = {}
    for (na, mo, pk, ms), c in F.items():
        for (nb, mo2, pk2, ms2), c2 in G.items():
            _add(out, (na + nb, _mono_mul(mo, mo2), _merge(pk, pk2), _merge(ms, ms2)), c * c2)
    return out


def _times_w(F: Scalar, i: int, factor: float = 1.0) -> Scalar:
    """``factor · ŵ_i · F``."""
    return {(na, _mono_shift(mo, i, 1), pk, ms): factor * c for (na, mo, pk, ms), c in F.items()}


def _times_P(F: Scalar, k: int, factor: float = 1.0) -> Scalar:
    """``factor · P_k · F``."""
    return {(na, mo, _merge(pk, (k,)), ms): factor * c for (na, mo, pk, ms), c in F.items()}


def _axpy(out: Scalar, F: Scalar, c: float = 1.0) -> None:
    for key, val in F.items():
        _add(out, key, c * val)


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
    """The operations of the module docstring for one spectrum ``g`` and metric weights ``rates``."""

    def __init__(self, g: np.ndarray, rates: Rates = Rates()):
        self.g = np.asarray(g, dtype=float)
        self.rates = rates

    # gradients ---------------------------------------------------------------------------------------------------
    def grad(self, F: Scalar) -> Vector:
        """``∇F`` in ``(a, ŵ, b)``."""
        out = Vector.zero()
        R = out.R
        for (na, mo, pk, ms), c in F.items():
            if na:
                _add(out.A, (na - 1, mo, pk, ms), c * na)
            prev = None
            for j in ms:
                if j == prev:
                    continue
                prev = j
                n = ms.count(j)
                _add(out.B, (na, mo, pk, _replace_one(ms, j, 1)), c * n)
                _add(R.setdefault(0, {}), (na, mo, pk, _replace_one(ms, j, 2)), c * n)
            for i, e in mo:
                _add(out.E.setdefault(i, {}), (na, _mono_shift(mo, i, -1), pk, ms), c * e)
            prev = None
            for k in pk:
                if k == prev:
                    continue
                prev = k
                _add(R.setdefault(k, {}), (na, mo, _remove_one(pk, k), ms), 2 * c * pk.count(k))
        return out

    def phi_gradient(self, mode: Mode) -> Vector:
        """``∇φ_β`` with ``φ_β = a ŵ^β m_{|β|}/sqrt(β!)``."""
        key: Key = (1, tuple(sorted(mode.items)), (), (mode.degree,))
        return self.grad({key: 1 / math.sqrt(mode.factorial)})

    # inner product -----------------------------------------------------------------------------------------------
    def _radial_at(self, R: dict, x: float) -> Scalar:
        out: Scalar = {}
        for k, F in R.items():
            _axpy(out, F, x**k)
        return out

    def dot(self, G: Vector, H: Vector, parts: bool = False) -> "Scalar | dict[str, Scalar]":
        """``⟨G, H⟩_P`` (``parts``: the readout, weights and bias contributions separately)."""
        r = self.rates
        ra = mul(G.A, H.A) if r.a else {}
        rb = mul(G.B, H.B) if r.b else {}
        rw: Scalar = {}
        if r.w:
            for i in set(G.E) | set(H.E):
                gi = float(self.g[i])
                if i in G.E and i in H.E:
                    _axpy(rw, mul(G.E[i], H.E[i]), gi)
                if i in G.E and H.R:
                    _axpy(rw, _times_w(mul(G.E[i], self._radial_at(H.R, gi)), i), gi)
                if i in H.E and G.R:
                    _axpy(rw, _times_w(mul(H.E[i], self._radial_at(G.R, gi)), i), gi)
            for k, Gk in G.R.items():
                for l, Hl in H.R.items():
                    _axpy(rw, _times_P(mul(Gk, Hl), k + l + 1))
        out = {"readout": {k: r.a * v for k, v in ra.items()}, "weights": {k: r.w * v for k, v in rw.items()},
               "bias": {k: r.b * v for k, v in rb.items()}}
        if parts:
            return out
        total: Scalar = {}
        for part in out.values():
            _axpy(total, part)
        return total

    # the flow ----------------------------------------------------------------------------------------------------
    def lie(self, drive: Vector, F: Scalar) -> Scalar:
        """``L F = ⟨drive, ∇F⟩_P`` (``drive = ∇φ_α``)."""
        return self.dot(drive, self.grad(F))

    def lie_vector(self, drive: Vector, G: Vector) -> Vector:
        """``L G`` componentwise (``L ŵ_i = η_w g_i (drive)_i``)."""
        ew = self.rates.w
        out = Vector(self.lie(drive, G.A), self.lie(drive, G.B), {}, {})
        for i, F in G.E.items():
            out.E[i] = self.lie(drive, F)
        if ew and G.R:
            for i, Fa in drive.E.items():       # the explicit part of L ŵ_i times the radial coefficient
                gi = float(self.g[i])
                _axpy(out.E.setdefault(i, {}), mul(Fa, self._radial_at(G.R, gi)), ew * gi)
        for k, F in G.R.items():
            _axpy(out.R.setdefault(k, {}), self.lie(drive, F))
            if ew:
                for l, Fa in drive.R.items():   # the radial part of L ŵ_i: η_w g_i^{1+l} ŵ_i drive^R_l
                    _axpy(out.R.setdefault(k + l + 1, {}), mul(Fa, F), ew)
        return out


# ----------------------------------------------------------------------------------------------------------------
# averaging
# ----------------------------------------------------------------------------------------------------------------
def _partitions(items: list) -> Iterable[list[list]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        yield [[first]] + part
        for k in range(len(part)):
            yield part[:k] + [[first] + part[k]] + part[k + 1:]


def _moment(ks: tuple[int, ...], kappa, memo: dict, one):
    """The joint moment of the multiset ``ks`` from its cumulants ``kappa(block)`` (blocks as sorted tuples):
    ``m(K) = Σ_{B ∋ K_0} κ_B m(K∖B)`` over the subsets ``B`` of positions containing the first one."""
    if not ks:
        return one
    if ks in memo:
        return memo[ks]
    first, rest = ks[0], ks[1:]
    total = None
    n = len(rest)
    for mask in range(1 << n):
        B = (first,) + tuple(rest[k] for k in range(n) if mask >> k & 1)
        R = tuple(rest[k] for k in range(n) if not mask >> k & 1)
        term = kappa(tuple(sorted(B))) * _moment(R, kappa, memo, one)
        total = term if total is None else total + term
    memo[ks] = total
    return total


class _TiltedLaws:
    """``ν_{γ,K}(dQ) = E[ŵ^{2γ} Π_{k∈K} P_k; |ŵ|² ∈ dQ]`` on the grid of a :class:`QLaw` (module docstring)."""

    CHECK = 1e-7

    def __init__(self, law: QLaw):
        self.law = law
        self._sums: dict[tuple[int, int], np.ndarray] = {}
        self._cache: dict[tuple[Gamma, tuple[int, ...], int], tuple[float, np.ndarray, np.ndarray]] = {}
        self._k0: dict = {}
        self._gpow: dict = {}    # e -> (Σ_i g_i^e, g^e)
        self._blocks: dict = {}  # γ -> (first row, end row, {block: κ_B on the contour of those rows})
        self._exact: dict = {}   # γ -> the memo of its moments Σ_π Π_B κ_B(0) (shared by every K)

    def _contour_sum(self, e: int, n: int, lo: int, hi: int) -> np.ndarray:
        """``Σ_i g_i^e (1 + 2 z g_i)^{−n}`` on the contour of rows ``lo:hi`` (whole grid cached)."""
        key = (e, n)
        val = self._sums.get(key)
        if val is None:
            law = self.law
            val = np.zeros(law.z.shape, dtype=complex)
            for gi in law.g:
                val += gi**e / (1 + 2 * gi * law.z) ** n
            self._sums[key] = val
        return val[lo:hi]

    def _cumulant(self, gamma: Gamma, block: Sequence[int], lo: int, hi: int) -> np.ndarray:
        n = len(block)
        e = n + sum(block)
        law = self.law
        val = self._contour_sum(e, n, lo, hi).copy()
        for i, k in gamma:
            val += 2 * k * law.g[i] ** e * law._power(i, n)[lo:hi]
        return math.factorial(n - 1) * 2 ** (n - 1) * val

    def _kappa0(self, gamma: Gamma, block: tuple[int, ...]) -> float:
        key = (gamma, block)
        val = self._k0.get(key)
        if val is None:
            n = len(block)
            e = n + sum(block)
            pw = self._gpow.get(e)
            if pw is None:
                arr = self.law.g**e
                pw = self._gpow[e] = (float(np.sum(arr)), arr)
            s = pw[0] + sum(2 * k * pw[1][i] for i, k in gamma)
            val = self._k0[key] = math.factorial(n - 1) * 2 ** (n - 1) * s
        return val

    def _exact_factor(self, gamma: Gamma, ks: tuple[int, ...]) -> float:
        """``Σ_π Π_B κ_B(0)`` (the tilt's mass relative to ``M_γ``), by the moment–cumulant recursion
        ``m(K) = Σ_{B ∋ K_0} κ_B m(K∖B)``."""
        memo = self._exact.get(gamma)
        if memo is None:
            memo = self._exact[gamma] = {}
        return _moment(tuple(sorted(ks)), lambda B: self._kappa0(gamma, B), memo, 1.0)

    def measure(self, gamma: Gamma, ks: tuple[int, ...], power: float) -> tuple[float, np.ndarray, np.ndarray]:
        """``(mass, weights, rows)`` of ``ν_{γ,K}`` for integrands ``≤ Q^{−e/2}`` (``power = |γ| + |K| − e/2``)."""
        lo = self.law._first_row(power)
        key = (gamma, ks, lo)
        if key in self._cache:
            return self._cache[key]
        law = self.law
        g = law.g
        mass = math.prod(math.prod(range(2 * n - 1, 0, -2)) * g[i] ** n for i, n in gamma)
        factor0 = self._exact_factor(gamma, ks)
        mean = self._exact_factor(gamma, ks + (0,)) / factor0
        second = self._exact_factor(gamma, ks + (0, 0)) / factor0
        base_mean = law.sums(gamma, 1)
        var = 2 * law.sums(gamma, 2)
        cut = max(mean, base_mean) + 12 * math.sqrt(max(second - mean**2, var)) + 80 * float(g.max())
        hi = max(lo, int(np.searchsorted(law.Q, cut, side="right")))
        # the cumulant arrays of γ are kept on a row range shared by its K (a row's values do not depend on the
        # range, so slicing a wider one changes nothing)
        have = self._blocks.get(gamma)
        if have is None or not (have[0] <= lo and hi <= have[1]):
            L, H = (lo, hi) if have is None else (min(lo, have[0]), max(hi, have[1]))
            have = self._blocks[gamma] = (L, H, {})
        L, H, arrays = have
        terms = law._product(gamma, L, H)[lo - L: hi - L]

        def cumulant(B: tuple[int, ...]) -> np.ndarray:
            arr = arrays.get(B)  # type: ignore[call-overload]  # arrays: dict keyed by multiset tuples
            if arr is None:
                arr = arrays[B] = self._cumulant(gamma, B, L, H)  # type: ignore[index,assignment]  # as above
            return arr[lo - L: hi - L]

        poly = _moment(tuple(sorted(ks)), cumulant, {}, np.ones(terms.shape, dtype=complex))
        with np.errstate(all="ignore"):
            dens = np.sum(terms * poly, axis=1).real / factor0
        dens = np.where(np.isfinite(dens), dens, 0.0)
        Q = law.Q[lo:hi]
        wd = law.wq[lo:hi] * dens
        got = [float(np.sum(wd)), float(wd @ Q), float((wd * Q) @ Q)]
        want = [1.0, mean, second]
        if not all(abs(x - y) <= self.CHECK * abs(y) for x, y in zip(got, want)):
            raise GrowthError(
                f"the tilted law of |ŵ|² (γ = {dict(gamma)}, Π P_k with k = {list(ks)}) is not resolved by the "
                f"density grid of this spectrum (moments {got} against {want}); the second-order constants of "
                "this spectrum cannot be computed deterministically — please report the spectrum")
        nz = np.nonzero(dens)[0]
        out = (mass * factor0, wd[nz], nz + lo)
        self._cache[key] = out
        return out


class Averager:
    """``E[·]`` of scalars over the init law of a :class:`~featureode.kernel.network.Network` (module docstring), in
    two phases: :meth:`request` records what an average needs (integrals ``E[ŵ^{2γ} Π P_k Π m_j]`` with their
    coefficients), :meth:`evaluate` computes every recorded average at once — each tilted law of ``|ŵ|²`` once,
    each ``E_b[Π m_j]`` once (products built along their common prefixes), one matrix product between them."""

    def __init__(self, net: Network):
        self.net = net
        self.law = net.q_law
        self.table = _mean_table(net.activation, net.bias_rule, self.law.grid.y0, net.step)
        self.tilted = _TiltedLaws(self.law)
        self._moments = {n: readout_moment(net.parametrization, n) for n in range(0, 13)}
        self._order = net.activation.classical_order
        self._requests: list[dict] = []
        # term (ŵ-monomial, P indices, m orders) -> id; per id: the term, its odd directions, and the key id of
        # the average of its product with every other term id met so far
        self._ids: dict = {}
        self._terms: list = []
        self._odd_of: list = []
        self._combine: list[dict] = []
        self._keys: list = []
        self._key_ids: dict = {}
        self._singular: dict = {}

    # recording ---------------------------------------------------------------------------------------------------
    def _record(self, acc: dict, F: Scalar, factor: float = 1.0) -> None:
        for (na, mo, pk, ms), c in F.items():
            if na % 2 or any(e % 2 for _, e in mo):
                continue
            if na > 12:
                raise GrowthError(f"E[a^{na}] is beyond the readout moments the second-order constants use")
            ea = self._moments[na]
            if ea:
                key = (tuple((i, e // 2) for i, e in mo), pk, ms)
                acc[key] = acc.get(key, 0.0) + factor * c * ea

    def _term_id(self, term: tuple) -> int:
        tid = self._ids.get(term)
        if tid is None:
            tid = self._ids[term] = len(self._terms)
            self._terms.append(term)
            self._odd_of.append(tuple(i for i, e in term[0] if e % 2))
            self._combine.append({})
        return tid

    def _record_product(self, acc: dict, F: Scalar, G: Scalar, factor: float = 1.0) -> None:
        """``E[F G]`` without forming the product: only terms whose product is even in ``a`` and every ``ŵ_i``.
        ``acc`` is keyed by the integer ids of :attr:`_keys` (terms and pairs are memoised by id, so the inner
        loop hashes integers only); :meth:`_keyed` turns it back into average keys."""
        tid, odd = self._term_id, self._odd_of
        groups: dict = defaultdict(list)
        for (nb, mo2, pk2, ms2), c in G.items():
            r = tid((mo2, pk2, ms2))
            groups[(nb % 2, odd[r])].append((nb, r, c))
        mom = self._moments
        terms, keys, key_ids, combine = self._terms, self._keys, self._key_ids, self._combine
        for (na, mo, pk, ms), c in F.items():
            left = tid((mo, pk, ms))
            lst = groups.get((na % 2, odd[left]))
            if not lst:
                continue
            fc = factor * c
            cl = combine[left]
            for nb, right, c2 in lst:
                n = na + nb
                ea = mom.get(n, None)
                if ea is None:
                    raise GrowthError(f"E[a^{n}] is beyond the readout moments the second-order constants use")
                if not ea:
                    continue
                kid = cl.get(right)
                if kid is None:
                    mo2, pk2, ms2 = terms[right]
                    mono = _mono_mul(mo, mo2)
                    key = (tuple((i, e // 2) for i, e in mono), _merge(pk, pk2), _merge(ms, ms2))
                    kid = key_ids.get(key)
                    if kid is None:
                        kid = key_ids[key] = len(keys)
                        keys.append(key)
                    cl[right] = kid
                acc[kid] = acc.get(kid, 0.0) + fc * c2 * ea

    def _keyed(self, acc: dict) -> dict:
        keys = self._keys
        return {keys[k]: v for k, v in acc.items()}

    def request(self, F: Scalar) -> int:
        """Record ``E[F]``; returns its handle for :meth:`evaluate`."""
        acc: dict = {}
        self._record(acc, F)
        self._requests.append(acc)
        return len(self._requests) - 1

    def request_dot(self, alg: Algebra, G: Vector, H: Vector) -> dict[str, int]:
        """Record ``E[⟨G, H⟩_P]`` by part (``"readout"``, ``"weights"``, ``"bias"``); returns their handles."""
        r = alg.rates
        parts: dict[str, dict[Any, Any]] = {"readout": {}, "weights": {}, "bias": {}}
        if r.a:
            self._record_product(parts["readout"], G.A, H.A, r.a)
        if r.b:
            self._record_product(parts["bias"], G.B, H.B, r.b)
        if r.w:
            acc = parts["weights"]
            for i in set(G.E) | set(H.E):
                gi = float(alg.g[i])
                if i in G.E and i in H.E:
                    self._record_product(acc, G.E[i], H.E[i], r.w * gi)
                if i in G.E and H.R:
                    self._record_product(acc, _times_w(G.E[i], i), alg._radial_at(H.R, gi), r.w * gi)
                if i in H.E and G.R:
                    self._record_product(acc, _times_w(H.E[i], i), alg._radial_at(G.R, gi), r.w * gi)
            for k, Gk in G.R.items():
                for l, Hl in H.R.items():
                    self._record_product(acc, _times_P(Gk, k + l + 1), Hl, r.w)
        out = {}
        for name, acc in parts.items():
            self._requests.append(self._keyed(acc))
            out[name] = len(self._requests) - 1
        return out

    # evaluation --------------------------------------------------------------------------------------------------
    def singular_power(self, ms: tuple[int, ...]) -> int:
        """``e`` of :meth:`_singular_power` (memoised per multiset)."""
        e = self._singular.get(ms)
        if e is None:
            e = self._singular[ms] = self._singular_power(ms)
        return e

    def _singular_power(self, ms: tuple[int, ...]) -> int:
        """``e`` with ``E_b[Π m_j](Q) = O(Q^{−e/2})`` as ``Q → 0``: each ``m_j`` beyond the classical order ``r``
        grows like ``s^{−(j−r)}`` in ``|b| ≲ s``, and averaging over ``b`` (σ_b > 0) gains one power of ``s``."""
        r = self._order
        if r is None:
            return 0
        act, sb = self.net.activation, self.net.bias_std
        if sb == 0 and any(act.vanishes_at_zero_bias(j) for j in ms):
            return 0
        e = sum(max(0, j - r) for j in ms)
        return max(0, e - (1 if sb > 0 and e > 0 else 0))

    def _check(self, gamma: Gamma, ks: tuple, ms: tuple, e: int) -> None:
        shape = self.net.dim / 2 + sum(n for _, n in gamma) + len(ks)
        if shape - e / 2 <= 0:
            act = self.net.activation
            raise GrowthError(
                f"activation {act.name!r}: the second-order growth needs the average of a product of derivative "
                f"means m_{list(ms)} that grows like |ŵ|^-{e} as |ŵ| → 0, and it diverges over the init law "
                f"(d = {self.net.dim}, σ_b = {self.net.bias_std}): the eigenvalue is not twice differentiable in "
                "the displacement; use a smoother activation, lower-degree modes or a larger dimension")

    def _products(self, wanted: Iterable[tuple[int, ...]], lo: int, hi: int) -> dict[tuple[int, ...], np.ndarray]:
        """``E_b[Π m_j]`` on grid rows ``lo:hi`` for every multiset in ``wanted`` (sorted, so consecutive ones share
        prefixes: one multiplication per new factor)."""
        t = self.table
        rows = np.arange(lo, hi)
        wb = t.wb[lo:hi] if t.wb.shape[0] > 1 else t.wb
        m = {}
        out = {}
        stack: list[tuple[tuple[int, ...], np.ndarray]] = []
        for ms in sorted(set(wanted)):
            while stack and stack[-1][0] != ms[: len(stack[-1][0])]:
                stack.pop()
            prod = stack[-1][1] if stack else None
            for j in ms[len(stack[-1][0]) if stack else 0:]:
                if j not in m:
                    m[j] = t.m(j, rows)
                prod = m[j] if prod is None else prod * m[j]
                stack.append((ms[: len(stack[-1][0]) + 1] if stack else ms[:1], prod))
            with np.errstate(all="ignore"):
                vals = (np.ones(hi - lo) if prod is None else np.sum(prod * wb, axis=1))
            out[ms] = np.where(np.isfinite(vals), vals, 0.0)
        return out

    def _F_at(self, ms: tuple[int, ...], Q: np.ndarray) -> np.ndarray:
        b, wb = self.table.rule.nodes(Q)
        b = np.broadcast_to(b, (Q.size, b.shape[1]))
        s = np.sqrt(Q)[:, None] * np.ones_like(b)
        prod = np.ones_like(b)
        for j in ms:
            prod = prod * _finite_means(self.net.activation, j, b, s)
        with np.errstate(all="ignore"):
            vals = np.sum(prod * wb, axis=1)
        return np.where(np.isfinite(vals), vals, 0.0)

    def evaluate(self) -> np.ndarray:
        """Every recorded average, in the order of their handles (the record is then cleared)."""
        groups: dict[tuple, dict] = defaultdict(dict)
        for r, acc in enumerate(self._requests):
            for (gamma, ks, ms), c in acc.items():
                groups[(gamma, ks)].setdefault(ms, []).append((r, c))
        measures = {}
        # by γ, so that the laws of one γ reuse its contour products and cumulants (the order changes no value)
        for (gamma, ks), by_ms in sorted(groups.items(), key=lambda item: (item[0][0], len(item[0][1]))):
            ems = [self.singular_power(ms) for ms in by_ms]
            e = max(ems, default=0)
            if e:
                shape = self.net.dim / 2 + sum(n for _, n in gamma) + len(ks)
                if shape - e / 2 <= 0:
                    for ms, em in zip(by_ms, ems):
                        self._check(gamma, ks, ms, em)
            power = sum(n for _, n in gamma) + len(ks) - e / 2
            if len(ks) <= 1 and all(k == 1 for k in ks):
                meas = self.law.measure(gamma, bool(ks), e)
                measures[(gamma, ks)] = (meas.mass, meas.w, meas.rows, meas.Q, e)
            else:
                mass, w, rows = self.tilted.measure(gamma, ks, power)
                measures[(gamma, ks)] = (mass, w, rows, None, e)  # type: ignore[assignment]  # no Q on the tilted law
        rows_all = [m[2] for m in measures.values() if m[2] is not None and m[2].size]
        lo = min((int(r.min()) for r in rows_all), default=0)
        hi = max((int(r.max()) + 1 for r in rows_all), default=0)
        wanted = {ms for key, by_ms in groups.items() if measures[key][2] is not None for ms in by_ms}
        F = self._products(wanted, lo, hi) if wanted else {}
        F_index = {ms: n for n, ms in enumerate(F)}
        Fmat = np.array(list(F.values())) if F else np.zeros((0, 0))
        out = [0.0] * len(self._requests)   # Python floats: the same double arithmetic, without NumPy indexing
        for key, by_ms in groups.items():
            mass, w, rows, Qg, e = measures[key]  # type: ignore[assignment]  # rows is None is handled next
            if rows is None:
                vals = {ms: mass * float(np.sum(w * self._F_at(ms, Qg))) for ms in by_ms}
            else:
                if not rows.size:
                    continue
                bound = np.abs(w) * self.law.Q[rows] ** (-e / 2) if e else np.abs(w)
                keep = bound > 1e-20 * bound.max()
                wk, idx = w[keep], rows[keep] - lo
                sel = Fmat[[F_index[ms] for ms in by_ms]][:, idx] @ wk   # every E_b[Π m] of the group at once
                vals = dict(zip(by_ms, (mass * sel).tolist()))
            for ms, users in by_ms.items():
                for r, c in users:
                    out[r] += c * vals[ms]
        self._requests = []
        return np.array(out)
