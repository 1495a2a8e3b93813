"""Mode by mode: the whole-residual flow of a network's own init neurons beside that network, retrained with the
modes measured, to say which part of a late miss is the flow's and which the measurement's.

For one case and seed of a suite: (1) ``meanfield+whole``'s reduced flow (:class:`featureode.ode.meanfield.ReducedFlow`,
``drive="whole"``) from the very neurons the stored training started from (:func:`featureode.sim.batch.init_draw`,
as ``init_draw.py`` does, so finite width at init is not a difference), to 3× the stored t10; (2) the same training
again (same config and seed, so the same init and batches) to ``--t-max``, measuring the projections ``f_β`` (with
their test-set standard errors) on the basis modes in T and on the ``--off`` largest modes outside T of the flow at
the stored t10. Printed: the own-draw flow's crossing ratios on the extended basis and on T; per mode and time the
flow's ``f_β`` beside the network's; the flow's loss split into the target's modes, the other modes in T, the tail
(modes in T beyond the basis) and the modes outside T; and the network's L/L(0) with its test set's ``‖f*‖²``
(the exact value is ``Σ v²``). Nothing is fitted.

Run:  python docs/validation/off_target_modes.py --suite wide2 --cases 26 --t-max 2300 [--md FILE]
"""
from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from multidriver_oracle import (  # noqa: E402
    case_config, case_label, crossing, emit, picked_cases, stored_horizon, suite_parser)
from whole_residual import stored  # noqa: E402
from featureode import simulate_config  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import ReducedFlow  # noqa: E402
from featureode.sim.batch import init_draw  # noqa: E402


def own_flow(case: tuple, seed: int, t_max: float) -> tuple[ReducedFlow, np.ndarray, np.ndarray, list[str]]:
    """The whole-residual reduced flow of the training's own init neurons: the flow, its times and states, and
    the basis' mode names."""
    theory = kernel_theory(case_config(case), with_gram=True)
    g, modes, v = np.asarray(theory.g, float), list(theory.modes), np.asarray(theory.target, float)
    a, w, b = init_draw(seed, int(case[-1]), g.size, 1.0, float(theory.bias_std))
    flow = ReducedFlow(g, modes, v, float(theory.gamma), float(theory.bias_std), theory.activation,
                       init=(a.numpy(), w.numpy() * np.sqrt(g), b.numpy()), drive="whole")
    ts, fs, error = flow.run(t_max, stop_loss=0.05, max_steps=5000)
    if error:
        raise SystemExit(f"off_target_modes: the flow stopped early: {error}")
    return flow, ts, fs, [str(m) for m in modes]


def main() -> int:
    p = suite_parser(__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--t-max", type=float, required=True, help="how far the network is trained again")
    p.add_argument("--off", type=int, default=6, help="how many modes outside T to measure (the flow's largest)")
    args = p.parse_args()
    out: list[str] = []
    for i, case in picked_cases(args):
        seeds = stored(args.suite, case)
        m50, m10 = seeds[args.seed]
        if not math.isfinite(m10):
            raise SystemExit(f"off_target_modes: {args.suite}:{i} seed {args.seed} has no stored t10")
        start = time.time()
        flow, ts, fs, names = own_flow(case, args.seed, stored_horizon([(m50, m10)]))
        v = flow.v_all
        v2 = float((v**2).sum())
        loss, loss_T = flow.loss(ts, fs), flow.loss_on_T(ts, fs)
        tail = np.interp(ts, *flow.tail_path)
        on_T = sorted(flow.keep)
        off_T = [k for k in range(v.size) if k not in flow.keep]
        target = [k for k in on_T if v[k] != 0.0]
        at10 = int(np.searchsorted(ts, m10))
        off_pick = sorted(off_T, key=lambda k: -abs(fs[min(at10, len(ts) - 1), k]))[:args.off]
        measured = [names[k] for k in on_T + off_pick]
        cfg = case_config(case).replace(training={"t_max": args.t_max, "threads": 1, "seed": args.seed,
                                                  "stop_loss": 0.0, "n_points": 60})
        with tempfile.TemporaryDirectory() as tmp:
            net = simulate_config(cfg, out_dir=tmp, progress=False, modes=measured)
        assert net.f is not None and net.f_stderr is not None
        ratio = net.loss / net.loss[0]
        out += [f"## {args.suite}:{i}: {case_label(*case)}, seed {args.seed}", "",
                f"Stored network: t50 / t10 = {m50:.1f} / {m10:.1f}. The own-draw flow: t50 / t10 ratio "
                f"{crossing(ts, loss, 0.5) / m50:.2f} / {crossing(ts, loss, 0.1) / m10:.2f} on the extended basis, "
                f"{crossing(ts, loss_T, 0.5) / m50:.2f} / {crossing(ts, loss_T, 0.1) / m10:.2f} on T. The network "
                f"retrained to t = {args.t_max:g}: its test set's ‖f*‖² is {2 * net.loss[0]:.3f} of the exact "
                f"{v2:g} (its L(0); the network's output is centred).", "",
                "| t (flow / network) | network L/L(0) | flow: target's modes / other modes in T / tail / outside T "
                "(of Σv²) |", "|---|---|---|"]
        times = [tq for tq in (0.3 * m10, 0.6 * m10, m10, args.t_max) if tq <= min(ts[-1], net.t[-1])]
        at = sorted({int(np.argmin(abs(net.t - tq))) for tq in times})   # the network's measurements nearest
        picks = [(min(int(np.searchsorted(ts, net.t[b])), len(ts) - 1), b) for b in at]
        for a, b in picks:
            parts = [sum((v[k] - fs[a, k]) ** 2 for k in target) / v2,
                     sum((v[k] - fs[a, k]) ** 2 for k in on_T if k not in target) / v2, tail[a],
                     sum(fs[a, k] ** 2 for k in off_T) / v2]
            out.append(f"| {ts[a]:.0f} / {net.t[b]:.0f} | {ratio[b]:.4f} | "
                       + " / ".join(f"{x:.4f}" for x in parts) + f" (sum {sum(parts):.4f}) |")
        out += ["", "| mode | in T | " + " | ".join(f"t ≈ {net.t[b]:.0f}: flow / network ± s.e." for _, b in picks)
                + " |", "|---|---|" + "---|" * len(picks)]
        for j, name in enumerate(measured):
            k = names.index(name)
            cells = [f"{fs[a, k]:+.3f} / {net.f[b, j]:+.3f} ± {net.f_stderr[b, j]:.3f}" for a, b in picks]
            out.append(f"| `{name}` | {'yes' if k in flow.keep else 'no'} | " + " | ".join(cells) + " |")
        out += ["", f"({time.time() - start:.0f} s)", ""]
        print("\n".join(out[-len(measured) - 16:]), file=sys.stderr, flush=True)
    text = "\n".join(out)
    emit(text, args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
