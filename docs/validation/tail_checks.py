"""Three checks of ``meanfield+tail``'s tail (``docs/validation/tail_loss.md``), each on a wide-suite case:

* ``--part modesum``: the base case (``z0*z1``) at t = 45: the tail of the Gauss–Hermite rule against the sum of
  squares of the flow's projections on every mode in T up to degree D (Stein's formula, mode by mode), D = 8 … 24.
* ``--part neurons``: ``h2(z0)*z1`` at t = 339 (the network's t10): the tail with 2¹⁰, 2¹² and 2¹⁴ Sobol' neurons.
* ``--part drivers``: ``h2(z0)*z1`` with every mode in T up to degree 8 driving too: its tail at the network's t10
  and its t50 / t10 ratios to the stored trainings.

Run:  python docs/validation/tail_checks.py --part modesum|neurons|drivers
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from escape_oracle import case_runs  # noqa: E402
from multidriver_oracle import case_config, crossing, suite_cases  # noqa: E402
from featureode.calculus.hermite import Mode  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import ReducedFlow  # noqa: E402

BASE, H2 = 0, 10   # the wide suite's cases z0*z1 and h2(z0)*z1


def setup(i: int) -> tuple[tuple, tuple[float, float, str], np.ndarray, list, np.ndarray]:
    case = suite_cases("wide")[i]
    theory = kernel_theory(case_config(case), with_gram=True)
    g, modes, v = np.asarray(theory.g, float), list(theory.modes), np.asarray(theory.target, float)
    return case, (float(theory.gamma), float(theory.bias_std), str(theory.activation)), g, modes, v


def follow(flow: ReducedFlow, t_end: float) -> tuple:
    """The flow's state at ``t_end`` by the steps of :meth:`ReducedFlow.run`."""
    state, t, steps = flow.state0, 0.0, 0
    while t < t_end:
        if steps % 10 == 0:
            lam = float(np.linalg.eigvalsh(flow.gram(state)).max())
        h = min(5.0, 1.5 / lam, max(0.01, t / 4), t_end - t)
        state, t, steps = flow.step(state, h), t + h, steps + 1
    return state


def modes_in_T(T: list[int], degree: int) -> list[Mode]:
    return [Mode.from_dict(dict(zip(T, al))) for al in itertools.product(range(degree + 1), repeat=len(T))
            if 0 < sum(al) <= degree]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["modesum", "neurons", "drivers"], required=True)
    args = p.parse_args()
    if args.part == "modesum":
        _, rest, g, modes, v = setup(BASE)
        flow = ReducedFlow(g, modes, v, *rest, tail=True)
        state = follow(flow, 45.0)
        norm2 = float((v**2).sum())
        basis = float(((flow.v - flow.f(state)) ** 2).sum())
        print(f"rule: tail {flow.tail_loss(state):.4f}")
        every = modes_in_T(flow.T, 24)
        obs = ReducedFlow(g, every, np.ones(len(every)), *rest)
        proj = ((state[0][:, None] * obs._parts(state)[0]).mean(0)
                - (obs.state0[0][:, None] * obs._parts(obs.state0)[0]).mean(0)) / flow.gamma
        target = dict(zip(modes, v))
        res = np.array([target.get(m, 0.0) for m in every]) - proj
        degree = np.array([m.degree for m in every])
        for D in (8, 12, 16, 20, 24):
            print(f"mode sum to degree {D} ({int((degree <= D).sum())} modes): tail "
                  f"{(float((res[degree <= D] ** 2).sum()) - basis) / norm2:.4f}")
    elif args.part == "neurons":
        _, rest, g, modes, v = setup(H2)
        for m in (10, 12, 14):
            flow = ReducedFlow(g, modes, v, *rest, m=m, tail=True)
            state = follow(flow, 339.0)
            print(f"2^{m} neurons, t = 339: tail {flow.tail_loss(state):.4f}")
    else:
        case, rest, g, modes, v = setup(H2)
        seeds = [(m50, m10) for _, m50, m10 in case_runs("wide", case)]
        m50, m10 = (float(np.mean(x)) for x in zip(*seeds))
        every = modes + [m for m in modes_in_T(sorted({i for m, x in zip(modes, v) if x for i in m.support}), 8)
                         if m not in modes]
        vv = np.array([dict(zip(modes, v)).get(m, 0.0) for m in every])
        flow = ReducedFlow(g, every, vv, *rest, tail=True)
        ts, fs, error = flow.run(3 * m10, stop_loss=0.05, max_steps=3000)
        loss = flow.loss(ts, fs)
        print(f"{len(flow.modes)} modes driving: t50 / t10 ratio {crossing(ts, loss, 0.5) / m50:.3f} / "
              f"{crossing(ts, loss, 0.1) / m10:.3f}, tail at the network's t10 "
              f"{float(np.interp(m10, *flow.tail_path)):.4f} {error or ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
