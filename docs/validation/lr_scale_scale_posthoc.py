# Run: PYTHONPATH=$PWD python docs/validation/lr_scale_scale_posthoc.py  OUT  (OUT: the folder of `featureode validate lr_scale --out OUT`)
"""Post hoc, ODE only: displacement with the scale factor (s = 1 + q_a Σ c g^β D², q_a = γ² η_a²) on the lr_scale
suite, against the suite's stored MLP crossing times (not a variant of the committed suite)."""
import glob, json, sys
from featureode.config import config_from_dict
from featureode.kernel.theory import kernel_theory
from featureode.ode.solve import solve_variant
from featureode.ode.variants import Variant
for d in sorted(glob.glob((sys.argv[1] if len(sys.argv) > 1 else "/work/lrout") + "/runs/*")):
    cfg = config_from_dict(json.load(open(d + "/config.json"))["config"])
    mlp = json.load(open(d + "/mlp.json"))
    th = kernel_theory(cfg, basis="target")
    tr = solve_variant(th, Variant("displacement", scale=True), cfg.training.t_max)
    r = lambda a, b: "—" if a is None or b is None else f"{a / b:.3g}"
    print(f"| {cfg.training.lr_scale['a']:g} | {cfg.network.richness:g} | {cfg.target.expr} | {r(tr.t50, mlp.get('t50'))} / {r(tr.t10, mlp.get('t10'))} |")
