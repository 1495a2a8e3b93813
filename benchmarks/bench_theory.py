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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from featureode import kernel  # noqa: E402
from featureode.config import load_config  # noqa: E402
from featureode.solve import solve_batch, solve_variant  # noqa: E402
from featureode.variants import variants_from_config  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
       "NUMBA_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


def median_time(fn, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


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
    out = {"modes": len(theory.modes), "variants": [v.label for v in variants_from_config(cfg.ode)]}
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
    t0 = time.perf_counter()
    built: dict = {}
    theories = []
    for cfg, key in zip(cfgs, keys):
        if key not in built:
            built[key] = theory_of(cfg)
        theories.append(dataclasses.replace(built[key], gamma=cfg.network.richness))
    t_kernel = time.perf_counter() - t0
    solve_batch(cfgs[:len(kernels)], theories[:len(kernels)])   # compile/load once, not timed
    t0 = time.perf_counter()
    results = solve_batch(cfgs, theories)
    t_ode = time.perf_counter() - t0
    failed = sum(len(r.errors) for r in results)
    return {"configs": len(cfgs), "kernels": len(built), "solves": sum(len(r.variants) for r in results),
            "kernel_s": t_kernel, "ode_s": t_ode, "failed": failed}


def bench_fresh(basis: str) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = Path(tmp) / "cfg.toml"
        text = (ROOT / "featureode" / "defaults" / "default.toml").read_text()
        cfg_path.write_text(text.replace('basis = "extended"', f'basis = "{basis}"'))
        cmd = [sys.executable, "-m", "featureode", "solve", str(cfg_path), "--out", str(Path(tmp) / "out")]
        subprocess.run(cmd, env=ENV, capture_output=True, check=True, cwd=ROOT)  # the disk caches warm
        t0 = time.perf_counter()
        subprocess.run(cmd, env=ENV, capture_output=True, check=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        imp = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], env=ENV, capture_output=True,
                             text=True, cwd=ROOT).stderr
    rows = []
    for line in imp.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    top = "\n".join(f"{us / 1e3:8.1f} ms {name}" for us, name in sorted(rows, reverse=True)[:12])
    return wall, top


def bench_mlp() -> float:
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path = Path(tmp) / "cfg.toml"
        text = (ROOT / "featureode" / "defaults" / "default.toml").read_text()
        cfg_path.write_text(text.replace('device = "auto"', 'device = "cpu"\nthreads = 1'))
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "featureode", "simulate", str(cfg_path), "--out",
                        str(Path(tmp) / "out"), "--quiet"], env=ENV, capture_output=True, check=True, cwd=ROOT)
        return time.perf_counter() - t0


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
             f"{time.strftime('%Y-%m-%d %H:%M')}. Load at the start: `{load}`. Warm timings are medians of "
             "repeats in one process; single runs on a shared machine carry noise of tens of percent.", "",
             "Default config: staircase(2), d = 16, γ = 0.5, variants " + ", ".join(res["target"]["variants"]) +
             "; `rodas4` = the compiled RODAS4 integrator (default `[ode] method`), `LSODA` = SciPy's "
             "`solve_ivp` (the reference backend; the solver before this change), both at rtol = 1e-8, "
             "atol = 1e-10, 200 output times.", "",
             "| step | target basis | extended basis |", "|---|---:|---:|",
             f"| modes (states) | {res['target']['modes']} ({2 * res['target']['modes']}) | "
             f"{res['extended']['modes']} ({2 * res['extended']['modes']}) |",
             f"| `kernel_theory` | {res['target']['kernel'] * 1e3:.1f} ms | {res['extended']['kernel'] * 1e3:.0f} ms |"]
    totals = {}
    for method in ("rodas4", "LSODA"):
        for v in res["target"]["variants"]:
            lines.append(f"| `solve_variant` {v}, {method} | {res['target'][(method, v)] * 1e3:.2f} ms | "
                         f"{res['extended'][(method, v)] * 1e3:.1f} ms |")
        totals[method] = {b: res[b]["kernel"] + sum(res[b][(method, v)] for v in res[b]["variants"])
                          for b in res}
        lines.append(f"| **kernel + every variant, {method}** | **{totals[method]['target'] * 1e3:.1f} ms** | "
                     f"**{totals[method]['extended'] * 1e3:.0f} ms** |")
    ode_only = {b: sum(res[b][("rodas4", v)] for v in res[b]["variants"]) for b in res}
    ode_old = {b: sum(res[b][("LSODA", v)] for v in res[b]["variants"]) for b in res}
    lines.append(f"| every variant: LSODA / rodas4 | {ode_old['target'] / ode_only['target']:.0f}× | "
                 f"{ode_old['extended'] / ode_only['extended']:.1f}× |")
    lines += [f"| `featureode solve` fresh process (wall) | {fresh['target'][0]:.2f} s | {fresh['extended'][0]:.2f} s |"]
    if mlp is not None:
        lines += [f"| MLP run (`featureode simulate`, default config, 1 thread) | {mlp:.1f} s | same |",
                  f"| MLP / (kernel + every variant, rodas4) | {mlp / totals['rodas4']['target']:.0f}× | "
                  f"{mlp / totals['rodas4']['extended']:.0f}× |"]
    lines += ["", f"Batch: {batch['configs']} configs (4 targets × 5 d × 5 spectrum exponents × "
              f"{batch['configs'] // max(batch['kernels'], 1)} γ), {batch['solves']} variant solves, "
              f"{batch['failed']} failed: kernels ({batch['kernels']} distinct, `kernel_theory` each) "
              f"{batch['kernel_s']:.1f} s; ODE (`solve_batch`, compiled RODAS4) {batch['ode_s']:.2f} s "
              f"({batch['ode_s'] / max(batch['solves'], 1) * 1e3:.2f} ms per solve); total "
              f"{batch['kernel_s'] + batch['ode_s']:.1f} s.", ""]
    goals = [("target basis, kernel + every variant ≤ 10 ms", totals["rodas4"]["target"] <= 0.010,
              f"{totals['rodas4']['target'] * 1e3:.1f} ms, of which the ODE {ode_only['target'] * 1e3:.1f} ms"),
             ("extended basis ≤ 200 ms", totals["rodas4"]["extended"] <= 0.200,
              f"{totals['rodas4']['extended'] * 1e3:.0f} ms, of which the ODE {ode_only['extended'] * 1e3:.0f} ms"),
             ("batch of 1000 ≤ 10 s", batch["kernel_s"] + batch["ode_s"] <= 10,
              f"{batch['kernel_s'] + batch['ode_s']:.1f} s, of which the ODE {batch['ode_s']:.2f} s"),
             ("`featureode solve` fresh ≤ 2 s", fresh["target"][0] <= 2,
              f"{fresh['target'][0]:.2f} s (target basis), {fresh['extended'][0]:.2f} s (extended)")]
    lines += ["Goals:", ""] + [f"- {name}: **{'met' if ok else 'MISSED'}** ({what})." for name, ok, what in goals]
    lines += ["", "Profile (cProfile, 3 × kernel + every variant, target basis, rodas4, warm):", "", "```", prof,
              "```", "", "Import time of `featureode solve` (fresh process, target basis; `-X importtime`, "
              "cumulative):", "", "```", fresh["target"][1], "```", ""]
    text = "\n".join(lines)
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
