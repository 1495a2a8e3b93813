"""How much of a case's miss is the network's own init draw: the mean-field flow of the very neurons a run starts from.

``meanfield`` follows the infinite-width flow: the average over init draws. A network of width N starts from one
draw of N neurons, and its timing scatters around that average from seed to seed. This script follows, for every
stored training of a suite, the same reduced flow (:class:`featureode.ode.meanfield.ReducedFlow`) from that
training's own init neurons (:func:`featureode.sim.batch.init_draw`: the simulator's ``init`` stream for its seed and
width), with each neuron's own coordinates outside the target's directions (no ξ law). What remains between that
flow and the network is SGD on fresh batches, the finite test set and the loss outside the basis; what the
infinite-width flow misses beyond it is the draw.

Ratios are per seed (flow/MLP), then averaged over the case's seeds, as ``closure_scores.py`` does; the
infinite-width ``meanfield`` (Sobol', 2^12) is scored the same way. The run stops at a loss of 0.05 or 3× the latest
seed's t10 (6× its t50 without one).

Run:  python docs/validation/init_draw.py --suite wide2 [--cases 0,1] [--md FILE]
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from escape_oracle import case_runs  # noqa: E402
from multidriver_oracle import (case_config, case_label, crossing, fmt, picked_cases, stored_horizon,  # noqa: E402
                                suite_parser, write_report)
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import MeanFieldError, ReducedFlow  # noqa: E402
from featureode.sim.batch import init_draw  # noqa: E402


def times(flow: ReducedFlow, t_max: float) -> tuple[float, float]:
    ts, fs, _ = flow.run(t_max, stop_loss=0.05)
    loss = ((flow.v_all - fs) ** 2).sum(1) / (flow.v_all**2).sum()
    return crossing(ts, loss, 0.5), crossing(ts, loss, 0.1)


def main() -> int:
    args = suite_parser(__doc__.splitlines()[0]).parse_args()
    rows: list[list[str]] = []
    scores: dict[str, list] = {"own init draw": [], "meanfield (infinite width)": []}
    start = time.time()
    for i, case in picked_cases(args):
        label = case_label(*case)
        seeds = {seed: (t50, t10) for seed, t50, t10 in case_runs(args.suite, case)}
        if not seeds or not any(math.isfinite(t50) for t50, _ in seeds.values()):
            print(f"{label}: skipped (no stored run reached t50)", file=sys.stderr, flush=True)
            continue
        theory = kernel_theory(case_config(case), with_gram=True)
        g, modes, v = np.asarray(theory.g, float), list(theory.modes), np.asarray(theory.target, float)
        gamma, sb, width = float(theory.gamma), float(theory.bias_std), int(case[-1])
        t_max = stored_horizon(list(seeds.values()))
        try:
            inf50, inf10 = times(ReducedFlow(g, modes, v, gamma, sb, theory.activation), t_max)
            own, inf = [], []
            for seed, (m50, m10) in sorted(seeds.items()):
                a, w, b = init_draw(seed, width, g.size, 1.0, sb)
                flow = ReducedFlow(g, modes, v, gamma, sb, theory.activation,
                                   init=(a.numpy(), w.numpy() * np.sqrt(g), b.numpy()))
                o50, o10 = times(flow, t_max)
                own.append((o50 / m50, o10 / m10))
                inf.append((inf50 / m50, inf10 / m10))
            own_r = tuple(float(np.mean(x)) for x in zip(*own))
            inf_r = tuple(float(np.mean(x)) for x in zip(*inf))
            spread = (f"{min(x[0] for x in own):.2f}–{max(x[0] for x in own):.2f}" if len(own) > 1 else "")
        except MeanFieldError as exc:
            own_r = inf_r = (math.nan, math.nan)
            spread = f"failed: {exc}"
        if all(math.isfinite(t10) for _, t10 in seeds.values()):
            scores["own init draw"].append(own_r)
            scores["meanfield (infinite width)"].append(inf_r)
        rows.append([f"{i}: {label}", str(len(seeds)), f"{fmt(own_r[0])} / {fmt(own_r[1])}", spread,
                     f"{fmt(inf_r[0])} / {fmt(inf_r[1])}"])
        print(" | ".join(rows[-1]), f"({time.time() - start:.0f} s)", file=sys.stderr, flush=True)
    head = ["case", "seeds", "flow of the run's own init neurons: t50 / t10 ratio", "its t50 ratio over the seeds",
            "`meanfield` (infinite width) t50 / t10 ratio"]
    write_report(head, rows, args.md, scores, counted="every stored run crossed both levels")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
