"""Benchmark of the feature-ODE code generation: compile time and RHS time vs number of modes.

Compared side by side on the same system (the reference ``displacement`` closure, target basis) and the same
random mode sets (M modes of degree 1–3 in d = 48 directions, made-up constants):

- ``numpy``: featureode.ode.compile's vectorised NumPy module (indexed form, CSE). Compile = build the system, derive
  the indexed Jacobian, generate and import the module, first call; cold (empty cache directory) and cached (a
  second load from the cache directory).
- ``numba``: the same tree as JIT loops; compile includes numba's compilation of ``rhs`` at the first call.
- ``naive``: the expanded form, one ``sympy.lambdify``'d expression per state variable (no CSE), each called with
  the state components it uses. Compile = expand + lambdify. Measured up to ``--naive-max`` modes; above that its
  times are extrapolated ∝ M² (each of the 2M expressions contains sums over ∝ M modes) and marked ``~``.

A warm-up run on 10 modes (not recorded) comes first, so that one-time start-up costs (numba's own initialisation,
SymPy's caches) are not charged to the first size.

RHS time: median over repeated evaluations at a random state. Goals (issue 4): at 1000 modes the compiled RHS is
≥ 20× faster than naive; compile time at 10000 modes is within 3× of compile time at 10 modes. The full run takes
about 12 minutes on two shared cores, almost all of it the naive baseline's lambdify at 1000 modes.

Run:  python benchmarks/bench_ode.py [--sizes 10 100 1000 10000] [--naive-max 1000] [--out benchmarks/results/ode_benchmark.md]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import sympy as sp

from featureode.ode import compile as fcompile
from featureode.calculus.hermite import Mode
from featureode.kernel.theory import KernelTheory
from featureode.ode.solve import system_inputs
from featureode.ode.variants import Variant

DIM = 48
VARIANT = Variant("displacement")


def random_theory(m: int, seed: int = 0) -> KernelTheory:
    """``m`` distinct modes of degree 1–3 in ``DIM`` directions with made-up, realistic constants."""
    rng = np.random.default_rng(seed)
    g = (np.arange(DIM) + 3.0) ** -1.5
    g /= g.sum()
    modes: dict[Mode, None] = {}
    while len(modes) < m:
        dims = rng.choice(DIM, size=rng.integers(1, 4), replace=True)
        modes.setdefault(Mode.from_dict({int(k): int(n) for k, n in zip(*np.unique(dims, return_counts=True))}))
    modes_t = tuple(sorted(modes))
    levels, c = np.array([0.45, 0.694, 0.412, 0.184]), np.array([0.35, 0.25, 0.11, 0.04])
    lam = np.array([levels[mo.degree] * mo.g_power(g) for mo in modes_t])
    v = rng.normal(size=m)
    return KernelTheory(modes_t, v / np.linalg.norm(v), g, 0.5, lam, np.zeros(m), lam, levels, c)


def median_time(fn, repeat: int, budget: float = 2.0) -> float:
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeat and (time.perf_counter() - start < budget or len(times) < 3):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_compiled(backend: str, theory: KernelTheory, y: np.ndarray, repeat: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as cache:
        os.environ["FEATUREODE_CACHE_DIR"] = cache
        out = {}
        for phase in ("cold", "cached"):
            fcompile._LOADED.clear()
            t0 = time.perf_counter()
            inputs, system = system_inputs(theory, VARIANT)
            compiled = fcompile.compile_system(system, backend)
            compiled.rhs(y, *inputs)
            out[phase] = time.perf_counter() - t0
        out["rhs"] = median_time(lambda: compiled.rhs(y, *inputs), repeat)
    return out


def bench_naive(theory: KernelTheory, y: np.ndarray, repeat: int) -> dict[str, float]:
    t0 = time.perf_counter()
    inputs, system = system_inputs(theory, VARIANT)
    expanded = system.expanded(theory.modes, DIM, dict(zip(system.inputs, inputs)))
    position = {s: k for k, s in enumerate(expanded.states)}
    functions = []
    for expr in expanded.rhs:
        args = sorted(expr.free_symbols, key=position.__getitem__)
        functions.append((sp.lambdify(args, expr, "math"), [position[a] for a in args]))
    compile_time = time.perf_counter() - t0

    def rhs() -> list[float]:
        state = y.tolist()
        return [fn(*[state[k] for k in idx]) for fn, idx in functions]

    compiled = fcompile.compile_system(system, "numpy")
    np.testing.assert_allclose(rhs(), compiled.rhs(y, *inputs), rtol=1e-9, atol=1e-12)
    return {"cold": compile_time, "rhs": median_time(rhs, repeat)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10000])
    parser.add_argument("--naive-max", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "ode_benchmark.md")
    args = parser.parse_args()
    print(f"variant {VARIANT.label!r}, target basis, d = {DIM}; sizes {args.sizes}; naive measured up to "
          f"{args.naive_max} modes, extrapolated ∝ M² above")
    warm = random_theory(10, seed=1)
    for backend in ("numpy", "numba"):
        bench_compiled(backend, warm, np.zeros(20), 3)
    rows: dict[int, dict[str, dict[str, float]]] = {}
    for m in args.sizes:
        theory = random_theory(m)
        y = np.random.default_rng(1).normal(0.0, 0.5, 2 * m)
        rows[m] = {b: bench_compiled(b, theory, y, args.repeat) for b in ("numpy", "numba")}
        if m <= args.naive_max:
            rows[m]["naive"] = bench_naive(theory, y, args.repeat)
        else:
            ref = max(k for k in rows if "naive" in rows[k] and not rows[k]["naive"].get("extrapolated"))
            factor = (m / ref) ** 2
            rows[m]["naive"] = {"cold": rows[ref]["naive"]["cold"] * factor, "rhs": rows[ref]["naive"]["rhs"] * factor,
                                "extrapolated": 1.0}
        print(m, {b: {k: f"{val:.3g}" for k, val in r.items()} for b, r in rows[m].items()}, flush=True)

    def ratio(x: float) -> str:
        return f"{x:.2g}×" if x < 10 else f"{x:.0f}×"

    def fmt(r: dict[str, float], key: str, unit: float = 1.0) -> str:
        val = r.get(key)
        return "–" if val is None else ("~" if r.get("extrapolated") else "") + f"{val * unit:.3g}"

    lines = ["| modes | numpy compile cold / cached (s) | numba compile cold / cached (s) | naive compile (s) "
             "| numpy RHS (µs) | numba RHS (µs) | naive RHS (µs) | naive / numpy | naive / numba |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m, r in rows.items():
        n, j, s = r["numpy"], r["numba"], r["naive"]
        mark = "~" if s.get("extrapolated") else ""
        lines.append(f"| {m} | {fmt(n, 'cold')} / {fmt(n, 'cached')} | {fmt(j, 'cold')} / {fmt(j, 'cached')} | "
                     f"{fmt(s, 'cold')} | {fmt(n, 'rhs', 1e6)} | {fmt(j, 'rhs', 1e6)} | {fmt(s, 'rhs', 1e6)} | "
                     f"{mark}{ratio(s['rhs'] / n['rhs'])} | {mark}{ratio(s['rhs'] / j['rhs'])} |")
    goals = []
    if 1000 in rows:
        r = rows[1000]
        goals.append(f"- RHS at 1000 modes: naive / numpy = {r['naive']['rhs'] / r['numpy']['rhs']:.0f}×, "
                     f"naive / numba = {r['naive']['rhs'] / r['numba']['rhs']:.0f}× (goal ≥ 20×).")
    if 10 in rows and 10000 in rows:
        for b in ("numpy", "numba"):
            goals.append(f"- {b} cold compile, 10000 vs 10 modes: {rows[10000][b]['cold']:.3g} s / "
                         f"{rows[10][b]['cold']:.3g} s = {rows[10000][b]['cold'] / rows[10][b]['cold']:.2f}× "
                         "(goal ≤ 3×).")
    text = "\n".join([
        "# Feature ODE: compile and RHS benchmark", "",
        f"`python benchmarks/bench_ode.py` on {platform.machine()} ({os.cpu_count()} cores, shared), Python "
        f"{platform.python_version()}, NumPy {np.__version__}, SymPy {sp.__version__}, "
        f"{time.strftime('%Y-%m-%d')}. Single runs on a machine shared with other jobs: expect timing noise of "
        "tens of percent.", "",
        f"System: variant `{VARIANT.label}` (the reference closure), target basis, random mode sets of "
        f"degree 1–3 in d = {DIM} directions; state size 2M. Compile times include building the system, deriving "
        "the indexed exact Jacobian (generated with the RHS), writing and importing the module, and the first RHS "
        "call (numba's JIT), after a warm-up run that is not recorded; *cached* = loading the generated module (and "
        "numba's machine code) from the cache directory. Naive = expanded form, one `sympy.lambdify` per state variable without CSE"
        + (f"; above {args.naive_max} modes its times are extrapolated ∝ M² (marked ~)." if
           any(r['naive'].get('extrapolated') for r in rows.values()) else "."), "",
        *lines, "", *goals, ""])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
