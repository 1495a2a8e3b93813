"""Averagers of the per-neuron formula: deterministic quadrature over the law of ``Q = |ŵ|²`` and the bias
(:class:`QuadratureAverager`, with its table of bias means :class:`MeanTable`), Monte Carlo over sampled neurons
(:class:`MonteCarloAverager`), and the per-network cache of quadrature state."""
from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from functools import lru_cache
from itertools import chain
from typing import Iterable, Sequence

import numpy as np

from featureode.calculus.activations import Activation, ActivationError
from featureode.kernel.hea import _level_coefficients
from featureode.kernel.initlaw import (
    MAX_ORDER,
    BiasRule,
    Gamma,
    QGrid,
    bias_rule,
    gauss_rule,
    q_law,
    tilt_factor,
)
from featureode.kernel.network import Network
from featureode.kernel.perneuron import Term, check_growth, check_integrable


# ----------------------------------------------------------------------------------------------------------------
# averagers: quadrature over (Q, b), Monte Carlo over neurons
# ----------------------------------------------------------------------------------------------------------------
def _finite_means(act: Activation, k: int, b: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``m_k(b, s)`` with non-finite values (``s → 0`` corners of non-smooth σ) set to 0."""
    with np.errstate(all="ignore"):
        vals = act.mean_numpy(k)(b, s)
    return np.where(np.isfinite(vals), vals, 0.0)


class MeanTable:
    """``F_{jk}(Q) = E_b[m_j(b, sqrt(Q)) m_k(b, sqrt(Q))]`` of one activation and bias rule on a :class:`QGrid`
    (rows computed lazily, kept for every spectrum whose grid starts at the same ``y_0``)."""

    def __init__(self, act: Activation, rule: BiasRule, y0: float, step: float):
        self.act, self.rule = act, rule
        n = int(math.ceil((math.log(1 + QGrid.TAIL + 4 * MAX_ORDER) - math.log(QGrid.Q_MIN)) / step)) + 2
        self.grid = QGrid(y0, step, n)
        Q = self.grid.Q
        self.b, self.wb = rule.nodes(Q, rule.sinh_count(Q[:1]) if rule.bias_std > 0 and not rule.smooth else None)
        self._m: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._F: dict[tuple[int, int], np.ndarray] = {}
        self._products: dict[tuple[int, ...], np.ndarray] = {}

    def _rows_b(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.b.shape[0] > 1:
            return self.b[rows], self.wb[rows]
        return np.broadcast_to(self.b, (rows.size, self.b.shape[1])), self.wb

    def m(self, k: int, rows: np.ndarray) -> np.ndarray:
        """``m_k(b, sqrt(Q))`` on the ``(Q, b)`` nodes of rows ``rows``."""
        have = self._m.get(k)
        if have is None:   # the values and which rows hold them (an empty array: no fill of the ~3 MB)
            have = self._m[k] = (np.empty((self.grid.n, self.b.shape[1])), np.zeros(self.grid.n, dtype=bool))
        cache, ready = have
        todo = rows[~ready[rows]]
        if todo.size:
            b, _ = self._rows_b(todo)
            cache[todo] = _finite_means(self.act, k, b, np.sqrt(self.grid.Q[todo])[:, None] * np.ones_like(b))
            ready[todo] = True
        return cache[rows]

    def F(self, j: int, k: int, rows: np.ndarray) -> np.ndarray:
        """``F_{jk}`` at grid rows ``rows``."""
        cache = self._F.get((j, k))
        if cache is None:
            cache = self._F[(j, k)] = np.full(self.grid.n, np.nan)
        todo = rows[np.isnan(cache[rows])]
        if todo.size:
            _, wb = self._rows_b(todo)
            with np.errstate(all="ignore"):
                vals = np.sum(self.m(j, todo) * self.m(k, todo) * wb, axis=1)
            cache[todo] = np.where(np.isfinite(vals), vals, 0.0)
        return cache[rows]

    def products(self, wanted: Sequence[tuple[int, ...]], rows: np.ndarray) -> np.ndarray:
        """``E_b[Π_{j∈J} m_j(b, sqrt(Q))]`` at grid rows ``rows`` for each sorted multiset ``J`` of ``wanted`` (``1``
        for the empty one), shape ``len(wanted) × len(rows)``; non-finite sums are 0. Rows are kept per multiset
        (every network on this table shares them). The missing rows are computed in sorted order of the multisets,
        each as one sum ``Σ_b (w_b Π_{j∈J∖j_last} m_j) m_{j_last}`` whose prefix product is shared by the multisets
        that extend it."""
        caches = []
        for J in wanted:
            cache = self._products.get(J)
            if cache is None:
                cache = self._products[J] = np.ones(self.grid.n) if not J else np.full(self.grid.n, np.nan)
            caches.append(cache)
        missing = np.zeros(rows.size, dtype=bool)
        for cache in caches:
            missing |= np.isnan(cache[rows])
        todo = rows[missing]
        if todo.size:
            wb = np.broadcast_to(self._rows_b(todo)[1], (todo.size, self.b.shape[1]))
            m: dict[int, np.ndarray] = {}
            stack: list[tuple[tuple[int, ...], np.ndarray]] = [((), wb)]   # prefix products w_b Π m_j
            for J in sorted({J for J in wanted if J}):
                head = J[:-1]
                while stack[-1][0] != head[: len(stack[-1][0])]:
                    stack.pop()
                for j in head[len(stack[-1][0]):]:
                    stack.append((stack[-1][0] + (j,), stack[-1][1] * self._m_rows(m, j, todo)))
                with np.errstate(all="ignore"):
                    vals = np.einsum("rb,rb->r", stack[-1][1], self._m_rows(m, J[-1], todo))
                self._products[J][todo] = np.where(np.isfinite(vals), vals, 0.0)
        return np.array([cache[rows] for cache in caches]).reshape(len(wanted), rows.size)

    def _m_rows(self, m: dict[int, np.ndarray], j: int, rows: np.ndarray) -> np.ndarray:
        val = m.get(j)
        if val is None:
            val = m[j] = self.m(j, rows)
        return val

    def F_at(self, j: int, k: int, Q: np.ndarray) -> np.ndarray:
        """``F_{jk}`` at arbitrary points ``Q`` (nodes of a Gauss rule)."""
        b, wb = self.rule.nodes(Q)
        b = np.broadcast_to(b, (Q.size, b.shape[1]))
        s = np.sqrt(Q)[:, None] * np.ones_like(b)
        with np.errstate(all="ignore"):
            mj = _finite_means(self.act, j, b, s)
            mk = mj if k == j else _finite_means(self.act, k, b, s)
            vals = np.sum(mj * mk * wb, axis=1)
        return np.where(np.isfinite(vals), vals, 0.0)


@lru_cache(maxsize=8)   # a table holds m_k on up to ~600 × 630 nodes per order k
def _mean_table(act: Activation, rule: BiasRule, y0: float, step: float) -> MeanTable:
    return MeanTable(act, rule, y0, step)


class ClosedMeanTable:
    """``F_{jk}(Q) e^{−κQ}`` of an exponential-polynomial activation in closed form
    (:meth:`Activation.bias_average`), on a :class:`QGrid` (the same interface as :class:`MeanTable`); ``κ`` is the
    tilt of the law of ``Q`` it is averaged against."""

    def __init__(self, act: Activation, bias_std: float, tilt: float, grid: QGrid):
        self.act, self.bias_std, self.tilt, self.grid = act, float(bias_std), float(tilt), grid
        self._F: dict[tuple[int, int], np.ndarray] = {}

    def F(self, j: int, k: int, rows: np.ndarray) -> np.ndarray:
        cache = self._F.get((j, k))
        if cache is None:
            cache = self._F[(j, k)] = self.F_at(j, k, self.grid.Q)
        return cache[rows]

    def F_at(self, j: int, k: int, Q: np.ndarray) -> np.ndarray:
        vals = self.act.bias_average(j, k, self.bias_std, self.tilt)(np.asarray(Q, dtype=float))
        if not np.all(np.isfinite(vals)):
            raise ActivationError(f"activation {self.act.name!r}: the closed-form bias average E_b[m_{j} m_{k}] "
                                  "is not finite on the grid of |ŵ|²; lower the growth of σ or σ_b")
        return vals


#: per activation and (σ_b > 0, d): integral key -> its singular power (:func:`check_integrable`, which depends on
#: nothing else; an integral that does not exist raises there, every time it is asked for)
_CHECKED: "weakref.WeakKeyDictionary[Activation, dict]" = weakref.WeakKeyDictionary()


@lru_cache(maxsize=8)
def _closed_table(act: Activation, bias_std: float, tilt: float, grid: QGrid) -> ClosedMeanTable:
    return ClosedMeanTable(act, bias_std, tilt, grid)


class QuadratureAverager:
    """Deterministic ``E[ŵ^{2γ} (P) m_j m_k] = mass · Σ_Q w(Q) F_{jk}(Q)`` over the init law of a :class:`Network`:
    the measure from the network's :class:`~featureode.kernel.initlaw.QLaw`, ``F`` from the shared :class:`MeanTable`.

    On the grid, points where the weight times the bound ``Q^{−e/2}`` on ``F`` is below ``1e-20`` of its maximum
    are skipped (they cannot contribute in double precision)."""

    def __init__(self, net: Network):
        self.net = net
        act = net.activation
        self.tilt = check_growth(act, net.g)   # κ > 0: the law tilted by e^{κQ}, F by e^{−κQ}
        self.factor = tilt_factor(net.g_key, self.tilt)
        self.law = q_law(net.g_key, net.step, self.tilt) if self.tilt else net.q_law
        if act.exp_terms:
            self.table = _closed_table(act, net.bias_std, self.tilt, self.law.grid)
        else:
            self.table = _mean_table(act, net.bias_rule, self.law.grid.y0, net.step)  # type: ignore[assignment]  # both tables have the same interface
        self._integrals: dict[tuple[Gamma, bool, int, int], float] = {}

    def integral(self, gamma: Gamma, weighted: bool, j: int, k: int) -> float:
        """``E_{b,ŵ}[ŵ^{2γ} (P) m_j(b, |ŵ|) m_k(b, |ŵ|)]`` (``P = Σ_i g_i ŵ_i²`` when ``weighted``)."""
        j, k = min(j, k), max(j, k)
        key = (gamma, weighted, j, k)
        val = self._integrals.get(key)
        if val is None:
            self.prefetch([Term("", 1.0, gamma, weighted, j, k)])
            val = self._integrals[key]
        return val

    def prefetch(self, terms: Iterable[Term]) -> None:
        """Compute every integral of ``terms`` not computed yet, together: their measures in one compiled pass of
        :meth:`QLaw.measures <featureode.kernel.initlaw.QLaw.measures>` (each on the rows the most singular of its
        integrands needs), then ``mass · Σ_Q w(Q) F_{jk}(Q)`` of all of them, each over the rows its own singular
        power needs, gathered into one array of products (the weights of a block, one per measure and singular
        power, times ``F_{jk}`` on them) and summed per integral by one pairwise sum."""
        wanted: dict[tuple[Gamma, bool, int, int], int] = {}
        act, sb, dim = self.net.activation, self.net.bias_std, self.net.dim
        checked = _CHECKED.setdefault(act, {}).setdefault((sb > 0, dim), {})   # key -> singular power
        for t in terms:
            j, k = (t.j, t.k) if t.j <= t.k else (t.k, t.j)
            key = (t.gamma, t.weighted, j, k)
            if key not in self._integrals and key not in wanted:
                e = checked.get(key)
                if e is None:
                    e = checked[key] = check_integrable(act, sb, dim, Term("", 1.0, t.gamma, t.weighted, j, k))
                wanted[key] = e
        if not wanted:
            return
        laws = self.law.measures([(gamma, weighted, e) for (gamma, weighted, _, _), e in wanted.items()])
        block_of: dict[tuple[int, int], int] = {}        # (law, e) -> its block
        block_law: list = []                              # per block: its measure
        block_e: list[int] = []                           # per block: the singular power it is weighed against
        block_key: list[tuple[Gamma, bool]] = []          # per block: its (γ, weighted)
        pairs: dict[tuple[int, int], list[int]] = {}      # (j, k) -> its blocks
        on_grid: list[tuple[tuple[Gamma, bool, int, int], float, int]] = []  # key, mass, block
        for (key, e), ms in zip(wanted.items(), laws):
            if ms.rows is None:   # a Gauss rule: F at its nodes
                self._integrals[key] = self.factor * ms.mass * float(np.sum(ms.w * self.table.F_at(key[2], key[3],
                                                                                                     ms.Q)))
                continue
            b = block_of.get((id(ms), e))
            if b is None:
                b = block_of[(id(ms), e)] = len(block_law)
                block_law.append(ms)
                block_key.append((key[0], key[1]))
                block_e.append(e)
            pairs.setdefault((key[2], key[3]), []).append(b)
            on_grid.append((key, ms.mass, b))
        if not on_grid:
            return
        # Each integral is summed over its own rows only, in row order, by one pairwise sum per integral, so that
        # its value does not depend on what else was asked before or with it (cached and fresh computations stay
        # bitwise equal): a shared gathered product would sum each row at a position that depends on the batch.
        # A measure first computed for a more singular integrand carries rows below the ones this integrand needs;
        # they are cut at its own first row (a safeguard: the bound below has left them out in every case tried).
        own_lo = np.array([self.law.first_row(g, wt, e) for (g, wt), e in zip(block_key, block_e)], dtype=np.intp)
        which = np.repeat(np.arange(len(block_law)), [ms.rows.size for ms in block_law])
        w_all = np.concatenate([ms.w for ms in block_law])
        rows_all = np.concatenate([ms.rows for ms in block_law])
        e_all = np.asarray(block_e, dtype=float)[which]
        # points where the weight times the bound Q^{-e/2} of F is under 1e-20 of its top are left out
        bound = np.where(e_all > 0, np.abs(w_all) * np.concatenate([ms.Q for ms in block_law]) ** (-e_all / 2),
                         np.abs(w_all))
        bound[rows_all < own_lo[which]] = 0.0
        top = np.zeros(len(block_law))
        np.maximum.at(top, which, bound)
        keep = (bound > 1e-20 * top[which]) & (rows_all >= own_lo[which])
        which, w_all, rows_all = which[keep], w_all[keep], rows_all[keep]
        count = np.bincount(which, minlength=len(block_law))
        first = np.concatenate([[0], np.cumsum(count)[:-1]])        # each block's first point in w_all
        L, H = (int(rows_all.min()), int(rows_all.max()) + 1) if rows_all.size else (0, 0)
        F = np.zeros((len(pairs), H - L))
        row_of_pair = {jk: n for n, jk in enumerate(pairs)}
        for n, (jk, users) in enumerate(pairs.items()):   # F_{jk} on the rows its integrals weigh
            need = np.unique(np.concatenate([rows_all[first[b]:first[b] + count[b]] for b in set(users)]))
            if need.size:
                F[n, need - L] = self.table.F(jk[0], jk[1], need)
        a = np.fromiter((b for _, _, b in on_grid), dtype=np.intp, count=len(on_grid))
        c = np.fromiter((row_of_pair[(key[2], key[3])] for key, _, _ in on_grid), dtype=np.intp, count=len(on_grid))
        mass = np.fromiter((m for _, m, _ in on_grid), dtype=float, count=len(on_grid))
        size = count[a]
        seg = np.concatenate([[0], np.cumsum(size)[:-1]])           # each integral's first product
        point = np.repeat(first[a] - seg, size) + np.arange(int(size.sum()))
        products = w_all[point] * F[np.repeat(c, size), rows_all[point] - L]
        sums = np.zeros(len(on_grid))
        filled = size > 0
        if products.size:
            sums[filled] = np.add.reduceat(products, seg[filled])
        vals = self.factor * mass * sums
        for (key, *_), val in zip(on_grid, vals.tolist()):
            self._integrals[key] = val

    def part_values(self, groups: Sequence[Sequence[Term]]) -> list[dict[str, float]]:
        """:meth:`value` of each group of terms, their integrals computed together first (:meth:`prefetch`)."""
        self.prefetch(chain.from_iterable(groups))
        return [self._sum_parts(terms) for terms in groups]

    def value(self, terms: Sequence[Term]) -> dict[str, float]:
        """``Σ coefficient · integral`` per part (the integrals computed together first, :meth:`prefetch`)."""
        self.prefetch(terms)
        return self._sum_parts(terms)

    def _sum_parts(self, terms: Sequence[Term]) -> dict[str, float]:
        out: dict[str, float] = {}
        get = self._integrals.__getitem__
        for t in terms:
            j, k = (t.j, t.k) if t.j <= t.k else (t.k, t.j)
            out[t.part] = out.get(t.part, 0.0) + t.coefficient * get((t.gamma, t.weighted, j, k))
        return out


class MonteCarloAverager:
    """Monte Carlo over ``n_neurons`` init neurons ``(ŵ, b)`` of the same terms (mean and standard error of the
    mean of each sum of terms, per neuron; ``E[a²]`` enters through the terms' coefficients, exactly)."""

    def __init__(self, net: Network, n_neurons: int, seed: int, chunk: int = 50_000):
        self.net, self.n, self.seed, self.chunk = net, int(n_neurons), int(seed), int(chunk)

    def values(self, groups: Sequence[Sequence[Term]]) -> tuple[np.ndarray, np.ndarray]:
        """For each group of terms: the Monte Carlo mean of ``Σ coefficient · ŵ^{2γ} (P) m_j m_k`` and its standard
        error."""
        g, act = self.net.g, self.net.activation
        check_growth(act, g, fourth=True)
        rng = np.random.default_rng(self.seed)
        sums, sq = np.zeros(len(groups)), np.zeros(len(groups))
        orders = sorted({o for grp in groups for t in grp for o in (t.j, t.k)})
        done = 0
        while done < self.n:
            n = min(self.chunk, self.n - done)
            w = rng.standard_normal((n, g.size)) * np.sqrt(g)
            b = rng.standard_normal(n) * self.net.bias_std
            s = np.sqrt(np.sum(w * w, axis=1))
            pw = np.sum(g * w * w, axis=1)
            mk = {o: act.mean_numpy(o)(b, s) for o in orders}
            for idx, grp in enumerate(groups):
                val = np.zeros(n)
                for t in grp:
                    mono = np.ones(n)
                    for i, e in t.gamma:
                        mono = mono * w[:, i] ** (2 * e)
                    if t.weighted:
                        mono = mono * pw
                    val = val + t.coefficient * mono * mk[t.j] * mk[t.k]
                sums[idx] += val.sum()
                sq[idx] += (val**2).sum()
            done += n
        mean = sums / self.n
        var = np.maximum(sq / self.n - mean**2, 0) / max(self.n - 1, 1)
        return mean, np.sqrt(var)


# ----------------------------------------------------------------------------------------------------------------
# shared state: one averager per network
# ----------------------------------------------------------------------------------------------------------------
_AVERAGERS: "OrderedDict[tuple, QuadratureAverager]" = OrderedDict()
_AVERAGERS_MAX = 16


def quadrature(net: Network) -> QuadratureAverager:
    """The (shared, bounded-cache) quadrature averager of a network: networks with equal :meth:`Network.key`
    share their integrals."""
    key = net.key()
    avg = _AVERAGERS.get(key)
    if avg is None:
        avg = _AVERAGERS[key] = QuadratureAverager(net)
        while len(_AVERAGERS) > _AVERAGERS_MAX:
            _AVERAGERS.popitem(last=False)
    else:
        _AVERAGERS.move_to_end(key)
    return avg


def clear_caches() -> None:
    """Forget every shared quadrature state (laws of ``|ŵ|²``, bias rules, mean tables, integrals)."""
    _AVERAGERS.clear()
    for f in (_mean_table, _closed_table, q_law, bias_rule, gauss_rule, _level_coefficients):
        f.cache_clear()




