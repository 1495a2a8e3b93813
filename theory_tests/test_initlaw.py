"""The law of |ŵ|² (:mod:`featureode.kernel.initlaw`): the batched Talbot densities against their closed-form
Laplace transforms, against a direct NumPy evaluation of the same contour sums, and one-by-one against batched; the
tilted laws of the second-order growth against their cumulant formula. Each on both backends of
:mod:`featureode.kernel.loops` (numba and its NumPy twin)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from featureode.kernel.initlaw import QLaw
from featureode.kernel.loops import talbot_densities


@pytest.fixture(params=["numba", "numpy"])
def loops(request, monkeypatch) -> str:
    """Run the test on one backend of the kernel's loops."""
    monkeypatch.setenv("FEATUREODE_KERNEL_LOOPS", request.param)
    return request.param


def _spectrum(d: int, power: float) -> tuple[float, ...]:
    g = (np.arange(d) + 1.0) ** -power
    return tuple(float(x) for x in g / g.sum())


GAMMAS = [(), ((0, 1),), ((2, 1),), ((0, 1), (3, 2)), ((1, 2), (4, 1), (6, 1)), ((0, 3),), ((5, 1), (7, 2))]


def _laplace(g: tuple[float, ...], gamma, weighted: bool, t: float) -> float:
    """``E[ŵ^{2γ} (P) e^{−tQ}] = M_γ Π_i (1 + 2t g_i)^{−(1/2+γ_i)} (· Σ_i (2γ_i+1) g_i²/(1 + 2t g_i))``, by hand."""
    gam = dict(gamma)
    val = 1.0
    for i, gi in enumerate(g):
        k = gam.get(i, 0)
        val *= math.prod(range(2 * k - 1, 0, -2)) * gi**k * (1 + 2 * t * gi) ** -(0.5 + k)
    if weighted:
        val *= sum((2 * gam.get(i, 0) + 1) * gi**2 / (1 + 2 * t * gi) for i, gi in enumerate(g))
    return val


@pytest.mark.parametrize("weighted", [False, True])
def test_measures_reproduce_the_exact_laplace_transform(weighted: bool, loops: str) -> None:
    g = _spectrum(8, 1.3)
    law = QLaw(g)
    for gamma, ms in zip(GAMMAS, law.measures([(gm, weighted, 0) for gm in GAMMAS])):
        assert ms.rows is not None   # the density method, not the Gauss fallback
        for t in (0.0, 0.5, 3.0, 20.0):
            got = ms.mass * float(np.sum(ms.w * np.exp(-t * ms.Q)))
            assert got == pytest.approx(_laplace(g, gamma, weighted, t), rel=1e-10), (gamma, t)


def test_batched_measures_equal_one_by_one_on_fresh_laws(loops: str) -> None:
    g = _spectrum(12, 0.7)
    reqs = [(gm, w, e) for gm in GAMMAS for w in (False, True) for e in (0, 2)]
    together = QLaw(g).measures(reqs)
    alone = QLaw(g)
    for (gamma, w, e), ms in zip(reqs, together):
        ref = QLaw(g).measure(gamma, w, 2)   # the batch discretises each law for its most singular request (e = 2)
        assert np.array_equal(ms.rows, ref.rows)
        np.testing.assert_allclose(ms.w, ref.w, rtol=0, atol=1e-14 * np.abs(ref.w).max())
        assert alone.measure(gamma, w, e).mass == ms.mass


def test_a_more_singular_request_extends_the_rows_down() -> None:
    law = QLaw(_spectrum(8, 1.0))
    plain = law.measure(((0, 1),), False, 0)
    singular = law.measure(((0, 1),), False, 6)
    assert singular.rows[0] < plain.rows[0]
    assert law.measure(((0, 1),), False, 0) is singular   # the wider one is kept and serves both


def test_talbot_densities_against_direct_numpy_sums(loops: str) -> None:
    rng = np.random.default_rng(3)
    R, C, D = 9, 5, 4
    base = rng.normal(size=(R, C)) + 1j * rng.normal(size=(R, C))
    pbase = rng.normal(size=(R, C)) + 1j * rng.normal(size=(R, C))
    recip = 0.5 * (rng.normal(size=(D, R, C)) + 1j * rng.normal(size=(D, R, C)))
    laws = [([(0, 1), (2, 3)], 0.0), ([(1, 2)], 1.7), ([], 0.0), ([(3, 1), (0, 2), (1, 1)], 0.4)]
    lo, hi = np.array([0, 2, 3, 1]), np.array([9, 7, 3, 8])
    dims = np.array([i for f, _ in laws for i, _ in f], dtype=np.int64)
    exps = np.array([n for f, _ in laws for _, n in f], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum([len(f) for f, _ in laws])]).astype(np.int64)
    wcoef = rng.normal(size=dims.size)
    norm = np.array([nk for _, nk in laws])
    got = talbot_densities(base, pbase, recip, lo, hi, dims, exps, starts, wcoef, norm)
    for k, (factors, nk) in enumerate(laws):
        terms = base.copy()
        for i, n in factors:
            terms = terms * recip[i] ** n
        if nk:
            extra = pbase.copy()
            for f in range(starts[k], starts[k + 1]):
                extra = extra + wcoef[f] * recip[dims[f]]
            terms = terms * extra / nk
        want = np.where((np.arange(R) >= lo[k]) & (np.arange(R) < hi[k]), terms.sum(axis=1).real, 0.0)
        np.testing.assert_allclose(got[k], want, rtol=1e-13, atol=1e-13)


