"""What one velocity of ``meanfield+whole`` costs on its finest rule, with the neurons × nodes arrays kept from call
to call (the package's way) and made afresh each call (the way before they were kept), alternating in one process.

The case is wide's ReLU ``z0*z1*z2`` (d = 16, γ = 0.5, σ_b = 0.5; 2¹² Sobol' neurons) at a moved state, driven
through the 2¹⁵-point Sobol' rung, where its three-direction runs spend their hours: ``u`` and ``m_0, m_1, m_2``
are 4 arrays of 2¹² × 2¹⁵ (1 GB each). Each velocity is at a new state (a small step along the last one), so no
cached means are reused; "afresh" drops the kept arrays before the call. The curves are equal bit for bit either
way (``CHANGELOG``); only time is measured here.

    python benchmarks/bench_whole_velocity.py [--repeats 3] [--out benchmarks/results/whole_velocity.md]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from featureode.config import load_config  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import ReducedFlow  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="calls of each kind, alternating (default 3)")
    parser.add_argument("--out", type=Path, help="write the Markdown table here (default: print it)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats} must be ≥ 1")
    cfg = load_config().replace(target={"expr": "z0*z1*z2"}, data={"dim": 16, "exponent": 1.5},
                                network={"activation": "relu", "richness": 0.5, "bias_std": 0.5},
                                ode={"basis": "extended"})
    flow = ReducedFlow.from_theory(kernel_theory(cfg, with_gram=True), drive="whole")
    flow._rung = flow._rungs() - 2          # the drive on the finest rung (Sobol' 2^15)
    a, W, b, C = flow.state0
    # neurons grown inside T and shrunk outside it, as late in a run
    state: tuple[np.ndarray, ...] = (a, 1.5 * W, b, C + 0.3)
    t0 = time.perf_counter()
    v = flow.velocity(state)
    first = time.perf_counter() - t0
    times: dict[str, list[float]] = {"kept": [], "afresh": []}
    load_before = os.getloadavg()[0]
    for _ in range(args.repeats):
        for kind in ("afresh", "kept"):
            state = tuple(x + 1e-3 * d for x, d in zip(state, v))
            if kind == "afresh":
                flow._whole, flow._buffers = None, None
            t0 = time.perf_counter()
            v = flow.velocity(state)
            times[kind].append(time.perf_counter() - t0)
    (Z, _, _), _ = flow._drive_rule()
    n, q = W.shape[0], Z.shape[0]
    lines = [
        f"# One velocity of `meanfield+whole` on its finest rule ({time.strftime('%Y-%m-%d')})", "",
        f"`python benchmarks/bench_whole_velocity.py --repeats {args.repeats}` on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, NumPy {np.__version__}; load average "
        f"{load_before:.2f} before the timed calls, {os.getloadavg()[0]:.2f} after.", "",
        f"Wide's ReLU `z0*z1*z2` (d = 16, γ = 0.5), {n} neurons × {q} Sobol' nodes: `u` and `m_0, m_1, m_2` are "
        f"4 arrays of {n * q * 8 / 2**30:.2f} GiB. The first call ({first:.1f} s) also builds the rule and `F(0)` "
        "on it.", "",
        "| arrays | seconds per velocity (each call) | median |", "|---|---|---|",
    ]
    for kind, label in (("kept", "kept from call to call (the package)"), ("afresh", "made afresh each call")):
        lines.append(f"| {label} | {', '.join(f'{x:.2f}' for x in times[kind])} | "
                     f"{float(np.median(times[kind])):.2f} |")
    lines += ["", f"Ratio of medians, afresh / kept: {np.median(times['afresh']) / np.median(times['kept']):.2f}.", ""]
    text = "\n".join(lines)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
