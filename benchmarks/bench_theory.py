"""Benchmark of the theory path (issue 13), side by side in one invocation:

1. a cProfile of one warm ``kernel_theory`` + every variant of the default config (target basis), top lines;
2. kernel + each variant of the default config (staircase(2), d = 16; variants lazy, agop, displacement), warm,
   median of repeats, on the target basis and on the extended basis, for the compiled RODAS4 integrator
   (``[ode] method = "rodas4"``, the default) and SciPy's LSODA (the reference backend, the solver used before);
3. a batch of 1000 configs (10 richness values γ × 100 kernels: 4 targets × 5 dimensions × 5 spectra) through
   ``solve_batch``: kernel theories (``kernel_theory`` once per distinct (target, d, spectrum); the init kernel does
   not depend on γ) and the ODE of every config and variant (lazy, displacement);
4. ``featureode solve`` in a fresh process (imports included), on the target and on the extended basis;
5. the MLP run the default config predicts (``featureode simulate``, one run, 1 thread; ``--no-mlp`` skips it).

Ratios are printed and written with the sizes to ``benchmarks/results/theory_benchmark.md`` together with the
machine load (``uptime``). Goals: target basis ≤ 10 ms, extended ≤ 200 ms (warm, kernel + every variant); batch of
1000 ≤ 10 s; ``featureode solve`` fresh ≤ 2 s.

Run:  python benchmarks/bench_theory.py [--no-mlp] [--batch 1000] [--out benchmarks/results/theory_benchmark.md]
"""
from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import os
import platform
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from featureode.kernel import theory as kernel  # noqa: E402
from featureode.config import load_config  # noqa: E402
from featureode.ode.solve import solve_batch, solve_variant  # noqa: E402
from featureode.ode.variants import variants_from_config  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
       "NUMBA_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


class Timing(tuple):
    """``(wall, cpu)`` seconds; prints as ``wall (cpu)``."""

    def __new__(cls, wall: float, cpu: float) -> "Timing":
        return super().__new__(cls, (wall, cpu))

    def __add__(self, other: "Timing") -> "Timing":  # type: ignore[override]  # a sum of timings, not a concatenation
        return Timing(self[0] + other[0], self[1] + other[1])

    def ms(self, digits: int = 1) -> str:
        return f"{self[0] * 1e3:.{digits}f} ({self[1] * 1e3:.{digits}f}) ms"

    def s(self) -> str:
        return f"{self[0]:.2f} ({self[1]:.2f}) s"


def median_time(fn, repeat: int = 7) -> Timing:
    """Median wall and CPU (this process) time of ``fn()``."""
    walls, cpus = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return Timing(statistics.median(walls), statistics.median(cpus))


#: Fresh ``featureode solve`` processes timed per basis; the table gives the median.
FRESH_RUNS = 5


