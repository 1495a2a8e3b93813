"""Pilot: `replay` on the full extended basis (the simulation measures the Gram on every mode of the ODE's basis)
for three cases of the wide suite, seed 0; prints and writes the t50 / t10 ratios (ODE/MLP, test loss).

    python docs/validation/extended_replay_pilot.py OUT      # ≈ 4 minutes on one core; tables in OUT/pilot.md
"""
import json
import sys
from featureode.workflow.grid import load_grid, suite_path
from featureode.workflow.sweeps import point_config
from featureode.workflow.compare import compare_config
grid = load_grid(suite_path("wide"))
cases = {"relu_z0z1": "activation-relu_expr-z0_z1_dim16_exponent1.5_richness0.5_bias_std0.5_width1024",
         "erf_z0z1": "activation-erf_expr-z0_z1_dim16_exponent1.5_richness0.5_bias_std0.5_width1024",
         "relu_z0z1_exp0.5": "activation-relu_expr-z0_z1_dim16_exponent0.5_richness0.5_bias_std0.5_width1024"}
OUT = sys.argv[1]
lines = ["| case | " + " | ".join(["lazy", "displacement", "second_order", "replay"]) + " |", "|---|---|---|---|---|"]
for label, point in cases.items():
    cfg = point_config(grid, point, seed=0)
    cfg = cfg.replace(ode={"variants": ["lazy", "displacement", "second_order", "replay"], "basis": "extended"})
    compare_config(cfg, f"{OUT}/{label}", progress=False)
    variants = json.load(open(f"{OUT}/{label}/report.json"))["variants"]
    fmt = lambda x: "—" if x is None else f"{x:.3f}"  # noqa: E731 — "—": the curve ends before it crosses
    cells = [f"{fmt(variants[n].get('t50_ratio'))} / {fmt(variants[n].get('t10_ratio'))}"
             for n in ("lazy", "displacement", "second_order", "replay")]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
    print(lines[-1], flush=True)
open(f"{OUT}/pilot.md", "w").write("\n".join(lines) + "\n")
