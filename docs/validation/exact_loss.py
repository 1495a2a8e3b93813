"""The network's crossing times from its exact population loss: stored trainings of suite cases trained again with
``[training] exact_loss = true``, scored against the reference flow on both curves.

The suites' MLP crossing times come from a 20 000-point test set, whose loss is uncertain by several percent for
targets of degree ≥ 3 (``test_set_size.md``). ``featureode.kernel.population`` computes ``½E[(f − f*)²]`` of the
trained network exactly (closed-form Gaussian pair moments of its 2N centred neurons, relu and erf), and the
simulator records it beside the test-set loss when the config asks for it. The training does not depend on the
test set or on this measurement (the run's other streams and steps are unchanged), so the same config and seed train
the stored network again. Printed per case: the stored crossing times, this run's test-set ones (the same network,
the same test set: they reproduce the stored ones up to the measurement grid), the exact ones, and the
``meanfield+whole`` flow's ratios against the stored and the exact times (the flow's times from
``whole_residual_SUITE.json``, unchanged). Each case's numbers are also kept in ``exact_loss.json`` (by
``suite:case:seed``), so runs of separate invocations add up.

Run:  python docs/validation/exact_loss.py --suite wide2 --cases 26 --t-max 3500 [--md FILE]
      python docs/validation/exact_loss.py --suite wide --cases 8,10 --seed 1          (to 1.6× the stored t10)
      python docs/validation/exact_loss.py --summary [--md FILE]     (the table of every case kept so far)
"""
from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from multidriver_oracle import case_label, crossing, emit, picked_cases, suite_parser  # noqa: E402
from whole_residual import keep_result, retraining  # noqa: E402
from featureode import simulate_config  # noqa: E402

RESULTS = HERE / "exact_loss.json"


def flow_times(suite: str, i: int) -> tuple[float, float]:
    """The ``meanfield+whole`` flow's ``(t50, t10)`` of a case (``whole_residual_SUITE.json``; NaN where absent)."""
    runs = json.loads((HERE / f"whole_residual_{suite}.json").read_text())
    flow = runs.get(f"{suite}:{i}", {}).get("flow") or [math.nan, math.nan]
    return float(flow[0]), float(flow[1])


def band(x: float) -> str:
    """``x`` with a mark when outside ±10% (``*``) or ±20% (``**``)."""
    if not math.isfinite(x):
        return "—"
    return f"{x:.3f}" + ("**" if abs(x - 1) > 0.2 else "*" if abs(x - 1) > 0.1 else "")


def change(new: float, old: float) -> str:
    return f"{100 * (new / old - 1):+.1f}%" if math.isfinite(new) and math.isfinite(old) else "—"


def summary(results: dict) -> str:
    """One row per kept training (suite order): the crossing times on the test set and exact, and the flow's
    ratios against both (``meanfield+whole`` on the extended basis, as kept in ``whole_residual_SUITE.json`` now)."""
    def order(key: str) -> tuple:
        suite, case, seed = key.split(":")
        return suite, int(case), int(seed)

    rows = ["| case | seed | L(0) of the test set / exact | t50 stored → exact | t10 stored → exact | "
            "flow t50 ratio stored → exact | flow t10 ratio stored → exact |", "|---|---|---|---|---|---|---|"]
    # the flow: meanfield+whole on the extended basis (whole_residual_SUITE.json's "flow")
    for key in sorted(results, key=order):
        r = results[key]
        suite, case, _ = key.split(":")   # the flow as kept now (a case's flow may be run after its training)
        f50, f10 = flow_times(suite, int(case))
        (s50, s10), (e50, e10) = r["times"]["stored"], r["times"]["exact"]
        rows.append(f"| {key.rsplit(':', 1)[0]}: {r['label'].split(': ', 1)[1]} | {r['seed']} | "
                    f"{r['test_set_l0_over_exact']:.3f} | {s50:.1f} → {e50:.1f} ({change(e50, s50)}) | "
                    f"{s10:.1f} → {e10:.1f} ({change(e10, s10)}) | {band(f50 / s50)} → {band(f50 / e50)} | "
                    f"{band(f10 / s10)} → {band(f10 / e10)} |")
    pairs = sorted({key.rsplit(":", 1)[0] for key in results if key.endswith(":1") and key[:-1] + "0" in results},
                   key=lambda k: order(k + ":0"))
    if pairs:
        rows += ["", "Two networks of one case (seeds 0 and 1, different init draws and test sets): their relative "
                 "difference |t(0) − t(1)| / mean, measured on the test set and exact.", "",
                 "| case | t50 stored | t50 exact | t10 stored | t10 exact |", "|---|---|---|---|---|"]
        for case in pairs:
            a, b = results[case + ":0"]["times"], results[case + ":1"]["times"]

            def spread(kind: str, level: int) -> str:
                x, y = a[kind][level], b[kind][level]
                return f"{200 * abs(x - y) / (x + y):.1f}%" if math.isfinite(x) and math.isfinite(y) else "—"

            rows.append(f"| {case}: {results[case + ':0']['label'].split(': ', 1)[1]} | {spread('stored', 0)} | "
                        f"{spread('exact', 0)} | {spread('stored', 1)} | {spread('exact', 1)} |")
    return "\n".join(rows) + "\n"


def main() -> int:
    p = suite_parser(__doc__.splitlines()[0], suite_required=False)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--t-max", type=float, help="how far the network is trained again (default: 1.6× the stored t10)")
    p.add_argument("--summary", action="store_true", help="print the table of every kept case; train nothing")
    args = p.parse_args()
    if args.summary:
        emit(summary(json.loads(RESULTS.read_text()) if RESULTS.exists() else {}), args.md)
        return 0
    if args.suite is None:
        p.error("--suite is required (or --summary)")
    out: list[str] = []
    for i, case in picked_cases(args):
        start = time.time()
        m50, m10, cfg = retraining("exact_loss", args.suite, i, case, args.seed, args.t_max, exact_loss=True)
        t_max = cfg.training.t_max
        with tempfile.TemporaryDirectory() as tmp:
            net = simulate_config(cfg, out_dir=tmp, progress=False)
        t = np.asarray(net.t)
        test_ratio, exact_ratio = np.asarray(net.loss) / net.loss[0], net.arrays["loss_exact_ratio"]
        f50, f10 = flow_times(args.suite, i)
        times = {"stored": (m50, m10), "test set": (crossing(t, test_ratio, 0.5), crossing(t, test_ratio, 0.1)),
                 "exact": (crossing(t, exact_ratio, 0.5), crossing(t, exact_ratio, 0.1))}
        key = f"{args.suite}:{i}:{args.seed}"
        l0 = float(net.loss[0] / net.arrays["loss_exact"][0])
        keep_result(RESULTS, key, {"label": case_label(*case), "seed": args.seed, "t_max": t_max, "times": times,
                                   "test_set_l0_over_exact": l0,
                                   "seconds": round(time.time() - start, 1)})
        out += [f"### {key}: {case_label(*case)}, seed {args.seed}", "",
                f"Trained again to t = {t_max:g}; the test set's L(0) is {l0:.3f} of the exact one.", "",
                "| loss curve | t50 | t10 | flow t50 ratio | flow t10 ratio |", "|---|---|---|---|---|"]
        for name, (a, b) in times.items():
            out.append(f"| {name} | {a:.1f} | {b:.1f} | {band(f50 / a)} | {band(f10 / b)} |")
        out += ["", f"({time.time() - start:.0f} s)", ""]
        print("\n".join(out[-10:]), file=sys.stderr, flush=True)
    emit("\n".join(out), args.md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