def child_time(cmd: list[str]) -> Timing:
    """Wall and CPU (user + system of the child) time of a subprocess."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=ENV, capture_output=True, check=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Timing(wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)


def default_cfg(basis: str):
    return load_config().replace(ode={"basis": basis})


def theory_of(cfg):
    return kernel.kernel_theory(cfg, with_gram=cfg.ode.basis == "extended")


def solve_all(cfg, theory, method: str) -> list:
    o = cfg.ode
    t_min = min(cfg.training.t_min, cfg.training.t_max / 10)
    return [solve_variant(theory, v, cfg.training.t_max, o.eigenvalues, basis=o.basis, method=method, rtol=o.rtol,
                          atol=o.atol, n_points=o.n_points, t_min=t_min) for v in variants_from_config(o)]


def profile_lines(cfg, n: int = 18) -> str:
    solve_all(cfg, theory_of(cfg), "rodas4")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(3):
        solve_all(cfg, theory_of(cfg), "rodas4")
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(n)
    return "\n".join(line for line in buf.getvalue().splitlines() if line.strip())


def bench_config(basis: str) -> dict:
    cfg = default_cfg(basis)
    theory = theory_of(cfg)
    out: dict[Any, object] = {"modes": len(theory.modes), "variants": [v.label for v in variants_from_config(cfg.ode)]}
    out["kernel"] = median_time(lambda: theory_of(cfg), 3 if basis == "extended" else 5)
    for method in ("rodas4", "LSODA"):
        solve_all(cfg, theory, method)
        for v in variants_from_config(cfg.ode):
            o = cfg.ode
            out[(method, v.label)] = median_time(lambda: solve_variant(
                theory, v, cfg.training.t_max, o.eigenvalues, basis=basis, method=method, n_points=o.n_points,
                t_min=min(cfg.training.t_min, cfg.training.t_max / 10)))
    return out


def bench_batch(n: int) -> dict:
    base = load_config().replace(ode={"basis": "target", "variants": ["lazy", "displacement"]})
    targets = ["z0", "z0*z1", "staircase(2)", "staircase(3)"]
    dims, exponents = [8, 12, 16, 24, 32], [0.5, 1.0, 1.5, 2.0, 2.5]
    gammas = np.geomspace(0.005, 0.5, 10)
    kernels = [(t, d, a) for t in targets for d in dims for a in exponents]
    per_kernel = max(1, n // len(kernels))
    cfgs, keys = [], []
    for t, d, a in kernels:
        for g in gammas[:per_kernel]:
            cfgs.append(base.replace(target={"expr": t}, data={"dim": d, "exponent": a},
                                     network={"richness": float(g)}))
            keys.append((t, d, a))
    cfgs, keys = cfgs[:n], keys[:n]
    t0, c0 = time.perf_counter(), time.process_time()
    built: dict = {}
    theories = []
    for cfg, key in zip(cfgs, keys):
        if key not in built:
            built[key] = theory_of(cfg)
        theories.append(dataclasses.replace(built[key], gamma=cfg.network.richness))
    t_kernel = Timing(time.perf_counter() - t0, time.process_time() - c0)
    solve_batch(cfgs[:len(kernels)], theories[:len(kernels)])   # compile/load once, not timed
    t0, c0 = time.perf_counter(), time.process_time()
    results = solve_batch(cfgs, theories)
    t_ode = Timing(time.perf_counter() - t0, time.process_time() - c0)
    failed = sum(len(r.errors) for r in results)
    return {"configs": len(cfgs), "kernels": len(built), "solves": sum(len(r.variants) for r in results),
            "kernel_s": t_kernel, "ode_s": t_ode, "failed": failed}


def bench_fresh(basis: str) -> tuple[Timing, str]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = Path(tmp) / "cfg.toml"
        text = (ROOT / "featureode" / "defaults" / "default.toml").read_text()
        cfg_path.write_text(text.replace('basis = "extended"', f'basis = "{basis}"'))
        cmd = [sys.executable, "-m", "featureode", "solve", str(cfg_path), "--out", str(Path(tmp) / "out")]
        subprocess.run(cmd, env=ENV, capture_output=True, check=True, cwd=ROOT)  # the disk caches warm
        runs = sorted((child_time(cmd) for _ in range(FRESH_RUNS)), key=lambda r: r[0])
        wall = runs[len(runs) // 2]  # the median of FRESH_RUNS fresh processes (one is at the mercy of the load)
        imp = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], env=ENV, capture_output=True,
                             text=True, cwd=ROOT).stderr
    rows = []
    for line in imp.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    top = "\n".join(f"{us / 1e3:8.1f} ms {name}" for us, name in sorted(rows, reverse=True)[:12])
    return wall, top


def bench_mlp() -> Timing:
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = Path(tmp) / "cfg.toml"
        text = (ROOT / "featureode" / "defaults" / "default.toml").read_text()
        text = text.replace('device = "auto"', 'device = "cpu"')
        if "threads = 1" not in text:
            text = text.replace('device = "cpu"', 'device = "cpu"\nthreads = 1')
        cfg_path.write_text(text)
        return child_time([sys.executable, "-m", "featureode", "simulate", str(cfg_path), "--out",
                           str(Path(tmp) / "out"), "--quiet"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-mlp", action="store_true", help="skip the MLP run (≈ 20–40 s)")
    ap.add_argument("--batch", type=int, default=1000, help="number of configs in the batch")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "theory_benchmark.md"))
    args = ap.parse_args()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print("load:", load, flush=True)
    prof = profile_lines(default_cfg("target"))
    print(prof, flush=True)
    res = {b: bench_config(b) for b in ("target", "extended")}
    batch = bench_batch(args.batch)
    fresh = {b: bench_fresh(b) for b in ("target", "extended")}
    mlp = None if args.no_mlp else bench_mlp()

    lines = ["# Theory path benchmark (issue 13)", "",
             f"`python benchmarks/bench_theory.py{' --no-mlp' if args.no_mlp else ''}` on {platform.machine()} "
             f"({os.cpu_count()} cores, shared with other jobs), Python {platform.python_version()}, "
             f"{time.strftime('%Y-%m-%d %H:%M')}. Load at the start: `{load}`. Every time is given as "
             "**wall (CPU)**: warm timings are medians of repeats in one process; on a loaded machine the wall "
             "time exceeds the CPU time by the time the process waited for a core, so the CPU time is the one to "
             "compare with the goals.", "",
             "Default config: staircase(2), d = 16, γ = 0.5, variants " + ", ".join(res["target"]["variants"]) +
             "; `rodas4` = the compiled RODAS4 integrator (default `[ode] method`), `LSODA` = SciPy's "
             "`solve_ivp` (the reference backend; the solver before this change), both at rtol = 1e-8, "
             "atol = 1e-10, 200 output times.", "",
             "| step | target basis | extended basis |", "|---|---:|---:|",
             f"| modes (states) | {res['target']['modes']} ({2 * res['target']['modes']}) | "
             f"{res['extended']['modes']} ({2 * res['extended']['modes']}) |",
             f"| `kernel_theory` | {res['target']['kernel'].ms()} | {res['extended']['kernel'].ms(0)} |"]
    totals, odes = {}, {}
    for method in ("rodas4", "LSODA"):
        for v in res["target"]["variants"]:
            lines.append(f"| `solve_variant` {v}, {method} | {res['target'][(method, v)].ms(2)} | "
                         f"{res['extended'][(method, v)].ms(1)} |")
        odes[method] = {b: sum((res[b][(method, v)] for v in res[b]["variants"]), Timing(0, 0)) for b in res}
        totals[method] = {b: res[b]["kernel"] + odes[method][b] for b in res}
        lines.append(f"| **kernel + every variant, {method}** | **{totals[method]['target'].ms()}** | "
                     f"**{totals[method]['extended'].ms(0)}** |")
    lines.append(f"| every variant, CPU: LSODA / rodas4 | {odes['LSODA']['target'][1] / odes['rodas4']['target'][1]:.0f}× | "
                 f"{odes['LSODA']['extended'][1] / odes['rodas4']['extended'][1]:.1f}× |")
    lines += [f"| `featureode solve` fresh process (median of {FRESH_RUNS}) | {fresh['target'][0].s()} | "
              f"{fresh['extended'][0].s()} |"]
    if mlp is not None:
        lines += [f"| MLP run (`featureode simulate`, default config, 1 thread) | {mlp.s()} | same |",
                  f"| MLP / (kernel + every variant, rodas4), CPU | {mlp[1] / totals['rodas4']['target'][1]:.0f}× | "
                  f"{mlp[1] / totals['rodas4']['extended'][1]:.0f}× |"]
    per_solve = batch["ode_s"][1] / max(batch["solves"], 1) * 1e3
    total = batch["kernel_s"] + batch["ode_s"]
    lines += ["", f"Batch: {batch['configs']} configs (4 targets × 5 d × 5 spectrum exponents × "
              f"{batch['configs'] // max(batch['kernels'], 1)} γ), {batch['solves']} variant solves, "
              f"{batch['failed']} failed: kernels ({batch['kernels']} distinct, `kernel_theory` each) "
              f"{batch['kernel_s'].s()}; ODE (`solve_batch`, compiled RODAS4, one core) {batch['ode_s'].s()} "
              f"({per_solve:.2f} ms CPU per solve); total {total.s()}.", ""]
    goals = [("target basis, kernel + every variant ≤ 10 ms", totals["rodas4"]["target"][1] <= 0.010,
              f"{totals['rodas4']['target'].ms()}, of which the ODE {odes['rodas4']['target'].ms()}"),
             ("extended basis ≤ 200 ms", totals["rodas4"]["extended"][1] <= 0.200,
              f"{totals['rodas4']['extended'].ms(0)}, of which the ODE {odes['rodas4']['extended'].ms(0)}"),
             ("batch of 1000 ≤ 10 s", total[1] <= 10, f"{total.s()}, of which the ODE {batch['ode_s'].s()}"),
             ("`featureode solve` fresh ≤ 2 s", max(fresh["target"][0][1], fresh["extended"][0][1]) <= 2,
              f"{fresh['target'][0].s()} (target basis), {fresh['extended'][0].s()} (extended)")]
    lines += ["Goals (judged on CPU time):", ""] + [f"- {name}: **{'met' if ok else 'MISSED'}** ({what})."
                                                    for name, ok, what in goals]
    lines += ["", "Profile (cProfile, 3 × kernel + every variant, target basis, rodas4, warm):", "", "```", prof,
              "```", "", "Import time of `featureode solve` (fresh process, target basis; `-X importtime`, "
              "cumulative):", "", "```", fresh["target"][1], "```", ""]
    text = "\n".join(lines)
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
