"""RKC against RK4 on the whole residual's flow (``meanfield+whole``): crossing times, steps, velocities, CPU.

``ReducedFlow.run`` integrates the whole residual's driving by the damped second-order Runge–Kutta–Chebyshev method
by default (its constant and linear modes are stiff); RK4 at ``1.5/λ_max`` was the integrator before, and scored
most of ``whole_residual_*.json``. This runs both on the same cases, as ``whole_residual.py`` runs a case (to a loss
of 0.05 or 3× the latest stored t10), and on the built-in config to its horizon, and prints the table.

Run:  python docs/validation/rkc_check.py [--md FILE]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from multidriver_oracle import case_config, crossing, emit, stored_horizon, suite_cases  # noqa: E402
from whole_residual import stored  # noqa: E402
from featureode.config import load_config  # noqa: E402
from featureode.kernel.theory import kernel_theory  # noqa: E402
from featureode.ode.meanfield import ReducedFlow  # noqa: E402

HEADER = """# RKC against RK4 on the whole residual's flow

`python docs/validation/rkc_check.py --md docs/validation/rkc_check.md`: `meanfield+whole` integrated by RK4 at
`1.5/λ_max` (the first round of [the whole residual driving](whole_residual.md)) and by the damped second-order RKC
method (its default since), on three suite cases (to a loss of 0.05 or 3× the latest stored t10) and on the
built-in config (to its horizon). CPU seconds on the shared 2-core machine, other jobs running.
"""
#: (suite, case) of the suites, and None for the built-in config
CASES = [("wide2", 9), ("wide2", 0), ("wide", 15), None]


def run(theory, integrator: str, t_max: float, stop_loss: float) -> tuple[float, float, int, int, float]:
    flow = ReducedFlow.from_theory(theory, drive="whole")
    calls = [0]
    velocity = flow.velocity

    def counted(state):
        calls[0] += 1
        return velocity(state)
    flow.velocity = counted  # type: ignore[method-assign]
    start = time.process_time()
    ts, fs, error = flow.run(t_max, stop_loss=stop_loss, max_steps=5000, integrator=integrator)
    if error:
        raise SystemExit(f"{integrator}: {error}")
    loss = flow.loss(ts, fs)
    return crossing(ts, loss, 0.5), crossing(ts, loss, 0.1), len(ts) - 1, calls[0], time.process_time() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--md", type=Path, help="write the table here too")
    args = p.parse_args()
    rows = ["| case | integrator | t50 | t10 | steps | velocities | CPU s |", "|---|---|---|---|---|---|---|"]
    for picked in CASES:
        if picked is None:
            cfg, label = load_config(), "the built-in config (to t = 300)"
            theory, t_max, stop = kernel_theory(cfg, with_gram=True), float(cfg.training.t_max), 0.0
        else:
            suite, i = picked
            case = suite_cases(suite)[i]
            label = f"{suite}:{i} {case[2]}" + ("" if case[1] == "relu" else f", {case[1]}")
            theory = kernel_theory(case_config(case), with_gram=True)
            t_max, stop = stored_horizon(stored(suite, case)), 0.05
        got = {name: run(theory, name, t_max, stop) for name in ("rk4", "rkc")}
        for name, (t50, t10, steps, calls, cpu) in got.items():
            rows.append(f"| {label} | {name} | {t50:.4f} | {t10:.4f} | {steps} | {calls} | {cpu:.1f} |")
        (a50, a10, *_), (b50, b10, *_) = got["rk4"], got["rkc"]
        rows.append(f"| | rkc/rk4 − 1 | {b50 / a50 - 1:+.2%} | {b10 / a10 - 1:+.2%} | | | |")
        print("\n".join(rows[-3:]), flush=True)
    text = "\n".join([HEADER, *rows]) + "\n"
    emit(text, args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
