"""Train again, to a longer horizon, the suite cases whose stored network never crossed t10 (or t50).

The suites' trainings ran to ``training.t_max = "auto"`` (``min(20000, 2 × t10 of the lazy flow, 4 × t10 of
displacement)``); on a few cases the network had not crossed ``L/L(0) = 0.1`` (or even 0.5) there, so no variant
can be scored on them. This script trains each picked case again with the same config and seed (so the same init
and the same batches: the stored t50, where there is one, is reproduced), to ``--t-max`` with ``stop_loss = 0.09``
(the run ends at the first measurement below 0.09 of L(0)) and ``--points`` log-spaced measurements, one torch
thread. Each finished training is added to ``mlp_crossings_longer.csv`` (suite, the case's columns, seed, t50,
t10, the horizon, where it ended and its L/L(0) there, the wall time; the stored t50 is reproduced to the
measurement grid's interpolation, 0.1–0.3%); :func:`escape_oracle.stored_runs` reads a case's rows there in place of
the suite's table. Nothing is fitted: these are the network's crossing times, measured as the suites measure them.

Run:  python docs/validation/longer_training.py --suite wide --cases 39 --t-max 20000 [--seeds 0,1]
"""
from __future__ import annotations

import csv
import io
import math
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from multidriver_oracle import case_config, case_label, picked_cases, suite_parser  # noqa: E402

from filelock import FileLock  # noqa: E402

from featureode.core.cache import atomic_bytes  # noqa: E402
from featureode.results.metrics import crossing_time  # noqa: E402
from featureode.sim.mlp import simulate_config  # noqa: E402

LONGER = HERE / "mlp_crossings_longer.csv"
COLUMNS = ["suite", "network.activation", "target.expr", "data.dim", "data.exponent", "data.offset",
           "network.richness", "network.bias_std", "network.width", "seed", "mlp_t50", "mlp_t10", "t_max", "t_end",
           "ratio_end", "wall_s"]


def train(case: tuple, seed: int, t_max: float, points: int) -> dict:
    """One training of ``case`` (the suites' layout) to ``t_max`` or ``L/L(0) ≤ 0.09``; its crossing times."""
    cfg = case_config(case).replace(training={"t_max": t_max, "threads": 1, "seed": seed, "stop_loss": 0.09,
                                              "n_points": points})
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        traj = simulate_config(cfg, out_dir=tmp, progress=False)
    suite, act, target, d, expo, off, gamma, sb, width = case
    t50, t10 = (crossing_time(traj.t, traj.ratio, level) for level in (0.5, 0.1))
    return {"suite": suite, "network.activation": act, "target.expr": target, "data.dim": d,
            "data.exponent": expo, "data.offset": off, "network.richness": gamma, "network.bias_std": sb,
            "network.width": width, "seed": seed, "mlp_t50": "" if t50 is None else t50,
            "mlp_t10": "" if t10 is None else t10, "t_max": t_max, "t_end": float(traj.end_t),
            "ratio_end": float(traj.ratio[-1]),
            "wall_s": round(time.time() - start, 1)}


def main() -> int:
    parser = suite_parser(__doc__.splitlines()[0])
    parser.add_argument("--t-max", type=float, required=True, help="the longer horizon")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (the suite's: wide 0,1; wide2 0)")
    parser.add_argument("--points", type=int, default=120, help="log-spaced measurements (the suites took 60)")
    args = parser.parse_args()
    if not (math.isfinite(args.t_max) and args.t_max > 0):
        raise SystemExit(f"longer_training: --t-max {args.t_max} must be a finite number > 0")
    for i, case in picked_cases(args):
        for seed in (int(s) for s in args.seeds.split(",")):
            row = train(case, seed, args.t_max, args.points)
            with FileLock(str(LONGER) + ".lock"):   # rows kept so far (older ones may lack a column), then this
                rows = list(csv.DictReader(LONGER.open())) if LONGER.exists() else []
                text = io.StringIO()
                writer = csv.DictWriter(text, COLUMNS, restval="")
                writer.writeheader()
                writer.writerows([*rows, row])
                atomic_bytes(LONGER, text.getvalue().encode())
            print(f"{args.suite}:{i} {case_label(*case)} seed {seed}: t50 {row['mlp_t50'] or '—'}, "
                  f"t10 {row['mlp_t10'] or '—'} (ran to t = {row['t_end']:.0f}, {row['wall_s']:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
