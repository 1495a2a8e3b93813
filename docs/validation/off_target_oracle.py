"""Does driving the modes outside T close wide2's erf ``h2(z0)*z1`` miss? The exact multi-driver flow, mode by mode.

``off_target_modes.py`` found that ``meanfield+whole``'s reduced flow projects the basis' modes outside the target's
directions T (``z1*h2(z_j)``, …) but does not drive them, and that those modes grow in the flow while the network
removes them. This script asks whether driving them is enough. It integrates ``multidriver_oracle.py``'s exact flow
(every coordinate of every neuron, every mode of the extended basis driving, the ones outside T included; nothing
expanded) from the network's **own** init neurons (:func:`featureode.sim.batch.init_draw`, so finite width at init is
not a difference), and prints its crossing ratios against the stored training, its loss split into the modes in T
and outside T, and ``f_β`` on the modes of ``off_target_modes.md``'s table at its times, to set beside the network's
measured values there. What this flow leaves out: the residual beyond the basis (the tail, which ``meanfield+whole``
drives), and SGD's finite step and batches.

Run:  python docs/validation/off_target_oracle.py --suite wide2 --cases 26 [--md FILE]
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from multidriver_oracle import Flow, case_config, case_label, crossing, picked_cases, suite_parser  # noqa: E402
from whole_residual import stored  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.sim.batch import init_draw  # noqa: E402

#: the times of off_target_modes.md's table (the network's measurements)
TIMES = (589.0, 1164.0, 1940.0, 2300.0)
#: its modes: in T, then outside T
SHOWN = ("h2(z0)*z1", "z1", "h4(z0)*z1", "h2(z0)*h3(z1)", "h3(z1)", "h5(z1)", "z1*h2(z2)", "z1*h2(z3)",
         "z1*h2(z4)", "z1*h2(z5)", "h2(z0)*z1*h2(z2)", "h2(z0)*z1*h2(z3)")


def main() -> int:
    p = suite_parser(__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0, help="the stored training whose init neurons start the flow")
    p.add_argument("--h-max", type=float, default=2.0)
    args = p.parse_args()
    out: list[str] = []
    for i, case in picked_cases(args):
        start = time.time()
        seeds = stored(args.suite, case)
        m50 = float(np.nanmean([s[0] for s in seeds]))
        m10 = float(np.nanmean([s[1] for s in seeds]))
        theory = kernel_theory(case_config(case), with_gram=True)
        g, modes, v = np.asarray(theory.g, float), list(theory.modes), np.asarray(theory.target, float)
        width = int(case[-1])
        flow = Flow(g, modes, v, float(theory.gamma), float(theory.bias_std), width, str(theory.activation))
        a, w, b = init_draw(args.seed, width, g.size, 1.0, float(theory.bias_std))
        flow.theta = (a.numpy().astype(float), w.numpy().astype(float) * np.sqrt(g), b.numpy().astype(float))
        flow.phi0 = (flow.theta[0][:, None] * flow.basis.A(flow.theta[1], flow.theta[2])).mean(0)
        T = sorted({j for m, x in zip(modes, v) if x for j in m.support})
        inside = np.array([set(m.support) <= set(T) for m in modes])
        norm = float((v**2).sum())
        # Flow.run (RK4, step min(h_max, 0.5/λ_max(K))) to 3× the mean t10, the state kept at the table's times
        t_end = 3 * m10 if math.isfinite(m10) else 6 * m50
        snaps: dict[float, tuple[float, np.ndarray, float, float]] = {}
        pending = list(TIMES)

        def snapshot(t: float, theta: tuple) -> None:
            while pending and t >= pending[0]:
                f = flow.f(theta)
                R = v - f
                snaps[pending.pop(0)] = (t, f, float((R[inside] ** 2).sum()) / norm,
                                         float((R[~inside] ** 2).sum()) / norm)

        ts, loss, steps = flow.run(t_end, h_max=args.h_max, max_steps=20000, on_step=snapshot)
        t, t50, t10 = float(ts[-1]), crossing(ts, loss, 0.5), crossing(ts, loss, 0.1)
        out += [f"### {args.suite}:{i}: {case_label(*case)}, seed {args.seed}'s init neurons", "",
                f"Stored trainings (seed means): t50 / t10 = {m50:.1f} / {m10:.1f}. The exact multi-driver flow of "
                f"the {width} init neurons of seed {args.seed} ({len(modes)} modes driving, {int((~inside).sum())} "
                f"of them outside T): t50 / t10 = {t50:.1f} / {t10:.1f}, ratios {t50 / m50:.2f} / {t10 / m10:.2f} "
                f"({steps} RK4 steps to t = {t:.0f}).", "",
                "| t | flow L/L(0) on the basis: modes in T / outside T |", "|---|---|"]
        out += [f"| {snap[0]:.0f} | {snap[2]:.4f} / {snap[3]:.4f} |" for snap in snaps.values()]
        names = [str(m) for m in modes]
        out += ["", "| mode | in T | " + " | ".join(f"flow at t ≈ {snap[0]:.0f}" for snap in snaps.values()) + " |",
                "|---|---|" + "---|" * len(snaps)]
        for name in SHOWN:
            if name in names:
                k = names.index(name)
                out.append(f"| `{name}` | {'yes' if inside[k] else 'no'} | "
                           + " | ".join(f"{snap[1][k]:+.3f}" for snap in snaps.values()) + " |")
        out += ["", f"({time.time() - start:.0f} s)", ""]
        print("\n".join(out[-40:]), flush=True)
    if args.md:
        args.md.write_text("\n".join(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
