"""Benchmark of the deterministic second-order constants (issue 18, item 1): ``network_second_order`` (S, U, V on
the extended basis of the default target staircase(2), driven by the target's modes) on a FRESH, non-rational
spectrum (exponent 1.5001, offset 3, so no cache of the kernel or of the laws of |ŵ|² is reused), at d = 16 and
d = 64, relu, σ_b = 0.5. Cold: the kernel's Gram matrix first (it is computed anyway by ``kernel_theory``), then the
constants alone are timed (CPU time, ``time.process_time``). The old Monte Carlo (:mod:`featureode.kernel.second_order_mc`,
10⁵ neurons) is timed beside it. Writes ``benchmarks/results/second_order_benchmark.md`` with the machine load.

Run:  python benchmarks/bench_second_order.py [--dims 16 64] [--no-mc]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from featureode.calculus.data import Spectrum  # noqa: E402
from featureode.calculus.targets import parse_target  # noqa: E402
from featureode.kernel.network import Network  # noqa: E402
from featureode.kernel.second_order import network_second_order  # noqa: E402
from featureode.kernel.theory import extended_basis, network_gram  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--no-mc", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/second_order_benchmark.md")
    args = ap.parse_args()
    rows = []
    for dim in args.dims:
        spec = Spectrum.power_law(dim, 1.5001, 3.0)
        target = parse_target("staircase(2)", spec)
        modes = extended_basis(target.modes, dim, 2, 40, g=spec.g)[:34]
        drivers = list(range(len(target.modes)))
        net = Network.build("relu", spec, 0.5)
        network_gram(net, modes)
        t0 = time.process_time()
        network_second_order(net, modes, drivers)
        cpu = time.process_time() - t0
        mc = float("nan")
        if not args.no_mc:
            from featureode.kernel.second_order_mc import second_order_constants as mc_constants
            t0 = time.process_time()
            mc_constants(modes, spec.g, "relu", 0.5, drivers=drivers)
            mc = time.process_time() - t0
        rows.append((dim, len(modes), len(drivers), cpu, mc))
        print(f"d={dim}: {len(modes)} modes, {len(drivers)} drivers: exact {cpu:.3f} s CPU, Monte Carlo {mc:.2f} s",
              flush=True)
    load = os.getloadavg()
    lines = ["# Second-order constants: deterministic quadrature vs Monte Carlo", "",
             f"relu, σ_b = 0.5, spectrum (i+3)^-1.5001 (fresh), staircase(2) extended basis; CPU seconds; "
             f"load average {load[0]:.1f} (2 shared cores). Budget: ≤ 0.2 s at d = 16, ≤ 0.5 s at d = 64.", "",
             "| d | modes | drivers | exact S, U, V (s) | Monte Carlo 10⁵ neurons (s) |", "|---|---|---|---|---|"]
    lines += [f"| {d} | {m} | {n} | {c:.2f} | {mc:.2f} |" for d, m, n, c, mc in rows]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
