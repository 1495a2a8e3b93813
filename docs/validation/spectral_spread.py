#!/usr/bin/env python
"""Spectral spread diagnostics (docs/validation/spectral_spread.md): one small training with the second moment
measured (spread=True), then replay on the target basis in every spread form, driven by the measured second moment
and by the init prediction of featureode.kernel.spread. Usage: python spectral_spread.py CASE (see CASES); writes
spread-runs/CASE/ (the simulation, reused when present) and spread-runs/CASE.json."""
import json, os, sys, time
from typing import Any
import numpy as np
from featureode.config import config_from_dict
from featureode.sim.mlp import simulate_config
from featureode.ode.replay import replay
from featureode.kernel.spread import spread_of_config
from featureode.results.metrics import crossing_time

case = sys.argv[1]
CASES = {
  "lazy_z0z1_N1024": dict(expr="z0*z1", act="relu", N=1024, gamma=0.005, t_max=160.0),
  "lazy_z0z1z2_N256": dict(expr="z0*z1*z2", act="relu", N=256, gamma=0.005, t_max=3200.0),
  "lazy_z0z1z2_N1024": dict(expr="z0*z1*z2", act="relu", N=1024, gamma=0.005, t_max=1400.0),
  "erf_z0z1_N1024": dict(expr="z0*z1", act="erf", N=1024, gamma=0.5, t_max=160.0),
}
c = CASES[case]
os.makedirs("spread-runs", exist_ok=True)
cfg = config_from_dict({"data": {"dim": 16}, "target": {"expr": c["expr"]},
    "network": {"activation": c["act"], "width": c["N"], "richness": c["gamma"]},
    "training": {"t_max": c["t_max"], "n_points": 24, "threads": 1}, "ode": {"basis": "target"}})
t0 = time.perf_counter()
from featureode.results.trajectory import Trajectory


def need(x: "np.ndarray | None", what: str) -> np.ndarray:
    """A recorded array the diagnostics need (a training with spread=True records them)."""
    if x is None:
        raise SystemExit(f"{case}: the trajectory lacks {what}; rerun the training with spread=True")
    return x


if os.path.exists(f"spread-runs/{case}/mlp.json"):
    mlp = Trajectory.load(f"spread-runs/{case}", "mlp", kind="mlp")
else:
    mlp = simulate_config(cfg, out_dir=f"spread-runs/{case}", progress=False, spread=True)
wall = time.perf_counter() - t0
pred = spread_of_config(cfg)
rv = np.array([p.relative_variance for p in pred])
rv_inf = np.array([p.infinite.variance / p.lam**2 for p in pred])
out: dict[str, Any] = {"case": case, "wall_s": wall, "mlp_t50": mlp.t50, "mlp_t10": mlp.t10,
       "init_pred": [p.as_dict() for p in pred]}
ratio = lambda tr: (None if tr.t50 is None or mlp.t50 is None else tr.t50 / mlp.t50,
                    None if tr.t10 is None or mlp.t10 is None else tr.t10 / mlp.t10)
rows = {"replay": replay(mlp)}
for form in ("twopoint", "gamma", "bound"):
    rows[f"replay+{form} (measured)"] = replay(mlp, spread=form)
    rows[f"replay+{form} (init N)"] = replay(mlp, spread=form, relative_variance=rv)
out["ratios"] = {k: ratio(v) for k, v in rows.items()}
lam = need(mlp.lam, "lam")
sm, se = need(mlp.get("lambda_second_moment"), "lambda_second_moment"), need(mlp.get("lambda_second_moment_stderr"), "its stderr")
top = need(mlp.get("lambda_top"), "lambda_top")
out["measured"] = {"t": mlp.t.tolist(), "lam": lam.tolist(), "second_moment": sm.tolist(), "second_moment_se": se.tolist(),
                   "lambda_top": top.tolist()}
json.dump(out, open(f"spread-runs/{case}.json", "w"), indent=1, default=float)
print(case, f"wall {wall:.0f}s (sim {mlp.meta.get('wall_s', 0):.0f}s) MLP t50/t10", mlp.t50, mlp.t10)
for k, v in out["ratios"].items(): print(f"  {k:32s}", v)
for p in pred: print("  init", p.as_dict()["mode"], "relvar(N)", p.relative_variance, "relvar(inf)", p.infinite.variance / p.lam**2)
k = [0, len(mlp.t)//3, 2*len(mlp.t)//3, -1]
for i in k: print("  t", round(mlp.t[i],2), "lam", lam[i], "m2", sm[i], "+-", se[i], "lam^2", lam[i]**2, "top", top[i])
full = {k: (crossing_time(v.t, need(v.get("loss_full"), "loss_full"), 0.5), crossing_time(v.t, need(v.get("loss_full"), "loss_full"), 0.1))
        for k, v in rows.items() if v.get("loss_full") is not None}
isl = need(mlp.in_support_loss, "in_support_loss") / need(mlp.in_support_loss, "in_support_loss")[0]
mi50, mi10 = crossing_time(mlp.t, isl, 0.5), crossing_time(mlp.t, isl, 0.1)
out["mlp_in_support"] = (mi50, mi10)
out["ratios_in_support"] = {k: (None if v.t50 is None or mi50 is None else v.t50/mi50, None if v.t10 is None or mi10 is None else v.t10/mi10) for k, v in rows.items()}
out["ratios_full_vs_test_loss"] = {k: (None if a is None or mlp.t50 is None else a/mlp.t50, None if b is None or mlp.t10 is None else b/mlp.t10) for k, (a, b) in full.items()}
json.dump(out, open(f"spread-runs/{case}.json", "w"), indent=1, default=float)
print("  MLP in-support t50/t10", mi50, mi10)
for k, v in out["ratios_in_support"].items(): print(f"  in-support {k:32s}", v)
for k, v in out["ratios_full_vs_test_loss"].items(): print(f"  full/test {k:32s}", v)
