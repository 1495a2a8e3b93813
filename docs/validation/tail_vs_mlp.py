"""The tail itself, measured: the network's loss on the modes in the target's directions beyond the extended
basis, against the mean-field flow's (``ReducedFlow(tail=True)``).

For each case the simulator trains the wide suite's network (seed 0) and measures its projections ``f_α`` on the
extended basis *and* on every mode in the target's directions T up to degree ``--degree``
(``simulate_config(modes=…)``, ``--n-test`` test points). The network's tail is ``Σ_{α ⊂ T, α ∉ basis} f_α²/Σ v²``
on those modes; the flow's is given twice: the same truncated sum (the flow's projections by the Stein formula on
the same modes) and the whole tail (:meth:`featureode.ode.meanfield.ReducedFlow.tail_loss`). The measured sum is
biased up by the test set's sampling error, about ``(number of modes) · L/n_test``. Nothing is fitted.

Run:  python docs/validation/tail_vs_mlp.py [--cases base,h2] [--md FILE]   (one training per case; minutes each)
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from multidriver_oracle import write_report  # noqa: E402
from featureode.calculus.hermite import Mode  # noqa: E402
from featureode.config import load_config  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import ReducedFlow  # noqa: E402
from featureode.sim.mlp import simulate_config  # noqa: E402

#: name -> (target, t_max): the wide suite's base network (relu, d = 16, exponent 1.5, offset 3, γ = 0.5, σ_b = 0.5,
#: N = 1024), the config defaults
CASES = {"base": ("z0*z1", 100.0), "h2": ("h2(z0)*z1", 500.0)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--degree", type=int, default=8)
    p.add_argument("--n-test", type=int, default=100_000)
    p.add_argument("--md", type=Path)
    p.add_argument("--runs", type=Path, help="keep each training here (a finished one is read back, not retrained)")
    args = p.parse_args()
    rows = []
    for name in args.cases.split(","):
        expr, t_max = CASES[name]
        cfg = load_config().replace(target={"expr": expr}, ode={"basis": "extended"},
                                    training={"t_max": t_max, "n_points": 40, "seed": 0, "n_test": args.n_test})
        theory = kernel_theory(cfg, with_gram=True)
        g, modes, v = np.asarray(theory.g, float), list(theory.modes), np.asarray(theory.target, float)
        T = sorted({i for m, x in zip(modes, v) if x for i in m.support})
        extra = [m for m in (Mode.from_dict(dict(zip(T, al))) for al in itertools.product(range(args.degree + 1),
                                                                                         repeat=len(T))
                             if 0 < sum(al) <= args.degree) if m not in modes]
        t0 = time.time()
        out = args.runs / name if args.runs else None
        tr = simulate_config(cfg, out, resume=out is not None, progress=False, modes=modes + extra)
        wall = time.time() - t0
        t, f = np.asarray(tr.t), np.asarray(tr.f)
        norm2 = float((v**2).sum())
        mlp_tail = (f[:, len(modes):] ** 2).sum(1) / norm2
        test = np.asarray(tr.loss) / float(tr.loss[0])
        ext = ((v - f[:, :len(modes)]) ** 2).sum(1) / norm2
        args_flow = (float(theory.gamma), float(theory.bias_std), str(theory.activation))
        flow = ReducedFlow(g, modes, v, *args_flow, tail=True)
        obs = ReducedFlow(g, extra, np.ones(len(extra)), *args_flow)
        obs0 = (obs.state0[0][:, None] * obs._parts(obs.state0)[0]).mean(0)
        state, s_t, steps = flow.state0, 0.0, 0
        for k, tk in enumerate(t):
            if tk <= 0 or tk < t_max / 20 or k % 2:
                continue
            while s_t < tk - 1e-12:
                if steps % 10 == 0:
                    lam = float(np.linalg.eigvalsh(flow.gram(state)).max())
                h = min(5.0, 1.5 / lam, max(0.01, s_t / 4), tk - s_t)
                state, s_t, steps = flow.step(state, h), s_t + h, steps + 1
            proj = ((state[0][:, None] * obs._parts(state)[0]).mean(0) - obs0) / flow.gamma
            trunc = float((proj**2).sum()) / norm2
            try:
                whole = f"{flow.tail_loss(state):.4f}"
            except Exception as exc:   # a tail the rules cannot resolve is reported, not guessed
                whole = f"not resolved ({type(exc).__name__})"
            base = float(((v - flow.f_all(state)) ** 2).sum()) / norm2
            rows.append([f"{expr}", f"{tk:.1f}", f"{test[k]:.4f}", f"{ext[k]:.4f}", f"{mlp_tail[k]:.4f}",
                         f"{base:.4f}", f"{trunc:.4f}", whole])
        print(f"{expr}: {len(modes)} + {len(extra)} modes measured, training {wall:.0f} s", file=sys.stderr, flush=True)
    head = ["target", "t", "MLP test loss", "MLP loss on the basis", f"MLP tail (T-modes to degree {args.degree})",
            "flow loss on the basis", f"flow tail (T-modes to degree {args.degree})", "flow tail (whole)"]
    write_report(head, rows, args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
