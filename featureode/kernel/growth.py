"""The deterministic average of the per-neuron flow algebra (:mod:`featureode.kernel.algebra`): the exact
second-order growth of the init kernel.

Averages. ``E[a^n]`` from the parametrization; a monomial ``ŵ^μ`` with an odd exponent averages to 0, an even one
``ŵ^{2γ}`` size-biases the law of ``Q``; a product ``Π_j P_{k_j}`` tilts it further: with the cumulants
``κ_B(t) = (|B|−1)! 2^{|B|−1} Σ_i (2γ_i+1) g_i^{|B| + Σ_{j∈B} k_j} / (1 + 2t g_i)^{|B|}`` of the ``P_k`` under
``ŵ^{2γ} e^{−tQ}``, ``E[ŵ^{2γ} Π_j P_{k_j} e^{−tQ}] = M_γ L_γ(t) Σ_{partitions π} Π_{B∈π} κ_B(t)``
(``derivations/growth_algebra.py`` derives it). The measure is recovered on the kernel's logarithmic ``Q`` grid by
the same Talbot inversion as :class:`~featureode.kernel.initlaw.QLaw` (accepted only when it reproduces the exact
mass, mean and second moment of the tilted law), and ``E_b[Π m_j](Q)`` on the kernel's bias rule
(:meth:`~featureode.kernel.averagers.MeanTable.products`). For ``Π P = 1`` and ``Π P = P_1`` the kernel's own
measures are used, so ``E|u_0|²`` equals the kernel's ``λ_β(0)``.

The algebra's names (:class:`Rates`, :class:`Vector`, :class:`Algebra`, :class:`GrowthError`) are importable from
here too.
"""
from __future__ import annotations

import math
import weakref
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Any, Sequence

import numpy as np

from featureode.kernel.algebra import (
    Algebra,
    GrowthError,
    Rates,
    Scalar,
    Vector,
    fields,
    g_mask,
    g_unit,
    odd_mask,
    slot_kinds,
    times_code,
    unit,
)
from featureode.kernel.averagers import _finite_means, _mean_table
from featureode.kernel.initlaw import Gamma, QLaw
from featureode.kernel.loops import window_sums
from featureode.kernel.network import Network
from featureode.kernel.perneuron import singular_power

__all__ = ["Rates", "Vector", "Algebra", "Averager", "Recorder", "Recorded", "GrowthError", "readout_moment"]


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
# averaging
# ----------------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def _splits(n: int) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """The ways to split ``n`` positions into a chosen and a remaining subsequence (by the bit mask of the chosen)."""
    return tuple((tuple(k for k in range(n) if mask >> k & 1), tuple(k for k in range(n) if not mask >> k & 1))
                 for mask in range(1 << n))


def _moment(ks: tuple[int, ...], kappa, memo: dict, one):
    """The joint moment of the sorted multiset ``ks`` from its cumulants ``κ_B = kappa(|B|, Σ_{k∈B} k)`` (a
    cumulant of the ``P_k`` depends on nothing else): ``m(K) = Σ_{B ∋ K_0} κ_B m(K∖B)`` over the subsets ``B`` of
    positions containing the first one."""
    if not ks:
        return one
    if ks in memo:
        return memo[ks]
    first, rest = ks[0], ks[1:]
    pick = rest.__getitem__
    total = None
    for chosen, left in _splits(len(rest)):
        kB = kappa(1 + len(chosen), first + sum(map(pick, chosen)))
        term = kB * _moment(tuple(map(pick, left)), kappa, memo, one) if left else kB
        total = term if total is None else total + term
    memo[ks] = total
    return total


