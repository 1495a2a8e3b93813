"""Thread count of the MLP simulator on a shared machine: the default run's step rate with 1 and 2 torch threads,
with the machine as it is ("idle") and with a busy-loop process competing for a core ("busy").

What is timed: the training loop of the built-in default config (staircase(2), d = 16, N = 1024, B = 2048, relu,
float32, compiled kernels): fresh samples + SGD step, and the ``λ_top`` refresh every ``ntk_every`` = 50 steps, as
in :meth:`featureode.sim.mlp.Simulation._advance`; and one measurement on the 20 000-sample test set. The four cases
(threads × load) run side by side in one process, round-robin for ``--rounds`` rounds of ``--steps`` steps, so a busy
phase of a shared machine affects all of them alike; figures are medians over rounds. The busy loop is a separate
Python process (``while True: pass``) started before and stopped after each busy case.

Usage: ``python benchmarks/bench_threads.py [--steps 100] [--rounds 3] [--out benchmarks/results/threads.md]``.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from featureode.config import load_config
from featureode.sim.mlp import RunSpec, Simulation
from featureode.sim.schedule import refresh_due


def train(sim: Simulation, steps: int) -> float:
    """Seconds for ``steps`` training steps of run 0 (samples, SGD step, λ_top refresh on the default cadence)."""
    every = sim.specs[0].cfg.training.ntk_every
    t0 = time.perf_counter()
    for k in range(steps):
        if refresh_due(k, every):
            sim.net.ntk_top(0, sim.probes[0])
        x, y = sim._sample([0])
        sim.net.step(x, y, [1e-3], [0])
    return time.perf_counter() - t0


def measure(sim: Simulation) -> float:
    """Seconds for one measurement of run 0 on its test set."""
    t0 = time.perf_counter()
    sim.net.measure(0, sim.tests[0], sim.specs[0].support)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="benchmarks/results/threads.md")
    args = ap.parse_args()
    cfg = load_config().replace(training={"device": "cpu"})
    sim = Simulation([RunSpec.build(cfg)], None, False)
    cases = [(threads, load) for load in ("idle", "busy") for threads in (1, 2)]
    for threads in (1, 2):  # warm-up (compilation) at both thread counts
        torch.set_num_threads(threads)
        train(sim, 3)
        measure(sim)
    rates: dict[tuple[int, str], list[float]] = {c: [] for c in cases}
    meas: dict[tuple[int, str], list[float]] = {c: [] for c in cases}
    load_avg = []
    for _ in range(args.rounds):
        for threads, load in cases:
            torch.set_num_threads(threads)
            busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if load == "busy" else None
            try:
                time.sleep(0.2 if busy else 0.0)
                rates[(threads, load)].append(args.steps / train(sim, args.steps))
                meas[(threads, load)].append(measure(sim))
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
            load_avg.append(os.getloadavg()[0])
    med = {c: statistics.median(v) for c, v in rates.items()}
    lines = ["# Torch threads on a shared 2-core machine (`benchmarks/bench_threads.py`)", "",
             f"torch {torch.__version__}, {os.cpu_count()} CPUs; built-in default run (staircase(2), d = 16, N = 1024, "
             f"B = 2048, compiled); median over {args.rounds} round-robin rounds of {args.steps} steps; 1-minute load "
             f"average during the run {min(load_avg):.1f}–{max(load_avg):.1f} (other jobs share the machine).", "",
             "| threads | machine | steps/s | s per step | s per measurement | vs 1 thread, same load |",
             "|---:|---|---:|---:|---:|---:|"]
    for threads, load in cases:
        c = (threads, load)
        lines.append(f"| {threads} | {load} | {med[c]:.1f} | {1 / med[c]:.4f} | {statistics.median(meas[c]):.3f} | "
                     f"{med[c] / med[(1, load)]:.2f}× |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