# ----------------------------------------------------------------------------------------------------------------
# the tilted laws of the second-order growth: traced moment programs and their compiled densities
# ----------------------------------------------------------------------------------------------------------------
def _set_partitions(items: list):
    """Every partition of the list ``items`` into blocks (brute force, independent of the code's recursion)."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _set_partitions(rest):
        yield [[first]] + part
        for n in range(len(part)):
            yield part[:n] + [[first] + part[n]] + part[n + 1:]


def _brute_moment(ks: tuple[int, ...], kappa) -> complex:
    return sum(math.prod(kappa(len(B), sum(B)) for B in part) for part in _set_partitions(list(ks)))


KS_LISTS = [((1,),), ((1, 1), (0, 2)), ((1, 2, 3),), ((1, 1, 2, 2), (1, 1), (2,)), ((0, 0, 1, 3),)]


@pytest.mark.parametrize("ks_list", KS_LISTS)
def test_traced_moment_program_equals_the_sum_over_set_partitions(ks_list) -> None:
    from featureode.kernel.growth import _moment_program

    rng = np.random.default_rng(len(ks_list))
    cumulants, program, n_reg, outs = _moment_program(ks_list)
    values = {key: complex(*rng.normal(size=2)) for key in cumulants}
    reg: list = [values[key] for key in cumulants] + [None] * (n_reg - len(cumulants))
    for op, d, a, b in program:
        reg[d] = reg[a] * reg[b] if op == 0 else reg[a] + reg[b]
    for ks, out in zip(ks_list, outs):
        assert reg[out] == pytest.approx(_brute_moment(ks, lambda n, s: values[(n, s)]), rel=1e-12)


def test_tilted_densities_against_direct_numpy_cumulants(loops: str) -> None:
    """``ν_{γ,K}`` of :meth:`_TiltedLaws.measures_many` against the formula written out here: the contour product,
    the cumulants ``κ_B = (|B|−1)! 2^{|B|−1} Σ_i (2γ_i+1) g_i^{|B|+Σk} (1 + 2z g_i)^{−|B|}``, the moment as a sum over
    set partitions, one by one in NumPy."""
    from featureode.kernel.growth import _TiltedLaws

    g = _spectrum(6, 1.1)
    law = QLaw(g)
    requests = {((0, 1),): [((1,), 2.0), ((1, 1), 3.0), ((0, 2), 3.0)], ((1, 1), (4, 2)): [((1, 2), 5.0)],
                (): [((2, 3, 1), 3.0)]}
    got = _TiltedLaws(law).measures_many({gm: [(tuple(sorted(ks)), p) for ks, p in lst]
                                          for gm, lst in requests.items()})
    gam_arr = np.asarray(g)
    for gamma, lst in requests.items():
        for (ks, _), (mass, w, rows) in zip(lst, got[gamma]):
            lo, hi = int(rows[0]), int(rows[-1]) + 1
            terms = law.base(lo, hi).copy()
            for i, n in gamma:
                terms = terms * (1 / (1 + 2 * gam_arr[i] * law.z[lo:hi])) ** n
            mult = np.ones(len(g))
            for i, n in gamma:
                mult[i] += 2 * n

            def kappa(n: int, s: int) -> np.ndarray:
                z = law.z[lo:hi]
                val = sum(mult[i] * gam_arr[i] ** (n + s) / (1 + 2 * z * gam_arr[i]) ** n for i in range(len(g)))
                return math.factorial(n - 1) * 2 ** (n - 1) * val

            def kappa0(n: int, s: int) -> float:
                return math.factorial(n - 1) * 2 ** (n - 1) * float(np.sum(mult * gam_arr ** (n + s)))

            factor0 = _brute_moment(tuple(sorted(ks)), kappa0)
            dens = np.sum(terms * _brute_moment(tuple(sorted(ks)), kappa), axis=1).real / factor0
            want = (law.wq[lo:hi] * dens)[rows - lo]
            # 1e-11 of the peak: the Talbot sums cancel in the tails, where another order of the same products
            # differs by ~2e-12 of the peak
            np.testing.assert_allclose(w, want, rtol=0, atol=1e-11 * np.abs(want).max())
            m_gamma = math.prod(math.prod(range(2 * n - 1, 0, -2)) * g[i] ** n for i, n in gamma)
            assert mass == pytest.approx(m_gamma * factor0, rel=1e-13)


def test_backend_choice_is_fixed_per_process_and_a_bad_override_is_refused(monkeypatch, tmp_path) -> None:
    from featureode.kernel import loops as L

    monkeypatch.setenv("FEATUREODE_KERNEL_LOOPS", "fortran")
    with pytest.raises(ValueError, match="FEATUREODE_KERNEL_LOOPS must be one of numba, numpy"):
        L.backend("_talbot_densities")
    monkeypatch.delenv("FEATUREODE_KERNEL_LOOPS")
    monkeypatch.setattr(L, "_CHOSEN", {})
    monkeypatch.setattr(L, "_READY", set())
    monkeypatch.setattr(L, "_NUMPY_LAWS", {})
    monkeypatch.setattr(L, "_stamp", lambda name, kind="ready": tmp_path / f"{name}.{kind}")
    assert L.backend("_talbot_densities") == "numpy"            # nothing cached: no compile in this process
    base = np.ones((3, 2), dtype=complex)
    one = np.array([0], dtype=np.int64)
    for _ in range(2):   # more than COMPILE_AFTER laws given to the twin
        L.talbot_densities(base, base, np.ones((1, 3, 2), dtype=complex), np.zeros(L.COMPILE_AFTER, np.int64),
                           np.full(L.COMPILE_AFTER, 3, np.int64), one, one, np.zeros(L.COMPILE_AFTER + 1, np.int64),
                           np.zeros(1), np.zeros(L.COMPILE_AFTER))
    assert (tmp_path / "_talbot_densities.wanted").exists()     # ... so the next process compiles
    assert L.backend("_talbot_densities") == "numpy"            # ... and this one keeps its backend
    monkeypatch.setattr(L, "_CHOSEN", {})                        # a new process
    assert L.backend("_talbot_densities") == "numba"


# the points beyond 1e300 (checked below to be left alone) overflow in the NumPy twin's exponential, as they should
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("d", [3, 16, 64, 200, 10_000])
def test_contour_factors_equal_the_log_sum_in_extended_precision(d, loops):
    # Π_i (1 + 2 z g_i)^{-1/2} by a running product with counted half-turns (loops.contour_factors) against the
    # principal-branch sum exp(−½ Σ_i log(1 + 2 z g_i)) in long double (both backends of the loop), on the Talbot
    # contour of the Q grid (arguments from 0 to nearly π, |z| up to ~1e26, so the product winds many half-turns and
    # is rescaled), and the P factor Σ_i h_i g_i / (1 + 2 z g_i). At d = 10 000 the product also shrinks to ~1e-560
    # where Re z ≪ 0 (factors below 1 in modulus; it underflowed to 0 and raised ZeroDivisionError at d ≥ ~7000)
    from featureode.kernel.loops import contour_factors

    g = np.asarray(_spectrum(d, 1.1))
    h = g * np.linspace(0.5, 2.0, d)
    law = QLaw(tuple(g))
    step = max(1, law.z.shape[0] // (300 if d < 10_000 else 40))   # the reference costs d long-double logs a point
    z = law.z[::step]
    shift = (law.Q[::step, None] * z).real    # e^{Re Qz}: the size of the Laplace kernel the kernel joins to it
    base, psum = contour_factors(np.ascontiguousarray(z), g, h)
    zl = z.astype(np.clongdouble)
    log_ref = sum(-0.5 * np.log(1 + 2 * np.longdouble(gi) * zl) for gi in g)
    ref = np.exp(log_ref)
    pref = sum(np.longdouble(hi * gi) / (1 + 2 * np.longdouble(gi) * zl) for gi, hi in zip(g, h))
    # outside float64's range: long double resolves what float64 flushes to 0 (small Q, large d) or to inf
    ok = (np.abs(ref) > 1e-300) & (np.abs(ref) < 1e300)
    assert ok.sum() > z.size // 10
    assert np.all(np.abs(base[np.abs(ref) <= 1e-300]) < 1e-290)
    rel = np.abs(base[ok] - ref[ok].astype(complex)) / np.abs(ref[ok].astype(complex))
    assert rel.max() < 1e-12 * d, rel.max()
    np.testing.assert_allclose(psum, pref.astype(complex), rtol=1e-13)
    # with the shift, as the kernel calls it: e^{Re Qz} Π_i (…)^{−1/2}, right wherever the exact value is in range,
    # also where the product's root alone is not (d = 10 000); beyond 1e300 (rows far below the law's bulk, which
    # the kernel does not compute) it may overflow
    shifted, _ = contour_factors(np.ascontiguousarray(z), g, h, shift)
    ref_s = np.exp(log_ref + shift.astype(np.longdouble))
    ok_s = (np.abs(ref_s) > 1e-300) & (np.abs(ref_s) < 1e300)
    rel = np.abs(shifted[ok_s] - ref_s[ok_s].astype(complex)) / np.abs(ref_s[ok_s].astype(complex))
    assert rel.max() < 1e-12 * d, rel.max()
    assert np.all(np.abs(shifted[np.abs(ref_s) <= 1e-300]) < 1e-290)
    if d >= 10_000:   # the regime that broke: the product below float64's range (its root above 1e160)
        assert np.abs(ref).max() > 1e160, float(np.abs(ref).max())
    half_turns = np.abs(sum(np.angle(1 + 2 * gi * z) for gi in g)) / math.pi
    assert half_turns[ok].max() > 2   # the product did wind past the branch cut


def test_contour_sums_equal_the_direct_sums(loops):
    # Σ_i g_i^e (1 + 2 z g_i)^{-n} (loops.contour_sums, both backends) against the same sums in long double, with
    # the pairs given out of the order of n
    from featureode.kernel.loops import contour_sums

    g = np.asarray(_spectrum(24, 1.3))
    z = np.ascontiguousarray(QLaw(tuple(g)).z[300:340])
    pairs = [(3, 2), (1, 1), (6, 4), (2, 1), (5, 3)]
    got = contour_sums(z, g, pairs)
    zl = z.astype(np.clongdouble)
    for q, (e, n) in enumerate(pairs):
        ref = sum(np.longdouble(gi) ** e / (1 + 2 * np.longdouble(gi) * zl) ** n for gi in g)
        np.testing.assert_allclose(got[q], ref.astype(complex), rtol=1e-13)


def test_window_sums_against_fsum_and_alone_equal_batched(loops: str) -> None:
    """:func:`~featureode.kernel.loops.window_sums` (the second-order growth's averages): each pair's sum of
    ``P[row, r] · dense[offset + r − start]`` over its window against ``math.fsum`` of the same products; each pair
    summed alone equals it summed in the batch, and the same window with a zero weight in front of it (a law that
    kept one more row) gives the same sum, bit for bit; the numba loop and its NumPy twin agree bit for bit."""
    from featureode.kernel.loops import window_sums

    rng = np.random.default_rng(5)
    P = rng.standard_normal((7, 300))
    windows = [(0, 300), (17, 18), (40, 251), (120, 121), (3, 99)]       # per window: [start, stop)
    lens = [b - a for a, b in windows]
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
    dense = rng.standard_normal(int(sum(lens)))
    rows, cols = [], []
    for w in range(len(windows)):
        js = sorted(rng.choice(7, size=int(rng.integers(1, 5)), replace=False).tolist())
        rows += js
        cols += [w] * len(js)
    row, col = np.array(rows, dtype=np.intp), np.array(cols, dtype=np.intp)
    start = np.array([windows[c][0] for c in cols], dtype=np.intp)
    stop = np.array([windows[c][1] for c in cols], dtype=np.intp)
    offset = offsets[col].astype(np.intp)
    got = window_sums(P, dense, row, col, start, stop, offset)
    for p in range(row.size):
        a, b, o = int(start[p]), int(stop[p]), int(offset[p])
        want = math.fsum(float(P[row[p], r] * dense[o + r - a]) for r in range(a, b))
        scale = math.fsum(abs(float(P[row[p], r] * dense[o + r - a])) for r in range(a, b))
        assert abs(got[p] - want) <= 1e-14 * scale, (loops, p)
        alone = window_sums(P, dense, row[p:p + 1], col[p:p + 1], start[p:p + 1], stop[p:p + 1], offset[p:p + 1])
        assert alone[0] == got[p]
        if a > 0:   # the window one row earlier, that row's weight 0
            padded = np.concatenate([[0.0], dense[o:o + b - a]])
            one = np.array([0], dtype=np.intp)
            pad = window_sums(P, padded, row[p:p + 1], one, np.array([a - 1], dtype=np.intp),
                              np.array([b], dtype=np.intp), one)
            assert pad[0] == got[p], (loops, p)
    from featureode.kernel import loops as L

    twin, compiled = np.zeros(row.size), np.zeros(row.size)
    L._window_sums_numpy(P, dense, row, col, start, stop, offset, twin)
    L._compiled("_window_sums")(P, dense, row, col, start, stop, offset, compiled)
    assert np.array_equal(twin, compiled)
    assert window_sums(P, dense, row[:0], col[:0], start[:0], stop[:0], offset[:0]).size == 0
