"""Regression check of the deterministic second-order constants across a code change (not a test: it compares the
code against its own earlier output). ``--save FILE`` stores S, U, V, λ0 and their parts for relu/erf/tanh/gelu,
target and extended basis, d = 16 and 64 (fresh spectrum (i+3)^-1.5001, σ_b = 0.5); ``--compare FILE`` recomputes
and reports the largest relative difference (fails above ``--rtol``, default 1e-12). Also prints CPU seconds.

Run:  python benchmarks/check_second_order_outputs.py --save before.npz   (then, after the change)
      python benchmarks/check_second_order_outputs.py --compare before.npz
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from featureode.calculus.data import Spectrum  # noqa: E402
from featureode.calculus.targets import parse_target  # noqa: E402
from featureode.kernel.network import Network  # noqa: E402
from featureode.kernel.second_order import network_second_order  # noqa: E402
from featureode.kernel.theory import extended_basis  # noqa: E402


def compute(acts: list[str], dims: list[int]) -> tuple[dict[str, np.ndarray], float]:
    out: dict[str, np.ndarray] = {}
    cpu = 0.0
    for dim in dims:
        spec = Spectrum.power_law(dim, 1.5001, 3.0)
        target = parse_target("staircase(2)", spec)
        bases = {"target": list(target.modes), "extended": extended_basis(target.modes, dim, 2, 40, g=spec.g)[:34]}
        drivers = list(range(len(target.modes)))
        for act in acts:
            net = Network.build(act, spec, 0.5)
            for bname, modes in bases.items():
                t0 = time.process_time()
                so = network_second_order(net, modes, drivers)
                cpu += time.process_time() - t0
                tag = f"{act}/{bname}/d{dim}"
                for name in ("S", "U", "V", "lambda0"):
                    out[f"{tag}/{name}"] = getattr(so, name)
                for p, arr in so.S_parts.items():
                    out[f"{tag}/S_{p}"] = arr
                for p, arr in so.lambda0_parts.items():
                    out[f"{tag}/lambda0_{p}"] = arr
    return out, cpu


def main() -> int:
    ap = argparse.ArgumentParser()
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", type=Path)
    g.add_argument("--compare", type=Path)
    ap.add_argument("--rtol", type=float, default=1e-12)
    ap.add_argument("--acts", nargs="+", default=["relu", "erf", "tanh", "gelu"])
    ap.add_argument("--dims", type=int, nargs="+", default=[16, 64])
    args = ap.parse_args()
    vals, cpu = compute(args.acts, args.dims)
    print(f"CPU {cpu:.2f} s for {len(args.acts) * len(args.dims) * 2} runs")
    if args.save:
        np.savez(args.save, **vals)  # type: ignore[arg-type]  # numpy's stub types savez(**kwds) as its flag
        print(f"saved {len(vals)} arrays to {args.save}")
        return 0
    ref = np.load(args.compare)
    worst = 0.0
    for key, arr in vals.items():
        r = ref[key]
        scale = max(float(np.max(np.abs(r))) if r.size else 0.0, 1e-300)
        err = float(np.max(np.abs(arr - r))) / scale if r.size else 0.0
        if err > worst:
            worst = err
        if err > args.rtol:
            print(f"MISMATCH {key}: relative {err:.3e}")
    print(f"largest relative difference {worst:.3e} (rtol {args.rtol:g})")
    return 0 if worst <= args.rtol else 1


if __name__ == "__main__":
    raise SystemExit(main())