class _TiltedLaws:
    """``ν_{γ,K}(dQ) = E[ŵ^{2γ} Π_{k∈K} P_k; |ŵ|² ∈ dQ]`` on the grid of a :class:`QLaw` (module docstring)."""

    CHECK = 1e-7

    def __init__(self, law: QLaw):
        self.law = law
        self._cache: dict[tuple[Gamma, tuple[int, ...], int], tuple[float, np.ndarray, np.ndarray]] = {}
        self._gpow: dict = {}    # e -> (Σ_i g_i^e, g^e)

    def _exact_factors(self, jobs: "dict[Gamma, list[tuple[int, ...]]]") -> "dict[Gamma, list[float]]":
        """``Σ_π Π_B κ_B(0)`` (the tilt's mass relative to ``M_γ``) of each sorted ``K`` of ``jobs[γ]``, for every γ:
        the moment–cumulant recursion ``m(K) = Σ_{B ∋ K_0} κ_B m(K∖B)`` as the traced program of
        :func:`_moment_program` (shared sub-moments once), run once for all the γ that ask for the same list of
        ``K`` (registers are arrays over those γ), on their numbers
        ``κ_B(0) = (|B|−1)! 2^{|B|−1} Σ_i (2γ_i + 1) g_i^{|B| + Σ_{k∈B} k}``."""
        by_list: dict[tuple[tuple[int, ...], ...], list[Gamma]] = {}
        for gamma, asked in jobs.items():
            by_list.setdefault(tuple(asked), []).append(gamma)
        g = self.law.g
        out: dict[Gamma, list[float]] = {}
        for ks_list, gammas in by_list.items():
            wanted = tuple(dict.fromkeys(ks for ks in ks_list if ks))
            cumulants, program, n_reg, outs = _moment_program(wanted)
            twice = np.zeros((len(gammas), g.size))   # 2γ_i per γ of this list
            for m, gamma in enumerate(gammas):
                for i, k in gamma:
                    twice[m, i] = 2 * k
            reg: list = [None] * n_reg
            for n, (size, s_) in enumerate(cumulants):
                e = size + s_
                pw = self._gpow.get(e)
                if pw is None:
                    arr = g**e
                    pw = self._gpow[e] = (float(np.sum(arr)), arr)
                reg[n] = math.factorial(size - 1) * 2 ** (size - 1) * (pw[0] + twice @ pw[1])
            for op, d, a, b in program:
                reg[d] = reg[a] * reg[b] if op == 0 else reg[a] + reg[b]
            value = dict(zip(wanted, (reg[r] for r in outs)))
            for m, gamma in enumerate(gammas):
                out[gamma] = [float(value[ks][m]) if ks else 1.0 for ks in ks_list]
        return out

    def measures(self, gamma: Gamma, wanted: Sequence[tuple[tuple[int, ...], float]]
                 ) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """``(mass, weights, rows)`` of ``ν_{γ,K}`` for each ``(K, power)`` of ``wanted`` (``K`` sorted), for
        integrands ``≤ Q^{−e/2}`` (``power = |γ| + |K| − e/2``): :meth:`measures_many` of one γ."""
        return self.measures_many({gamma: list(wanted)})[gamma]

    def measures_many(self, requests: "dict[Gamma, list[tuple[tuple[int, ...], float]]]"
                      ) -> "dict[Gamma, list[tuple[float, np.ndarray, np.ndarray]]]":
        """:meth:`measures` of every γ of ``requests``, in one compiled pass
        (:func:`~featureode.kernel.loops.tilted_densities`): per γ one contour product, its cumulants ``κ_B`` and
        the moment polynomials of all its ``K`` (a program of products and sums traced once per list of ``K``,
        :func:`_moment_program`), on the rows every ``K`` needs (a row's value does not depend on the range it is
        computed on). Each law is accepted only if it reproduces its exact mass, mean and second moment."""
        law = self.law
        out: dict[Gamma, list] = {gamma: [None] * len(wanted) for gamma, wanted in requests.items()}
        todo: dict[Gamma, list] = {}
        missing: dict[Gamma, list[tuple[int, tuple[int, ...], int]]] = {}
        for gamma, wanted in requests.items():
            for n, (ks, power) in enumerate(wanted):
                lo = law._first_row(power)
                hit = self._cache.get((gamma, ks, lo))
                if hit is None:
                    missing.setdefault(gamma, []).append((n, ks, lo))
                else:
                    out[gamma][n] = hit
        # per K its mass, mean and second moment relative to M_γ: m(K), m(K + {0}), m(K + {0, 0})
        exact = self._exact_factors({gamma: [tuple(sorted(ks + extra)) for _, ks, _ in asked
                                             for extra in ((), (0,), (0, 0))] for gamma, asked in missing.items()})
        for gamma, asked in missing.items():
            base_mean, var = law.sums(gamma, 1), 2 * law.sums(gamma, 2)
            values = exact[gamma]
            for j, (n, ks, lo) in enumerate(asked):
                factor0 = values[3 * j]
                mean, second = values[3 * j + 1] / factor0, values[3 * j + 2] / factor0
                cut = max(mean, base_mean) + 12 * math.sqrt(max(second - mean**2, var)) + 80 * law._top
                hi = max(lo, int(np.searchsorted(law.Q, cut, side="right")))
                todo.setdefault(gamma, []).append((n, ks, lo, hi, factor0, mean, second))
        if not todo:
            return out
        gammas = list(todo)
        L = min(t[2] for jobs in todo.values() for t in jobs)
        H = max(t[3] for jobs in todo.values() for t in jobs)
        used = sorted({i for gamma in gammas for i, _ in gamma})
        slot = {i: n for n, i in enumerate(used)}
        # the factors' directions' (1 + 2 z g_i)^{-1} on these rows
        recip = 1 / (1 + 2 * law.g[used][:, None, None] * law.z[None, L:H]) if used else \
            np.ones((1, H - L, law.talbot), dtype=complex)
        gf = law._gf
        sums: dict[tuple[int, int], int] = {}                 # (e, n) -> row of csum
        row0, row1, fstart, fdim, fexp = [], [], [0], [], []
        qstart, qsum, qpow, qscale, qcoef = [0], [], [], [], []
        istart, iop, iarg, nreg, jstart, jreg, jlo, jhi = [0], [], [], [], [0], [], [], []
        width = max(len(gamma) for gamma in gammas) or 1
        for gamma in gammas:
            jobs = todo[gamma]
            row0.append(min(t[2] for t in jobs) - L)
            row1.append(max(t[3] for t in jobs) - L)
            for i, k in gamma:
                fdim.append(slot[i])
                fexp.append(k)
            fstart.append(len(fdim))
            cumulants, program, n_reg, outs = _moment_program(tuple(t[1] for t in jobs))
            for n, s_ in cumulants:
                e = n + s_
                qsum.append(sums.setdefault((e, n), len(sums)))
                qpow.append(n)
                qscale.append(float(math.factorial(n - 1) * 2 ** (n - 1)))
                qcoef.append([2 * k * gf[i] ** e for i, k in gamma] + [0.0] * (width - len(gamma)))
            qstart.append(len(qsum))
            for op, d, a, b in program:
                iop.append(op)
                iarg.append((d, a, b))
            istart.append(len(iop))
            nreg.append(n_reg)
            for (n, ks, lo, hi, *_), reg in zip(jobs, outs):
                jreg.append(reg)
                jlo.append(lo - L)
                jhi.append(hi - L)
            jstart.append(len(jreg))
        from featureode.kernel.loops import contour_sums, tilted_densities

        csum = contour_sums(law.z[L:H], law.g, list(sums))   # Σ_i g_i^e (1 + 2 z g_i)^{-n} per (e, n)
        i64 = np.int64

        with np.errstate(all="ignore"):
            dens = tilted_densities(
                law.base(L, H), recip, csum, np.array(row0, i64), np.array(row1, i64), np.array(fstart, i64),
                np.array(fdim, i64), np.array(fexp, i64), np.array(qstart, i64), np.array(qsum, i64),
                np.array(qpow, i64), np.array(qscale), np.array(qcoef).reshape(len(qsum), width),
                np.array(istart, i64), np.array(iop, i64), np.array(iarg, i64).reshape(len(iop), 3),
                np.array(nreg, i64), np.array(jstart, i64), np.array(jreg, i64), np.array(jlo, i64),
                np.array(jhi, i64))
        jobs_all = [(gamma, t) for gamma in gammas for t in todo[gamma]]
        dens /= np.array([t[4] for _, t in jobs_all])[:, None]
        dens[~np.isfinite(dens)] = 0.0
        Q = law.Q[L:H]
        wd = law.wq[L:H] * dens
        got = np.stack([np.sum(wd, axis=1), wd @ Q, wd @ (Q * Q)], axis=1)
        want = np.array([[1.0, t[5], t[6]] for _, t in jobs_all])
        bad = np.flatnonzero(~np.all(np.abs(got - want) <= self.CHECK * np.abs(want), axis=1))
        if bad.size:
            gamma, (_, ks, *_rest) = jobs_all[int(bad[0])]
            raise GrowthError(
                f"the tilted law of |ŵ|² (γ = {dict(gamma)}, Π P_k with k = {list(ks)}) is not resolved by the "
                f"density grid of this spectrum (moments {got[bad[0]].tolist()} against {want[bad[0]].tolist()}); "
                "the second-order constants of this spectrum cannot be computed deterministically — please report "
                "the spectrum")
        for m, (gamma, (n, ks, lo, hi, factor0, *_)) in enumerate(jobs_all):
            mass = math.prod(math.prod(range(2 * k - 1, 0, -2)) * gf[i] ** k for i, k in gamma)
            nz = np.nonzero(dens[m])[0]
            out[gamma][n] = self._cache[(gamma, ks, lo)] = (mass * factor0, wd[m, nz], nz + L)
        return out


