"""Which part of the MLP's test loss do the extended-basis ODEs miss at t10? A diagnostic, not a closure.

The exact multi-driver flow (``multidriver_oracle.md``) reaches t10 early by 7–16% on most wide-suite cases, and the
closures agree with it there. Two explanations are tested on the wide suite's base case (relu, ``z0*z1``, d = 16,
exponent 1.5, offset 3, σ_b = 0.5, N = 1024, B = 2048) and at γ = 1, each on the seeds 0 and 1:

* ``--part step``: is the MLP's t10 set by the SGD discretisation (the step ``η = eta_safety/λ_top``) or by its
  gradient noise (the batch ``B``)? The same init is trained at ``eta_safety`` 0.5 (the default) and 0.125, and at
  ``B`` = 2048 and 8192. Gradient flow is the limit of both; a t10 that does not move is already there.
* ``--part basis``: where does the MLP's test loss sit? The simulator measures the network's projections ``f_β`` on
  every mode of the config's extended basis (``simulate_config(modes=…)``, on ``--n-test`` test points), which
  splits the test loss ``L(t)/L(0)`` into the target's own modes (``in_support_loss``), the extended basis
  ``Σ_β (v_β − f_β)²/Σ v²`` and the rest (outside the basis: ``L − L_ext``, by Parseval). The crossing times of
  each are set against the ODEs' (``rational``, ``second_order``; extended basis), whose loss lives on the basis
  only. The projections are test-set averages: their sampling error (≈ 1/sqrt(n_test) per mode, summed over the
  basis) and the test set's own (the MLP's t10 moves by ~2% between test sets of 20 000 points) are the error bars;
  ``--n-test 100000`` keeps them near 1% of the loss at t10.

Every figure is a crossing time of ``featureode.results.metrics.crossing_time`` (the MLP's own t50/t10 rule);
nothing is fitted.

Run:  python docs/validation/out_of_basis.py --part step                 (8 trainings, ~3 min of one core)
      python docs/validation/out_of_basis.py --part basis --n-test 100000 (4 trainings, ~9 min of one core)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from featureode.config import load_config  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.solve import solve_variant  # noqa: E402
from featureode.results.metrics import crossing_time  # noqa: E402
from featureode.sim.mlp import simulate_config  # noqa: E402

#: name -> ([target], [network], t_max)
CASES: dict[str, tuple[dict, dict, float]] = {"z0*z1": ({"expr": "z0*z1"}, {}, 100.0),
         "z0*z1, γ = 1": ({"expr": "z0*z1"}, {"richness": 1.0}, 70.0)}
#: name -> [training] changes
STEPS: dict[str, dict[str, float]] = {
    "η, B = 2048 (default)": {}, "η/4": {"eta_safety": 0.125}, "B = 8192": {"batch": 8192},
    "η/4, B = 8192": {"eta_safety": 0.125, "batch": 8192}}


def relative(loss: "np.ndarray | None") -> np.ndarray:
    """A trajectory's in-support loss over its value at t = 0 (every trajectory here records it)."""
    if loss is None:
        raise SystemExit("the trajectory has no in-support loss")
    return np.asarray(loss) / float(loss[0])


def part_step(seeds: list[int]) -> list[dict]:
    target, network, t_max = CASES["z0*z1"]
    rows = []
    for name, change in STEPS.items():
        for seed in seeds:
            cfg = load_config().replace(target=target, network=network,
                                        training={"t_max": t_max, "n_points": 60, "seed": seed, **change})
            t0 = time.time()
            tr = simulate_config(cfg, progress=False)
            support = relative(tr.in_support_loss)
            rows.append({"setting": name, "seed": seed, "t50": tr.t50, "t10": tr.t10,
                         "support_t10": crossing_time(np.asarray(tr.t), support, 0.1),
                         "steps": int(np.asarray(tr.arrays["steps"])[-1]), "wall_s": round(time.time() - t0, 1)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def part_basis(seeds: list[int], n_test: int) -> list[dict]:
    rows = []
    for name, (target, network, t_max) in CASES.items():
        for seed in seeds:
            cfg = load_config().replace(target=target, network=network,
                                        training={"t_max": t_max, "n_points": 80, "seed": seed, "n_test": n_test})
            theory = kernel_theory(cfg, with_gram=True)
            modes = list(theory.modes)
            t0 = time.time()
            tr = simulate_config(cfg, progress=False, modes=modes)
            t, f, v = np.asarray(tr.t), np.asarray(tr.f), np.asarray(tr.target, float)
            if f.shape[1] != len(modes) or v.size != len(modes):
                raise AssertionError(f"measured {f.shape[1]} modes, asked for {len(modes)}")
            ext = np.sum((v - f) ** 2, axis=1) / float(np.sum(v ** 2))
            full = np.asarray(tr.loss) / float(tr.loss[0])
            support = relative(tr.in_support_loss)
            row = {"case": name, "seed": seed, "modes": len(modes), "n_test": n_test, "t50": tr.t50, "t10": tr.t10,
                   "ext_t10": crossing_time(t, ext, 0.1), "support_t10": crossing_time(t, support, 0.1),
                   "wall_s": round(time.time() - t0, 1)}
            if tr.t10 is not None:
                k = int(np.argmin(np.abs(t - tr.t10)))
                row["ext_at_t10"], row["outside_at_t10"] = float(ext[k]), float(full[k] - ext[k])
            for variant in ("rational", "second_order"):
                ode = solve_variant(theory, variant)
                ode_support = relative(ode.in_support_loss)
                row[f"{variant}_t10"] = ode.t10
                row[f"{variant}_support_t10"] = crossing_time(np.asarray(ode.t), ode_support, 0.1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["step", "basis"], required=True)
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--n-test", type=int, default=100_000)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    import torch

    torch.set_num_threads(1)
    rows = part_step(seeds) if args.part == "step" else part_basis(seeds, args.n_test)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
