"""Second-order growth constants of the ``second_order`` and ``resummed`` closures, by deterministic quadrature
(algebra: :mod:`featureode.kernel.algebra`, averages: :mod:`featureode.kernel.growth`; derivation:
``derivations/closure_second_order.py`` and ``derivations/growth_algebra.py``).

Per init neuron ``θ = (a, ŵ, b)`` the mode-β feature gradient is ``∇φ_β``, ``φ_β = a ŵ^β m_{|β|}(b, |ŵ|)/sqrt(β!)``.
Driven by mode α the mean-field flow is ``dθ/dε = P∇φ_α`` (``ε = γ D_α``; metric ``P = diag(η_a, η_w g, η_b)``,
readout, whitened weights and bias, per-group learning-rate weights ``η``, default 1), and the per-neuron kernel is
``k_β = |u|²`` with ``u(ε) = P^{1/2}∇φ_β(θ(ε)) = u_0 + ε u_1 + ½ ε² u_2 + O(ε³)`` (``u_n = L_α^n ∇φ_β``, ``L_α`` the
Lie derivative along the flow). With ``λ_β = E|u_0|²`` (the kernel's exact ``λ_β(0)``)::

    U_{βαα'} = E[u_1^α · u_1^{α'}] / λ_β,   V_{βα} = E[u_0 · u_2^{αα}] / λ_β,   T_{βαδ} = E[u_2^{αα} · u_2^{δδ}] / λ_β,
    S_{βα} = U_{βαα} + V_{βα}  (λ_β(D) = λ_β (1 + γ² Σ_α S_{βα} D_α² + O(D⁴)) for one driving mode).

The odd orders vanish (``a → −a`` maps the flow at ``D`` to the flow at ``−D``). Several driving modes: the
second-order displacement ``u_2^{αα'}`` of two different drivers is dropped (a stated approximation; it vanishes
with ``U_{βαα'}`` when α and α' differ in parity along some direction); :data:`U` keeps ``u_1^α · u_1^{α'}``, so
that ``E|u_0 + Σ_α ε_α u_1^α + ½ Σ_α ε_α² u_2^{αα}|² / λ_β`` — the positive law of the closures
(:data:`featureode.ode.terms.SECOND_ORDER_GROWTH`) — is the average of a square.

The algebra of a mode set does not depend on the spectrum (the ``g_i`` are fields of its codes): it is traced once
and its record of averages kept in the process and in the disk cache (:func:`_trace`); each spectrum then only
averages (:meth:`~featureode.kernel.growth.Averager.evaluate`).

Monte Carlo oracle of the same ``S``: :mod:`featureode.kernel.second_order_mc`.
"""
from __future__ import annotations

import gc
import hashlib
import os
import pickle
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from featureode.calculus.hermite import Mode
from featureode.core.cache import atomic_bytes, cache_dir
from featureode.kernel.growth import Algebra, Averager, GrowthError, Rates, Recorded, Recorder
from featureode.kernel.network import Network
from featureode.kernel.parametrization import PARTS

__all__ = ["SecondOrder", "second_order_constants", "network_second_order", "predicted_parts", "GrowthError",
           "Rates", "prune_traces", "trace_cache_limit", "TRACE_CACHE_MB"]


@dataclass(frozen=True)
class SecondOrder:
    """Second-order constants on a mode set (rows β: the mode whose eigenvalue grows; columns α: driving modes,
    0 for the others). ``S`` (``M × M``), ``U`` (``M × M × M``), ``V`` (``M × M``), ``T`` (``M × M × M``; zeros
    unless ``quartic``) of the module docstring; ``lambda0 = λ_β(0)``; the readout/weights/bias parts of ``S`` and
    of ``λ_β(0)`` (each part of ``|u|²`` separately; they sum to the totals); ``S_stderr`` is 0 (deterministic)."""

    S: np.ndarray
    U: np.ndarray
    V: np.ndarray
    T: np.ndarray
    lambda0: np.ndarray
    drivers: tuple[int, ...]
    rates: Rates = Rates()
    seconds: float = 0.0
    S_parts: dict[str, np.ndarray] = field(default_factory=dict)
    lambda0_parts: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def S_stderr(self) -> np.ndarray:
        return np.zeros_like(self.S)

    n_neurons = 0   # no sampling


def _same_parity(a: Mode, b: Mode) -> bool:
    da, db = a.as_dict(), b.as_dict()
    return all((da.get(i, 0) - db.get(i, 0)) % 2 == 0 for i in set(da) | set(db))


@contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: the algebra makes ~10⁵ short-lived dicts and tuples and no reference
    cycles (reference counting frees them), and each collection pass walks every live object of the process (a
    full one ~30 ms with SymPy loaded, ~10 % of the constants' time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@lru_cache(maxsize=1)
def _trace_version() -> str:
    """A hash of the source of the modules a trace depends on (the algebra, the recorder, this module)."""
    import featureode.kernel.algebra as algebra_mod
    import featureode.kernel.growth as growth_mod

    text = "".join(Path(m.__file__).read_text() for m in (algebra_mod, growth_mod, sys.modules[__name__])
                   if m.__file__)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class _Trace:
    """The recorded averages of the constants of one mode set (:class:`~featureode.kernel.growth.Recorded`) and the
    handles of ``λ_β``, ``U``, ``V``, ``T`` into them (per part)."""

    recorded: Recorded
    lam: dict
    U: dict
    V: dict
    T: dict


#: The default byte budget of the traces kept on disk (``$FEATUREODE_TRACE_CACHE_MB`` overrides it): beyond it the
#: least recently used are removed when a new one is written. The extended basis of one target gives 2–7 MB; a trace
#: with every mode of a 40-mode basis driving gives 400 MB.
TRACE_CACHE_MB = 512
_TRACE_GLOB = "second_order_trace_*.pickle"


def trace_cache_limit() -> int:
    """The traces' byte budget: ``$FEATUREODE_TRACE_CACHE_MB`` (a number ≥ 0, in MB) or :data:`TRACE_CACHE_MB`."""
    raw = os.environ.get("FEATUREODE_TRACE_CACHE_MB", "").strip()
    if not raw:
        return TRACE_CACHE_MB * 2**20
    try:
        mb = float(raw)
    except ValueError:
        mb = -1.0
    if not mb >= 0 or mb == float("inf"):
        raise GrowthError(f"FEATUREODE_TRACE_CACHE_MB must be a number of megabytes >= 0, got {raw!r}; unset it for "
                          f"the default {TRACE_CACHE_MB}")
    return int(mb * 2**20)


def prune_traces(folder: Path, limit: int, keep: "Path | None" = None) -> list[Path]:
    """Remove the least recently used traces of ``folder`` (oldest modification time first; a cache hit refreshes it)
    until those left fit in ``limit`` bytes, never ``keep`` (the one just written). Files that vanish meanwhile (another
    process pruning) are skipped. Returns the removed paths."""
    entries = []
    for path in folder.glob(_TRACE_GLOB):
        try:
            st = path.stat()
        except OSError:
            continue
        entries.append((st.st_mtime, st.st_size, path))
    entries.sort(key=lambda e: e[0], reverse=True)
    total = sum(size for _, size, path in entries if path == keep)
    removed = []
    for _, size, path in entries:
        if path == keep:
            continue
        if total + size <= limit:
            total += size
            continue
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


@lru_cache(maxsize=8)
def _trace(modes: tuple[Mode, ...], drivers: tuple[int, ...], rates: Rates, quartic: bool,
           moments: tuple[tuple[int, float], ...]) -> _Trace:
    """The flow algebra of ``modes`` driven by ``drivers`` and the averages it asks for, recorded once for every
    spectrum, activation and bias (the ``g_i`` are fields of the algebra's codes; only the readout moments
    ``moments`` enter): a sweep over spectra traces its mode set once. Kept in this process and in the disk cache
    (:func:`featureode.core.cache.cache_dir`, keyed by the arguments and the source of the modules that make it:
    a record holds no process-wide code numbers, only directions, orders and coefficients), so a later process
    reads it (~5 ms) instead of tracing it again (~0.3 s for the extended basis). The traces on disk are kept within
    :func:`trace_cache_limit` bytes, least recently used first out (:func:`prune_traces`)."""
    key = hashlib.sha256(repr((_trace_version(), [str(m) for m in modes], drivers, rates, quartic, moments))
                         .encode()).hexdigest()[:24]
    path = cache_dir() / f"second_order_trace_{key}.pickle"
    limit = trace_cache_limit()
    try:
        with open(path, "rb") as fh:
            hit = pickle.load(fh)
        if isinstance(hit, _Trace):
            try:
                os.utime(path)          # recently used: the last to be pruned
            except OSError:
                pass
            return hit
    except Exception:  # noqa: BLE001 — absent, or damaged: traced again (and replaced)
        pass
    trace = _traced(modes, drivers, rates, quartic, moments)
    try:
        atomic_bytes(path, pickle.dumps(trace, protocol=pickle.HIGHEST_PROTOCOL), durable=False)
        prune_traces(path.parent, limit, keep=path)
    except OSError:   # a read-only cache: the next process traces again
        pass
    return trace


def _traced(modes: tuple[Mode, ...], drivers: tuple[int, ...], rates: Rates, quartic: bool,
            moments: tuple[tuple[int, float], ...]) -> _Trace:
    """:func:`_trace` computed: the algebra run and its averages recorded."""
    alg, rec = Algebra(rates), Recorder(dict(moments))
    drive = {k: alg.phi_gradient(modes[k]) for k in drivers}
    h_lam, h_U, h_V, h_T = {}, {}, {}, {}
    for row, beta in enumerate(modes):
        u0 = alg.phi_gradient(beta)
        h_lam[row] = rec.request_dot(alg, u0, u0)
        u1 = {k: alg.lie_vector(drive[k], u0) for k in drivers}
        u2 = {k: alg.lie_vector(drive[k], u1[k]) for k in drivers}
        for k in drivers:
            h_V[row, k] = rec.request_dot(alg, u0, u2[k])
            for k2 in drivers:
                if k2 < k or not _same_parity(modes[k], modes[k2]):
                    continue
                h_U[row, k, k2] = rec.request_dot(alg, u1[k], u1[k2])
                if quartic:
                    h_T[row, k, k2] = rec.request_dot(alg, u2[k], u2[k2])
    return _Trace(rec.freeze(), h_lam, h_U, h_V, h_T)


def network_second_order(net: Network, modes: Sequence[Mode], drivers: Sequence[int] | None = None, *,
                         rates: Rates = Rates(), quartic: bool = False) -> SecondOrder:
    """The constants of the module docstring for ``net`` on ``modes``, driven by ``drivers`` (indices into
    ``modes``; default all), with metric weights ``rates``; ``quartic=False`` skips ``T``."""
    with _without_cyclic_gc():
        return _network_second_order(net, modes, drivers, rates, quartic)


def _network_second_order(net: Network, modes: Sequence[Mode], drivers: Sequence[int] | None, rates: Rates,
                          quartic: bool) -> SecondOrder:
    t0 = time.perf_counter()
    modes = list(modes)
    drivers = tuple(range(len(modes))) if drivers is None else tuple(int(k) for k in drivers)
    M = len(modes)
    avg = Averager(net)
    trace = _trace(tuple(modes), drivers, rates, quartic, tuple(sorted(avg.moments.items())))
    h_lam, h_U, h_V, h_T = trace.lam, trace.U, trace.V, trace.T
    vals = avg.evaluate(trace.recorded)

    def part(h: dict[str, int]) -> dict[str, float]:
        return {p: float(vals[h[p]]) for p in PARTS}

    lam_parts = {p: np.array([part(h_lam[r])[p] for r in range(M)]) for p in PARTS}
    lam = sum(lam_parts.values())
    inv = np.where(lam > 0, 1 / np.where(lam > 0, lam, 1), 0.0)
    U, T = np.zeros((M, M, M)), np.zeros((M, M, M))
    V = np.zeros((M, M))
    S_parts = {p: np.zeros((M, M)) for p in PARTS}
    for (r, k, k2), h in h_U.items():
        U[r, k, k2] = U[r, k2, k] = sum(part(h).values()) * inv[r]
        if k == k2:
            for p, x in part(h).items():
                S_parts[p][r, k] += x * inv[r]
    for (r, k, k2), h in h_T.items():
        T[r, k, k2] = T[r, k2, k] = sum(part(h).values()) * inv[r]
    for (r, k), h in h_V.items():
        V[r, k] = sum(part(h).values()) * inv[r]
        for p, x in part(h).items():
            S_parts[p][r, k] += x * inv[r]
    S = np.zeros((M, M))
    for k in drivers:
        S[:, k] = U[:, k, k] + V[:, k]
    return SecondOrder(S, U, V, T, lam, drivers, rates, time.perf_counter() - t0, S_parts, lam_parts)  # type: ignore[arg-type]  # lam is an array once a driver exists


def second_order_constants(modes: Sequence["Mode | str"], g: "Sequence[float] | np.ndarray", activation: str, bias_std: float, *,
                           drivers: Sequence[int] | None = None, parametrization: str = "meanfield",
                           rates: "Rates | tuple[float, float, float]" = Rates(),
                           quartic: bool = False) -> SecondOrder:
    """:func:`network_second_order` of the network ``(activation, g, σ_b, parametrization)``; ``rates``: the
    per-group learning-rate weights ``(η_a, η_w, η_b)``. Cached per arguments."""
    ms = tuple(m if isinstance(m, Mode) else Mode.parse(m) for m in modes)
    r = rates if isinstance(rates, Rates) else Rates(*rates)
    return _cached(ms, tuple(float(x) for x in g), str(activation), float(bias_std),
                   None if drivers is None else tuple(int(k) for k in drivers), str(parametrization), r,
                   bool(quartic))


@lru_cache(maxsize=16)
def _cached(modes: tuple[Mode, ...], g: tuple[float, ...], activation: str, bias_std: float,
            drivers: "tuple[int, ...] | None", parametrization: str, rates: Rates, quartic: bool) -> SecondOrder:
    net = Network.build(activation, g, bias_std, parametrization)
    return network_second_order(net, modes, drivers, rates=rates, quartic=quartic)


def predicted_parts(so: SecondOrder, D: np.ndarray, q: float, resummed: bool = False) -> dict[str, np.ndarray]:
    """The parts of ``λ_β(t)`` that the *old* second-order law ``λ^P_β(0) + λ_β(0) Σ_α S^P_{βα} G_α(D_α)``
    predicts (``G = q D²``, or ``resummed``: ``2 sinh²(sqrt(q S̄_α/2) D)/S̄_α``), for ``D`` of shape ``n_t × M``.
    Keys ``"readout"``, ``"weights"``, ``"bias"``."""
    D = np.asarray(D, float)
    if resummed:
        sd = np.maximum(np.diag(so.S), 1e-30)
        G = 2 * np.sinh(np.sqrt(q * sd / 2) * D) ** 2 / sd
    else:
        G = q * D**2
    return {p: so.lambda0_parts[p][None, :] + so.lambda0[None, :] * (G @ so.S_parts[p].T) for p in PARTS}