class _Register:
    """A register of a traced moment program (:func:`_moment_program`): products and sums append instructions."""

    __slots__ = ("n", "code")

    def __init__(self, n: int, code: list):
        self.n, self.code = n, code

    def _emit(self, op: int, other: "_Register") -> "_Register":
        dst = _Register(self.code[2][0], self.code)
        self.code[2][0] += 1
        self.code[0].append((op, dst.n, self.n, other.n))
        return dst

    def __mul__(self, other: "_Register") -> "_Register":
        return self._emit(0, other)

    def __add__(self, other: "_Register") -> "_Register":
        return self._emit(1, other)


@lru_cache(maxsize=4096)
def _moment_program(ks_list: tuple[tuple[int, ...], ...]
                    ) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int, int, int], ...], int, tuple[int, ...]]:
    """The moment–cumulant recursion of :func:`_moment` for every (non-empty, sorted) ``K`` of ``ks_list``, traced
    into a program (shared sub-moments computed once): ``(cumulants, instructions, registers, outputs)`` with the
    cumulants ``(|B|, Σ_{k∈B} k)`` in registers ``0 … len(cumulants) − 1``, instructions ``(op, dst, a, b)`` (0: product,
    1: sum) and the register of each ``K``'s moment."""
    code: list = [[], {}, [0]]   # instructions, cumulant -> register, count of the other registers

    def kappa(n: int, s: int) -> _Register:
        key = (n, s)
        if key not in code[1]:
            code[1][key] = _Register(-1 - len(code[1]), code)   # renumbered below
        return code[1][key]

    memo: dict = {}
    outs = [_moment(ks, kappa, memo, None).n for ks in ks_list]
    n_cum = len(code[1])

    def reg(n: int) -> int:   # cumulants first (0 … n_cum − 1), then the others in order of creation
        return -1 - n if n < 0 else n_cum + n

    program = tuple((op, reg(d), reg(a), reg(b)) for op, d, a, b in code[0])
    return tuple(code[1]), program, n_cum + code[2][0], tuple(reg(n) for n in outs)


