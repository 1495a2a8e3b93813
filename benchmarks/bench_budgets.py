"""The budgets of issue 19 ("maps in seconds"), measured in one run:

1. kernel + EVERY registered closure (``closure_names()``) on a FRESH non-rational spectrum (exponent 1.5001 plus a
   random offset, spectrum offset 3 plus a random offset, so no cache of the spectrum, its law of |ŵ|² or its
   integrals is hit), CPU time (``time.process_time``) in this process with one BLAS thread, median of ``--repeat``
   fresh spectra:
   target basis / default config (budget 10 ms), extended basis d = 16 (200 ms), extended basis d = 64 (500 ms);
   beside each, the ratio to the MLP run it predicts (``--mlp-seconds``: the CPU time of ``featureode simulate`` of
   the default config, 1 thread, measured once by ``--mlp``, else the recorded figure of
   ``benchmarks/results/mlp_benchmark.md``);
2. the cold start: ``featureode solve`` (built-in config: extended basis, 3 variants) in a fresh process on an EMPTY
   cache (``FEATUREODE_CACHE_DIR`` a new folder, which also holds numba's cache of the generated modules), wall
   (budget 5 s), and the same with one variant: (3-variant − 1-variant)/2 per additional variant (budget 2 s);
3. the CLI sweep: ``featureode sweep benchmarks/grids/sweep1000.toml --ode-only --jobs 2`` (1000 configs: 10 γ × 10 d
   × 10 exponents, target basis, lazy + displacement + second_order), end to end in a fresh process, wall (budget 10 s), with the
   numba code compiled beforehand (a first sweep of 64 of the grid's configs in one process compiles it; its wall
   is recorded), and the result checked: 3000 rows, every one ``ok``, and the curve file holding 3000 curves; then
   the same sweep in one process (``--jobs 1``), wall and CPU time: the CPU time does not depend on what else the
   machine runs, the 2-job wall does.

Every figure is recorded with ``os.getloadavg()`` before it: on a shared machine the wall times exceed the CPU times
by the time spent waiting for a core.

Run:  PYTHONPATH=. python benchmarks/bench_budgets.py [--mlp] [--repeat 5] [--out benchmarks/results/budgets.md]
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

# one BLAS/OpenMP thread in this process too, as in the subprocess parts (ENV) and the MLP run it is compared with:
# on the small matrices of the kernel and the constants a second OpenBLAS thread only spins, and CPU time counts
# the spinning (≈ 2× the constants' CPU time on a loaded 2-core machine); set before NumPy is imported
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from featureode.config import load_config  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.solve import solve_variant  # noqa: E402
from featureode.ode.variants import Variant, closure_names  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
       "NUMBA_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
#: the CPU time of the default config's training, 1 thread, warm process (mlp_benchmark.md, 2026-12-05: 14.5–15.2 s
#: with the 0.81-of-bound step; the 13.1 s of 2026-11-30 was another machine's)
RECORDED_MLP_S = 14.8
BUDGETS = {"target basis, d = 16 (default config)": 0.010, "extended basis, d = 16": 0.200,
           "extended basis, d = 64": 0.500}


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def case_config(name: str, rng: np.random.Generator):
    exponent, offset = 1.5001 + rng.uniform(0, 1e-3), 3.0 + rng.uniform(0, 1e-3)
    cfg = load_config()
    dim = 64 if "d = 64" in name else 16
    basis = "target" if name.startswith("target") else "extended"
    return cfg.replace(data={"dim": dim, "exponent": exponent, "offset": offset}, ode={"basis": basis})


def solve_closure(theory, cfg, name: str):
    """One closure's compiled solve on a budget case, with the case config's solver settings."""
    t_min = min(cfg.training.t_min, cfg.training.t_max / 10)
    return solve_variant(theory, Variant(name), cfg.training.t_max, cfg.ode.eigenvalues, basis=cfg.ode.basis,
                         rtol=cfg.ode.rtol, atol=cfg.ode.atol, n_points=cfg.ode.n_points, t_min=t_min,
                         compile=True)


def kernel_and_closures(cfg, closures: list[str]) -> dict[str, float]:
    """CPU seconds of the kernel and of each closure's solve, for one fresh config."""
    out = {}
    c0 = time.process_time()
    theory = kernel_theory(cfg, with_gram=cfg.ode.basis == "extended")
    out["kernel"] = time.process_time() - c0
    for name in closures:
        c0 = time.process_time()
        try:
            solve_closure(theory, cfg, name)
        except Exception as exc:  # noqa: BLE001 — a closure that fails still spent its time; say so
            out[f"{name} failed"] = 1.0
            print(f"  {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        out[name] = time.process_time() - c0
    return out


def bench_budgets(repeat: int, closures: list[str]) -> dict:
    rng = np.random.default_rng()
    res = {}
    for name in BUDGETS:
        print(f"budget case {name} ...", flush=True)
        kernel_and_closures(case_config(name, rng), closures)  # numba code compiled/loaded, not timed
        before = load()
        runs = [kernel_and_closures(case_config(name, rng), closures) for _ in range(repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        med["total"] = statistics.median(sum(r[k] for k in ["kernel", *closures]) for r in runs)
        cfg = case_config(name, rng)
        theory = kernel_theory(cfg, with_gram=cfg.ode.basis == "extended")
        modes = len(theory.modes)
        first = None
        if "second_order" in closures:   # the flow algebra is traced once per mode set: its first call, traced
            from featureode.kernel import second_order as so_mod   # afresh (an empty cache) and read from the disk
            from featureode.ode import solve as solve_mod

            first = []
            saved = os.environ.get("FEATUREODE_CACHE_DIR")
            with tempfile.TemporaryDirectory() as tmp:
                os.environ["FEATUREODE_CACHE_DIR"] = tmp
                try:
                    for _ in range(2):   # the first traces and writes, the second reads the disk cache
                        so_mod._trace.cache_clear()
                        so_mod._cached.cache_clear()
                        solve_mod._SECOND_ORDER.clear()
                        c0 = time.process_time()
                        solve_closure(theory, cfg, "second_order")
                        first.append(time.process_time() - c0)
                finally:
                    if saved is None:
                        os.environ.pop("FEATUREODE_CACHE_DIR", None)
                    else:
                        os.environ["FEATUREODE_CACHE_DIR"] = saved
        res[name] = {"median": med, "load": before, "modes": modes, "first_second_order": first}
    return res


def run_wall(cmd: list[str], env: dict) -> tuple[float, str, str]:
    before = load()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
    return wall, before, proc.stderr


def bench_cold() -> dict:
    out = {}
    # the budget is the closures': the built-in config's three closures (its variants also hold the reference
    # meanfield+whole, about a minute of flow; benchmarks/bench_meanfield.py measures that), and one closure
    for label, variants in (("3 variants", '"lazy", "displacement", "rational"'), ("1 variant", '"lazy"')):
        with tempfile.TemporaryDirectory() as tmp:
            # numba's own cache too (the kernel's compiled loops keep theirs beside the package by default)
            env = {**ENV, "FEATUREODE_CACHE_DIR": str(Path(tmp) / "cache"), "NUMBA_CACHE_DIR": str(Path(tmp) / "numba")}
            cmd = [sys.executable, "-m", "featureode", "solve", "--out", str(Path(tmp) / "out")]
            if variants:
                cfg = Path(tmp) / "one.toml"
                # the built-in config with these variants (a config file names its target; the rest defaults)
                default = (ROOT / "featureode" / "defaults" / "default.toml").read_text()
                line = next(x for x in default.splitlines() if x.startswith("variants ="))
                cfg.write_text(default.replace(line, f'variants = [{variants}]'))
                cmd.insert(4, str(cfg))   # featureode solve CONFIG --out …
            wall, before, err = run_wall(cmd, env)
            out[label] = (wall, before, [line for line in err.splitlines() if "compiling" in line])
    return out


def bench_sweep() -> dict:
    grid = ROOT / "benchmarks" / "grids" / "sweep1000.toml"
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        # 4 × 4 × 4 configs in one process: groups of 16 (solve_batch's BATCH_COMPILE_MIN), so the numba
        # integrators are compiled (or found in the cache) here; a smaller warm-up would solve in NumPy and leave
        # the compiles to the timed sweep's two workers
        small = Path(tmp) / "first64.toml"
        text = grid.read_text().replace("[0.01, 0.03, 0.06, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5]",
                                        "[0.01, 0.03, 0.06, 0.1]")
        small.write_text(text.replace("[4, 6, 8, 12, 16, 20, 24, 32, 48, 64]", "[4, 6, 8, 12]")
                         .replace("[0.55, 0.7501, 0.9001, 1.1001, 1.2501, 1.4001, 1.5001, 1.7001, 1.9001, 2.2001]",
                                  "[0.55, 0.7501, 0.9001, 1.1001]"))
        cmd = [sys.executable, "-m", "featureode", "sweep", str(small), "--ode-only", "--jobs", "1", "--quiet",
               "--out", str(Path(tmp) / "warmup")]
        wall, before, err = run_wall(cmd, ENV)
        out["warm-up (64 configs, compiles if needed)"] = (wall, before, [x for x in err.splitlines()
                                                                          if "compiling" in x])
        cmd = [sys.executable, "-m", "featureode", "sweep", str(grid), "--ode-only", "--jobs", "2", "--quiet",
               "--out", str(Path(tmp) / "sweep")]
        wall, before, err = run_wall(cmd, ENV)
        import pandas as pd

        table = pd.read_csv(Path(tmp) / "sweep" / "results.csv")
        curves = pd.read_parquet(Path(tmp) / "sweep" / "curves.parquet", columns=["run", "variant"])
        n_curves = len(curves.drop_duplicates())
        out["1000 configs, --jobs 2"] = (wall, before, [f"{len(table)} rows in results.csv "
                                                        f"({(table.status == 'ok').sum()} ok)",
                                                        f"{n_curves} curves in curves.parquet"])
        shutil.rmtree(Path(tmp) / "sweep", ignore_errors=True)
        # the same sweep in one process: its CPU time (user + sys of this child) is what the sweep costs whatever
        # else the machine runs; on two free cores the 2-job wall is about half of it plus the workers' start
        import resource

        cmd = [sys.executable, "-m", "featureode", "sweep", str(grid), "--ode-only", "--jobs", "1", "--quiet",
               "--out", str(Path(tmp) / "inline")]
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall, before, err = run_wall(cmd, ENV)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - usage.ru_utime + after.ru_stime - usage.ru_stime
        out["1000 configs, --jobs 1 (one process)"] = (wall, before, [f"CPU {cpu:.2f} s (user + sys)"])
    return out


def bench_mlp() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "cfg.toml"
        cfg.write_text('[target]\nexpr = "staircase(2)"\n\n[training]\ndevice = "cpu"\nthreads = 1\n')
        import resource

        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "featureode", "simulate", str(cfg), "--out", str(Path(tmp) / "o"),
                        "--quiet"], env=ENV, check=True, capture_output=True, cwd=ROOT)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mlp", action="store_true", help="measure the MLP run once (≈ 15–40 s) instead of the record")
    ap.add_argument("--skip-closures", default="", help="comma-separated closures left out (say why in the table)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "budgets.md"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    skipped = [c for c in args.skip_closures.split(",") if c]
    closures = [c for c in closure_names() if c not in skipped]
    start = load()
    budgets = bench_budgets(args.repeat, closures)
    cold = bench_cold()
    sweep = bench_sweep()
    mlp_s = bench_mlp() if args.mlp else RECORDED_MLP_S
    mlp_what = ("measured here (`featureode simulate`, default config, 1 thread, CPU)" if args.mlp else
                f"recorded in mlp_benchmark.md ({RECORDED_MLP_S} s CPU, 2026-12-05, default config, 1 thread, "
                "warm process)")

    lines = ["# Budgets of issue 19 (`benchmarks/bench_budgets.py`)", "",
             f"{platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}, "
             f"{time.strftime('%Y-%m-%d %H:%M')}; load average (1, 5, 15 min) at the start: {start}. "
             f"Command: `python benchmarks/bench_budgets.py{' --mlp' if args.mlp else ''} --repeat {args.repeat}"
             f"{' --skip-closures ' + args.skip_closures if skipped else ''}`.", "",
             "## Kernel + every registered closure, fresh non-rational spectrum, CPU time", "",
             f"Closures: {', '.join(closures)}" + (f" (left out: {', '.join(skipped)})" if skipped else "")
             + f". Median over {args.repeat} fresh spectra (exponent 1.5001 + U(0, 1e-3), offset 3 + U(0, 1e-3)); "
             "staircase(2), γ = 0.5, the default network (N = 1024 does not enter the kernel), t_max = 300, "
             f"rtol 1e-8; one BLAS thread (OPENBLAS/OMP/MKL_NUM_THREADS = "
             f"{os.environ.get('OPENBLAS_NUM_THREADS')}/{os.environ.get('OMP_NUM_THREADS')}/"
             f"{os.environ.get('MKL_NUM_THREADS')}). MLP: {mlp_what}; the ratio is MLP CPU / (kernel + closures) CPU.",
             "",
             "| case | modes | kernel | " + " | ".join(closures) + " | total | budget | MLP / total | load |",
             "|---|---:|---:|" + "---:|" * len(closures) + "---:|---:|---:|---|"]
    for name, r in budgets.items():
        m = r["median"]
        ok = "met" if m["total"] <= BUDGETS[name] else "MISSED"
        lines.append(f"| {name} | {r['modes']} | {m['kernel'] * 1e3:.1f} ms | "
                     + " | ".join(f"{m[c] * 1e3:.1f} ms" for c in closures)
                     + f" | **{m['total'] * 1e3:.1f} ms** | {BUDGETS[name] * 1e3:.0f} ms: {ok} | "
                     f"{mlp_s / m['total']:.0f}× | {r['load']} |")
    firsts = [(name, r["first_second_order"]) for name, r in budgets.items() if r["first_second_order"] is not None]
    if firsts:
        lines += ["", "`second_order` traces its flow algebra once per mode set (the algebra does not depend on the "
                  "spectrum; `featureode.kernel.second_order._trace`, kept in the process and in the disk cache); the "
                  "table's runs reuse the trace of the untimed first config, as every config of a sweep after the "
                  "first does. The first call on each case's mode set (constants + solve, CPU), traced afresh "
                  "(empty cache) / read from the disk cache (a later process): "
                  + "; ".join(f"{name}: {t[0] * 1e3:.1f} / {t[1] * 1e3:.1f} ms" for name, t in firsts) + "."]
    lines += ["", "## Cold start: `featureode solve` (built-in config), fresh process, empty cache, wall", "",
              "| run | wall | load before | stderr lines about compiling |", "|---|---:|---|---|"]
    for label, (wall, before, notes) in cold.items():
        lines.append(f"| {label} | {wall:.2f} s | {before} | {len(notes)} |")
    per = (cold["3 variants"][0] - cold["1 variant"][0]) / 2
    lines += ["", f"3 variants: {cold['3 variants'][0]:.2f} s (budget 5 s: "
              f"{'met' if cold['3 variants'][0] <= 5 else 'MISSED'}); per additional variant {per:.2f} s "
              f"(budget 2 s: {'met' if per <= 2 else 'MISSED'}).", "",
              "## CLI sweep: `featureode sweep benchmarks/grids/sweep1000.toml --ode-only`, fresh process, wall", "",
              "| run | wall | load before | notes |", "|---|---:|---|---|"]
    for label, (wall, before, notes) in sweep.items():
        lines.append(f"| {label} | {wall:.2f} s | {before} | {'; '.join(notes) or '—'} |")
    full = sweep["1000 configs, --jobs 2"][0]
    lines += ["", f"1000 configs: {full:.2f} s (budget 10 s: {'met' if full <= 10 else 'MISSED'}).", "",
              f"Load average at the end: {load()}."]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
