"""What the exact population loss (``[training] exact_loss``) costs a user, in one run.

1. Per measurement: :func:`featureode.kernel.population.population_loss` of a trained-looking centred network
   (``2N`` neurons, ``N(2N + 1)`` pairs) for relu and erf at N = 256 … 2048, d = 16, target ``h2(z0)*z1``; the
   median of three calls.
2. End to end: :func:`featureode.simulate_config` of one small training (relu, N = 512, d = 16, ``h2(z0)*z1``,
   t_max = 40, the default 60 measurement times and 20 000 test points) without and with ``exact_loss``, in
   alternating order (A, B, A, B), one torch thread; the ratio is what asking for the exact loss adds.

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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from featureode.calculus.targets import parse_target  # noqa: E402
from featureode.config import load_config  # noqa: E402
from featureode.kernel.population import centred_neurons, population_loss  # noqa: E402
from featureode.sim.mlp import simulate_config  # noqa: E402


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
    lines += ["", f"Load average at the end: {os.getloadavg()[0]:.2f}.", ""]
    text = "\n".join(lines)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
