# Run: PYTHONPATH=$PWD python docs/validation/lr_scale_resolve.py OUT  (ODE-only re-solve of lazy, displacement,
# second_order against the stored MLP times of `featureode validate lr_scale --out OUT`)
import glob, json, sys
from featureode.config import config_from_dict
from featureode.kernel.theory import kernel_theory
from featureode.ode.solve import solve_variant
for d in sorted(glob.glob((sys.argv[1] if len(sys.argv) > 1 else "/work/lrout") + "/runs/*")):
    cfg = config_from_dict(json.load(open(d + "/config.json"))["config"])
    mlp = json.load(open(d + "/mlp.json"))
    th = kernel_theory(cfg, basis="target")
    r = lambda a, b: "—" if a is None or b is None else f"{a / b:.3g}"
    row = []
    for v in ("lazy", "displacement", "second_order"):
        tr = solve_variant(th, v, cfg.training.t_max)
        row.append(f"{r(tr.t50, mlp.get('t50'))} / {r(tr.t10, mlp.get('t10'))}")
    print(f"| {cfg.training.lr_scale['a']:g} | {cfg.network.richness:g} | {cfg.target.expr} | " + " | ".join(row) + " |")
