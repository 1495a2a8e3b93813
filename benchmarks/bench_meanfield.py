"""What the ``meanfield``, ``meanfield+tail`` and ``meanfield+whole`` variants cost a user, beside the reference
closure ``rational``, in one run.

1. ``featureode solve`` in a fresh process on an EMPTY cache (featureode's and numba's), built-in config (extended
   basis), with ``--set ode.variants=[...]``: ``["rational"]`` against ``["rational", "meanfield"]`` (and the other
   two variants); the difference is what the variant adds end to end through the CLI.
2. Warm, in this process: ``meanfield_trajectory`` against ``solve_variant(..., "rational")`` on the same kernel
   theory, ``meanfield_trajectory(..., tail=True)`` and ``meanfield_trajectory(..., drive="whole")`` (the reference;
   RKC), for a few suite-like cases (the modes it follows, the steps, CPU seconds). The first case of an
   activation without a closed-form mean (tanh) also builds its table of means; that cost is shown apart.

    python benchmarks/bench_meanfield.py [--out benchmarks/results/meanfield_benchmark.md]
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from featureode.config import load_config  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import MeanTable, meanfield_trajectory  # noqa: E402
from featureode.ode.solve import solve_variant  # noqa: E402

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

#: (label, target, activation, d, γ, t_max, whole): the default run's target and three shapes of the wide suites;
#: ``meanfield+whole`` runs where ``whole`` is set (on three directions it takes 10–20 minutes: not run here)
CASES = [
    ("staircase(2), relu, d = 16 (the built-in run)", "staircase(2)", "relu", 16, 0.5, 300.0, True),
    ("z0*z1, erf, d = 16", "z0*z1", "erf", 16, 0.5, 400.0, False),
    ("z0*z1, tanh, d = 16", "z0*z1", "tanh", 16, 0.5, 450.0, True),
    ("h3(z0), relu, d = 16", "h3(z0)", "relu", 16, 0.5, 560.0, True),
    ("z0*z1*z2, relu, d = 32", "z0*z1*z2", "relu", 32, 0.5, 1400.0, False),
]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cold(variants: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**ENV, "FEATUREODE_CACHE_DIR": str(Path(tmp) / "cache"), "NUMBA_CACHE_DIR": str(Path(tmp) / "numba")}
        cmd = [sys.executable, "-m", "featureode", "solve", "--set", f"ode.variants={variants}", "--out",
               str(Path(tmp) / "out")]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")
        return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "meanfield_benchmark.md")
    args = p.parse_args()
    lines = ["# `meanfield`, `meanfield+tail` and `meanfield+whole` against `rational`: cost", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; load before: {load()}. "
             "One BLAS thread. Made by `python benchmarks/bench_meanfield.py`.", "",
             "## Cold start through the CLI (fresh process, empty caches, built-in config, extended basis)", "",
             "| `--set ode.variants=` | wall s |", "|---|---|"]
    walls = {}
    for variants in ('["rational"]', '["rational", "meanfield"]', '["rational", "meanfield+tail"]',
                     '["rational", "meanfield+whole"]'):
        walls[variants] = cold(variants)
        lines.append(f"| `{variants}` | {walls[variants]:.1f} |")
    added = walls['["rational", "meanfield"]'] - walls['["rational"]']
    added_tail = walls['["rational", "meanfield+tail"]'] - walls['["rational"]']
    added_whole = walls['["rational", "meanfield+whole"]'] - walls['["rational"]']
    lines += ["", f"meanfield adds {added:.1f} s end to end, meanfield+tail {added_tail:.1f} s, meanfield+whole "
              f"{added_whole:.1f} s.",
              "", "## Warm, one process: the flow against the closure on the same kernel theory", "",
              "| case | modes of the basis | modes followed / directions | RK4 steps | meanfield CPU s | "
              "meanfield+tail CPU s (tail evaluations, finest rule) | meanfield+whole CPU s (RKC steps) | rational CPU s | "
              "table of means (first use) s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for label, target, act, d, gamma, t_max, with_whole in CASES:
        cfg = load_config().replace(target={"expr": target}, network={"activation": act, "richness": gamma},
                                    data={"dim": d}, training={"t_max": t_max}, ode={"basis": "extended"})
        theory = kernel_theory(cfg, with_gram=True)
        table = ""
        if act == "tanh":   # the tables of means on an empty cache (a later process reads them from the cache)
            before = len(MeanTable._splines)
            with tempfile.TemporaryDirectory() as tmp:
                old = os.environ.get("FEATUREODE_CACHE_DIR")
                os.environ["FEATUREODE_CACHE_DIR"] = tmp
                c0 = time.process_time()
                meanfield_trajectory(theory, 1e-3, t_min=1e-4, n_points=2, m=4)   # builds the tables, ~no steps
                table = f"{time.process_time() - c0:.1f} ({len(MeanTable._splines) - before} orders, empty cache)"
                if old is None:
                    del os.environ["FEATUREODE_CACHE_DIR"]
                else:
                    os.environ["FEATUREODE_CACHE_DIR"] = old
        c0 = time.process_time()
        mf = meanfield_trajectory(theory)
        t_mf = time.process_time() - c0
        c0 = time.process_time()
        mf_tail = meanfield_trajectory(theory, tail=True)
        t_tail = time.process_time() - c0
        tail = mf_tail.meta["info"]["tail"]
        tail_note = (f"{t_tail:.2f} ({tail['evaluations']}, {tail['rule']}"
                     + ("; stopped: tail not resolved" if not mf_tail.status.complete else "") + ")")
        whole_note = "not run"
        if with_whole:
            c0 = time.process_time()
            mf_whole = meanfield_trajectory(theory, drive="whole")
            t_whole = time.process_time() - c0
            whole_note = (f"{t_whole:.2f} ({mf_whole.meta['info']['steps']}"
                          + ("; stopped: " + str(mf_whole.status.error)[:60] if not mf_whole.status.complete else "")
                          + ")")
        solve_variant(theory, "rational")   # warm: the system built once per process
        c0 = time.process_time()
        solve_variant(theory, "rational")
        t_rat = time.process_time() - c0
        info = mf.meta["info"]
        lines.append(f"| {label} | {len(theory.modes)} | {info['modes_kept']} / {info['directions']} | "
                     f"{info['steps']} | {t_mf:.2f} | {tail_note} | {whole_note} | {t_rat:.3f} | {table} |")
        print(lines[-1], flush=True)
    lines += ["", f"Load after: {load()}.", ""]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
