"""What the exact population loss (``[training] exact_loss``) costs a user, in one run.

1. Per measurement: :func:`featureode.kernel.population.population_loss` of a trained-looking centred network
   (``2N`` neurons, ``N(2N + 1)`` pairs) for relu and erf at N = 256 … 2048, d = 16, target ``h2(z0)*z1``; the
   median of three calls.
2. End to end: :func:`featureode.simulate_config` of one small training (relu, N = 512, d = 16, ``h2(z0)*z1``,
   t_max = 40, the default 60 measurement times and 20 000 test points) without and with ``exact_loss``, in
   alternating order (A, B, A, B), one torch thread; the ratio is what asking for the exact loss adds.
3. The mean-field flow's exact tail (:meth:`featureode.ode.meanfield.ReducedFlow.ptf_square`, ``3n²/2`` pairs of
   smoothed ridges, :func:`~featureode.kernel.population.smoothed_square`) at ``n = 2^m`` Sobol' neurons, on the
   wide2 suite's ``z0*z1*z2`` (d = 24) after a few steps, beside the tail by the two 14³- and 18³-point product
   rules it replaces when they stop agreeing (relu; erf at m ≤ 11, its pairs cost about 9× more); the median of
   three calls, the init neurons' pairs summed before the first.

    python benchmarks/bench_population.py [--out benchmarks/results/population_benchmark.md]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from featureode.calculus.targets import parse_target  # noqa: E402
from featureode.config import load_config  # noqa: E402
from featureode.kernel.population import centred_neurons, population_loss  # noqa: E402
from featureode.sim.mlp import simulate_config  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import ReducedFlow  # noqa: E402


def per_call(act: str, width: int, d: int = 16) -> float:
    """Median seconds of three exact losses of a centred network whose neurons moved from their initial copies."""
    rng = np.random.default_rng(width)
    a0, w0, b0 = rng.normal(size=width), rng.normal(size=(width, d)), 0.5 * rng.normal(size=width)
    a, w, b = a0 + 0.3 * rng.normal(size=width), w0 + 0.3 * rng.normal(size=(width, d)), b0 + 0.1 * rng.normal(
        size=width)
    g = 1.0 / (np.arange(d) + 3.0) ** 1.5
    neurons = centred_neurons(a, w, b, a0, w0, b0, 1 / (0.5 * width), g)
    target = parse_target("h2(z0)*z1", d)
    population_loss(act, *neurons, target)   # warm: closed-form means compiled and cached
    times = []
    for _ in range(3):
        start = time.perf_counter()
        population_loss(act, *neurons, target)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def end_to_end(exact: bool) -> float:
    cfg = load_config().replace(target={"expr": "h2(z0)*z1"}, network={"width": 512},
                                training={"t_max": 40.0, "threads": 1, "exact_loss": exact})
    start = time.perf_counter()
    simulate_config(cfg, progress=False)
    return time.perf_counter() - start


def median_seconds(fn: Callable[[], object], repeats: int = 3) -> float:
    """Median seconds of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def exact_tail(act: str, m: int) -> tuple[int, float, float]:
    """Seconds of one exact tail (``ptf_square``) and of the two product rules' tails at the same state."""
    cfg = load_config().replace(target={"expr": "z0*z1*z2"}, data={"dim": 24, "exponent": 1.25, "offset": 2.0},
                                network={"activation": act, "richness": 0.7, "bias_std": 0.25,
                                         "parametrization": "meanfield"})
    flow = ReducedFlow.from_theory(kernel_theory(cfg, with_gram=True), drive="whole", m=m)
    flow.tail_points = (14, 18)
    state = flow.state0
    for h in (0.5, 2.0, 5.0):
        state = flow.step(state, h)
    flow.ptf_square(state)        # the init pairs, once
    basis = float(((flow.v - flow.f(state)) ** 2).sum())
    flow._tail_at(state, 0, basis), flow._tail_at(state, 1, basis)    # the rules and their init F, built
    exact = median_seconds(lambda: flow.ptf_square(state))
    rules = median_seconds(lambda: (flow._tail_at(state, 0, basis), flow._tail_at(state, 1, basis)))
    return 3 * 4**m // 2, exact, rules   # pairs touching the 2^m current neurons (of 2 · 2^m): 3/2 · (2^m)²


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write the Markdown table here too")
    args = p.parse_args()
    lines = ["# The exact population loss: cost", "",
             f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
             f"{os.getloadavg()[0]:.2f} at the start; Python {platform.python_version()}.", "",
             "## Per measurement (d = 16, target `h2(z0)*z1`, median of 3)", "",
             "| N | neurons 2N | pairs | relu (s) | erf (s) |", "|---|---|---|---|---|"]
    for width in (256, 512, 1024, 2048):
        n = 2 * width
        lines.append(f"| {width} | {n} | {n * (n + 1) // 2} | {per_call('relu', width):.3f} | "
                     f"{per_call('erf', width):.3f} |")
        print(lines[-1], flush=True)
    lines += ["", "## End to end: one training (relu, N = 512, d = 16, t_max = 40, 60 measurements, "
              "20 000 test points, one thread)", "", "| run | without exact_loss (s) | with (s) | ratio |",
              "|---|---|---|---|"]
    end_to_end(False)   # warm: torch's compiled kernels and the closed-form means cached
    for k in range(2):
        plain, exact = end_to_end(False), end_to_end(True)
        lines.append(f"| {k + 1} | {plain:.1f} | {exact:.1f} | {exact / plain:.2f} |")
        print(lines[-1], flush=True)
    lines += ["", "## The mean-field flow's exact tail (wide2's `z0*z1*z2`, d = 24, γ = 0.7, after three steps; "
              "median of 3)", "", "| activation | neurons 2^m | pairs per tail | exact tail (s) | "
              "14³ + 18³ rules' tails (s) | ratio |", "|---|---|---|---|---|---|"]
    for act, ms in (("relu", (10, 11, 12)), ("erf", (10, 11))):
        for m in ms:
            pairs, exact, rules = exact_tail(act, m)
            lines.append(f"| {act} | {2**m} | {pairs} | {exact:.2f} | {rules:.2f} | {exact / rules:.1f} |")
            print(lines[-1], flush=True)
    lines += ["", f"Load average at the end: {os.getloadavg()[0]:.2f}.", ""]
    text = "\n".join(lines)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