class Recorder:
    """The recording half of :class:`Averager`: what each requested average ``E[F]`` needs, as integrals
    ``E[ŵ^{2γ} Π P_k Π m_j]`` times coefficients ``c Π g_i^{e_i}`` (``E[a^n]`` from ``moments`` folded into ``c``,
    the powers of the ``g_i`` kept as code fields, :mod:`featureode.kernel.algebra`). It does not depend on the
    spectrum, the activation or the bias: :meth:`freeze` makes a :class:`Recorded` that :meth:`Averager.evaluate`
    evaluates for any network with these readout moments."""

    def __init__(self, moments: "dict[int, float]"):
        self._moments = dict(moments)
        self._requests: list[dict[int, float]] = []   # per handle: code of ŵ^{2γ} Π P_k Π m_j Π g_i -> coefficient

    def _record(self, acc: dict, F: Scalar, factor: float = 1.0) -> None:
        odd = odd_mask()
        for (na, code), c in F.items():
            if na % 2 or code & odd:
                continue
            if na > 12:
                raise GrowthError(f"E[a^{na}] is beyond the readout moments the second-order constants use")
            ea = self._moments[na]
            if ea:
                acc[code] = acc.get(code, 0.0) + factor * c * ea

    def _record_product(self, acc: dict, F: Scalar, G: Scalar, factor: float = 1.0) -> None:
        """``E[F G]`` without forming the product: only terms whose product is even in ``a`` and every ``ŵ_i``
        (equal parities); ``acc`` is keyed by the code of the product (the sum of the codes)."""
        odd = odd_mask()
        groups: dict = defaultdict(list)
        for (nb, code), c in G.items():
            groups[(nb % 2, code & odd)].append((nb, code, c))
        mom = self._moments
        get = acc.get
        for (na, left), c in F.items():
            lst = groups.get((na % 2, left & odd))
            if not lst:
                continue
            fc = factor * c
            for nb, right, c2 in lst:
                ea = mom.get(na + nb)
                if ea is None:
                    raise GrowthError(f"E[a^{na + nb}] is beyond the readout moments the second-order constants use")
                if ea:
                    code = left + right
                    acc[code] = get(code, 0.0) + fc * c2 * ea

    def request(self, F: Scalar) -> int:
        """Record ``E[F]``; returns its handle (its row in :meth:`Averager.evaluate`'s result)."""
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
                gi = g_unit(i)
                if i in G.E and i in H.E:
                    self._record_product(acc, times_code(G.E[i], gi), H.E[i], r.w)
                wi = unit("w", i) + gi
                if i in G.E and H.R:
                    self._record_product(acc, times_code(G.E[i], wi), alg.radial_at(H.R, i), r.w)
                if i in H.E and G.R:
                    self._record_product(acc, times_code(H.E[i], wi), alg.radial_at(G.R, i), r.w)
            for k, Gk in G.R.items():
                for l, Hl in H.R.items():
                    self._record_product(acc, times_code(Gk, unit("P", k + l + 1)), Hl, r.w)
        out = {}
        for name, acc in parts.items():
            self._requests.append(acc)
            out[name] = len(self._requests) - 1
        return out

    def freeze(self) -> "Recorded":
        """Everything recorded so far as a :class:`Recorded` (the record is then cleared)."""
        reqs, self._requests = self._requests, []
        entries = list(chain.from_iterable(reqs))                 # the codes of every request, request by request
        coef = np.fromiter(chain.from_iterable(acc.values() for acc in reqs), dtype=float, count=len(entries))
        req = np.repeat(np.arange(len(reqs)), [len(acc) for acc in reqs])
        # the factor Π g_i^{e_i} apart: its exponents per distinct code, then the code without it
        full = list(dict.fromkeys(entries))
        gm = g_mask()
        n_slots = len(slot_kinds())
        gcols = [n for n, (kind, _) in enumerate(slot_kinds()) if kind == "g"]
        exps = fields(full, n_slots)[:, gcols] if full and gcols else np.zeros((len(full), 0), dtype=np.uint16)
        used = np.flatnonzero(exps.any(axis=0)) if exps.size else np.zeros(0, dtype=np.intp)
        gcols = [gcols[n] for n in used]        # the directions whose g_i this record holds (slots are process-wide)
        if full and gcols:
            monos, full_mono = np.unique(exps[:, used], axis=0, return_inverse=True)
        else:   # no factor g_i anywhere: one monomial, 1
            monos, full_mono = np.zeros((1, len(gcols)), dtype=np.uint16), np.zeros(len(full), dtype=np.intp)
        stripped = [c & ~gm for c in full]
        codes = list(dict.fromkeys(stripped))
        index = dict(zip(codes, range(len(codes))))
        full_code = np.fromiter(map(index.__getitem__, stripped), dtype=np.intp, count=len(full))
        at = dict(zip(full, range(len(full))))
        entry_full = np.fromiter(map(at.__getitem__, entries), dtype=np.intp, count=len(entries))
        groups, ms_list, key_group, key_ms = _decode(codes)
        return Recorded(len(reqs), req, coef, np.array([slot_kinds()[n][1] for n in gcols], dtype=np.intp),
                        monos.astype(float), full_mono.ravel()[entry_full], full_code[entry_full], groups, ms_list,
                        key_group, key_ms)


@dataclass(frozen=True)
class Recorded:
    """A frozen record of :class:`Recorder` (spectrum-independent): per *entry* (a term of a request) its request
    ``req``, its coefficient ``coef`` without the factor ``Π_i g_i^{e_i}``, that factor as a row ``mono`` of
    ``monos`` (exponents on the directions ``g_dirs``), and its average ``E[ŵ^{2γ} Π P_k Π m_j]`` as ``code``, an
    index into the decoded averages: the group ``groups[key_group[code]] = (γ, K)`` (one law of ``|ŵ|²``) and the
    multiset ``ms_list[key_ms[code]] = J`` (one ``E_b[Π m_j]``)."""

    n_requests: int
    req: np.ndarray
    coef: np.ndarray
    g_dirs: np.ndarray
    monos: np.ndarray
    mono: np.ndarray
    code: np.ndarray
    groups: list
    ms_list: list
    key_group: np.ndarray
    key_ms: np.ndarray


def _decode(codes: list[int]) -> tuple[list[tuple[Gamma, tuple[int, ...]]], list[tuple[int, ...]], np.ndarray,
                                       np.ndarray]:
    """The averages behind ``codes`` (without ``g`` fields): the groups ``(γ, K)`` (one law of ``|ŵ|²`` each), the
    multisets ``J`` of m orders (one ``E_b[Π m_j]`` each), and per code the index of its group and of its ``J``."""
    slots = slot_kinds() + [("P", -1)]                       # a last field that is 0: never an empty selection
    table = np.zeros((len(codes), len(slots)), dtype=np.uint16)
    table[:, :-1] = fields(codes, len(slots) - 1)
    on_law = [n for n, (kind, _) in enumerate(slots) if kind in ("w", "P")]
    on_b = [n for n, (kind, _) in enumerate(slots) if kind == "m"] + [len(slots) - 1]

    def unique_rows(cols: list[int]) -> tuple[list[list[int]], np.ndarray]:
        block = np.ascontiguousarray(table[:, cols])
        _, first, inverse = np.unique(block.view(np.dtype((np.void, 2 * len(cols)))).ravel(), return_index=True,
                                      return_inverse=True)
        return block[first].tolist(), inverse.ravel()

    def multiset(row: list[int], cols: list[int], kind: str) -> tuple[int, ...]:
        return tuple(sorted(v for n, c in zip(cols, row) if c and slots[n][0] == kind for v in [slots[n][1]] * c))

    law_rows, key_group = unique_rows(on_law)
    b_rows, key_ms = unique_rows(on_b)
    groups = [(tuple(sorted((slots[n][1], c // 2) for n, c in zip(on_law, row) if c and slots[n][0] == "w")),
               multiset(row, on_law, "P")) for row in law_rows]
    return groups, [multiset(row, on_b, "m") for row in b_rows], key_group, key_ms


#: per activation and sign of σ_b: multiset of m orders -> singular power (:meth:`Averager.singular_power`)
_SINGULAR: "weakref.WeakKeyDictionary[Any, dict[bool, dict[tuple[int, ...], int]]]" = weakref.WeakKeyDictionary()


class Averager:
    """``E[·]`` of scalars over the init law of a :class:`~featureode.kernel.network.Network` (module docstring), in
    two phases: :meth:`request` records what an average needs (integrals ``E[ŵ^{2γ} Π P_k Π m_j]`` with their
    coefficients, by a :class:`Recorder`), :meth:`evaluate` computes every recorded average at once — each tilted
    law of ``|ŵ|²`` once, each ``E_b[Π m_j]`` once (products built along their common prefixes), one matrix product
    between them. A record does not depend on the spectrum: :meth:`evaluate` also takes one made elsewhere."""

    def __init__(self, net: Network):
        self.net = net
        self.law = net.q_law
        self.table = _mean_table(net.activation, net.bias_rule, self.law.grid.y0, net.step)
        self.tilted = _TiltedLaws(self.law)
        self.moments = {n: readout_moment(net.parametrization, n) for n in range(0, 13)}
        self.recorder = Recorder(self.moments)
        self._singular: dict = _SINGULAR.setdefault(net.activation, {}).setdefault(net.bias_std > 0, {})

    # recording ---------------------------------------------------------------------------------------------------
    def request(self, F: Scalar) -> int:
        """Record ``E[F]``; returns its handle for :meth:`evaluate`."""
        return self.recorder.request(F)

    def request_dot(self, alg: Algebra, G: Vector, H: Vector) -> dict[str, int]:
        """Record ``E[⟨G, H⟩_P]`` by part (``"readout"``, ``"weights"``, ``"bias"``); returns their handles."""
        return self.recorder.request_dot(alg, G, H)

    # evaluation --------------------------------------------------------------------------------------------------
    def singular_power(self, ms: tuple[int, ...]) -> int:
        """``e`` of :meth:`_singular_power` (memoised per multiset, for every network of this activation and sign
        of σ_b: it depends on nothing else)."""
        e = self._singular.get(ms)
        if e is None:
            e = self._singular[ms] = self._singular_power(ms)
        return e

    def _singular_power(self, ms: tuple[int, ...]) -> int:
        """``e`` with ``E_b[Π m_j](Q) = O(Q^{−e/2})`` as ``Q → 0`` (:func:`~featureode.kernel.perneuron.singular_power`
        of the multiset ``ms``)."""
        return singular_power(self.net.activation, self.net.bias_std, *ms)

    def _check(self, gamma: Gamma, ks: tuple, ms: tuple, e: int) -> None:
        shape = self.net.dim / 2 + sum(n for _, n in gamma) + len(ks)
        if shape - e / 2 <= 0:
            act = self.net.activation
            raise GrowthError(
                f"activation {act.name!r}: the second-order growth needs the average of a product of derivative "
                f"means m_{list(ms)} that grows like |ŵ|^-{e} as |ŵ| → 0, and it diverges over the init law "
                f"(d = {self.net.dim}, σ_b = {self.net.bias_std}): the eigenvalue is not twice differentiable in "
                "the displacement; use a smoother activation, lower-degree modes or a larger dimension")

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

    def evaluate(self, recorded: "Recorded | None" = None) -> np.ndarray:
        """Every average of ``recorded`` (default: what :meth:`request` recorded, then cleared), in the order of
        their handles, for this network."""
        rec = self.recorder.freeze() if recorded is None else recorded
        if rec.g_dirs.size and np.any(rec.g_dirs >= self.net.dim):
            raise GrowthError(f"the record names direction {int(rec.g_dirs.max())}, beyond this network's "
                              f"dimension d = {self.net.dim}")
        g = np.asarray(self.net.g, dtype=float)
        gfac = np.prod(g[rec.g_dirs][None, :] ** rec.monos, axis=1)   # per monomial Π_i g_i^{e_i}
        coef = rec.coef * gfac[rec.mono]
        req, entry = rec.req, rec.code
        groups, ms_list, key_group, key_ms = rec.groups, rec.ms_list, rec.key_group, rec.key_ms
        # per group the largest singular power of its E_b[Π m_j] (the law is discretised for the most singular)
        sing = np.array([self.singular_power(ms) for ms in ms_list], dtype=np.intp)
        e_group = np.zeros(len(groups), dtype=np.intp)
        np.maximum.at(e_group, key_group, sing[key_ms])

        def members(gid: int) -> list[int]:
            return np.unique(key_ms[key_group == gid]).tolist()

        on_grid: dict[int, tuple[float, np.ndarray, np.ndarray]] = {}    # group -> mass, weights, grid rows
        off_grid: dict[int, tuple[float, np.ndarray, np.ndarray]] = {}   # group -> mass, weights, nodes Q
        by_gamma: dict[Gamma, list[int]] = defaultdict(list)
        for gid, (gamma, _) in enumerate(groups):
            by_gamma[gamma].append(gid)
        plain: list[tuple[int, Gamma, bool, int]] = []                      # laws of the kernel's QLaw
        tilted: dict[Gamma, list[tuple[int, tuple[int, ...], float]]] = {}  # the rest, per γ
        for gamma in sorted(by_gamma):
            for gid in sorted(by_gamma[gamma], key=lambda n: len(groups[n][1])):
                ks = groups[gid][1]
                e = int(e_group[gid])
                if e and self.net.dim / 2 + sum(n for _, n in gamma) + len(ks) - e / 2 <= 0:
                    for n in members(gid):
                        self._check(gamma, ks, ms_list[n], int(sing[n]))
                if len(ks) <= 1 and all(k == 1 for k in ks):
                    plain.append((gid, gamma, bool(ks), e))
                else:
                    tilted.setdefault(gamma, []).append((gid, ks, sum(n for _, n in gamma) + len(ks) - e / 2))
        for (gid, *_), meas in zip(plain, self.law.measures([(gm, w, e) for _, gm, w, e in plain])):   # one pass
            if meas.rows is None:   # a Gauss rule (the density grid could not resolve the law)
                off_grid[gid] = (meas.mass, meas.w, meas.Q)
            else:
                on_grid[gid] = (meas.mass, meas.w, meas.rows)
        many = self.tilted.measures_many({gamma: [(ks, power) for _, ks, power in lst] for gamma, lst in tilted.items()})
        for gamma, lst in tilted.items():   # the laws of one γ share its contour products and cumulants
            on_grid.update((gid, law) for (gid, _, _), law in zip(lst, many[gamma]))
        # every law on the grid as its points (those where the weight times the bound Q^{-e/2} of the integrand is
        # below 1e-20 of its largest are dropped), every E_b[Π m_j] on the rows they need: the average of (γ, K, J)
        # is mass_{γK} Σ_points w E_b[Π_J m](Q_row). Each average that an entry uses is one sum over the window of
        # rows its own law sets, so that its value does not depend on the other laws of the batch (a shared matrix
        # product over the batch's window summed each point at a position that the batch set)
        laws = list(on_grid.values())
        rows = np.concatenate([law[2] for law in laws] or [np.zeros(0, dtype=np.intp)])
        weights = np.concatenate([law[1] for law in laws] or [np.zeros(0)])
        which = np.repeat(np.fromiter(on_grid, dtype=np.intp, count=len(on_grid)), [law[2].size for law in laws])
        lo, hi = (int(rows.min()), int(rows.max()) + 1) if rows.size else (0, 0)
        power = e_group[which]
        bound = np.where(power > 0, np.abs(weights) * self.law.Q[rows] ** (-power / 2), np.abs(weights))
        top = np.zeros(len(groups))
        np.maximum.at(top, which, bound)
        keep = bound > 1e-20 * top[which]
        order = np.argsort(which[keep], kind="stable")              # grouped by group
        which, weights, rows = which[keep][order], weights[keep][order], rows[keep][order]
        mass = np.zeros(len(groups))
        mass[list(on_grid)] = [law[0] for law in laws]
        count = np.bincount(which, minlength=len(groups))
        first = np.concatenate([[0], np.cumsum(count)[:-1]])        # each group's first point
        P = self.table.products(ms_list, np.arange(lo, hi))
        vals = np.zeros((len(groups), len(ms_list)))
        # each group's law on its own rows [start, stop) (dropped points as zeros), laid end to end in `dense`
        filled = count > 0
        start, stop = np.zeros(len(groups), dtype=np.intp), np.zeros(len(groups), dtype=np.intp)
        if rows.size:
            start[filled] = np.minimum.reduceat(rows, first[filled])
            stop[filled] = np.maximum.reduceat(rows, first[filled]) + 1
        offset = np.concatenate([[0], np.cumsum(stop - start)[:-1]])
        dense = np.zeros(int((stop - start).sum()))
        dense[np.repeat(offset - start, count) + rows] = weights
        used = np.zeros((len(groups), len(ms_list)), dtype=bool)   # the (group, J) the entries use
        used[key_group[entry], key_ms[entry]] = True
        used &= filled[:, None]
        gid_of, j_of = np.nonzero(used)                             # group-major
        vals[gid_of, j_of] = mass[gid_of] * window_sums(P, dense, j_of, gid_of, start[gid_of] - lo,
                                                        stop[gid_of] - lo, offset[gid_of])
        for gid, (ms_mass, wq, Qg) in off_grid.items():
            for n in members(gid):
                vals[gid, n] = ms_mass * float(np.sum(wq * self._F_at(ms_list[n], Qg)))
        return np.bincount(req, weights=coef * vals[key_group[entry], key_ms[entry]], minlength=rec.n_requests)
