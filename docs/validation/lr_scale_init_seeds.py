# Run: PYTHONPATH=$PWD python docs/validation/lr_scale_init_seeds.py  (about 1 minute; no training)
"""Init eNTK λ_β(0) of the lr_scale suite's networks (N = 512, d = 16, relu) over 16 seeds vs the kernel's exact λ."""
import numpy as np, torch
from featureode.config import load_config
from featureode.kernel.theory import kernel_theory
from featureode.sim.mlp import RunSpec, Simulation
torch.set_num_threads(1)
base = load_config(None).replace(network={"width": 512}, target={"expr": "z0 + z0*z1"},
                                 training={"compile": False, "device": "cpu", "t_max": 1.0, "t_min": 0.5})
for table in ({"a": 0}, {"a": 4}):
    cfg0 = base.replace(training={"lr_scale": table})
    th = kernel_theory(cfg0, basis="target")
    ratios, a2 = [], []
    for seed in range(16):
        cfg = cfg0.replace(training={"seed": seed})
        sim = Simulation([RunSpec.build(cfg)], None, progress=False)
        m = sim.net.measure(0, sim.tests[0], sim.specs[0].support)
        ratios.append(m.lam / th.lambda_exact)
        a2.append(float((sim.net.params["a0"][0].double() ** 2).mean()))
    r = np.array(ratios)
    print(table, "modes", [str(x) for x in th.modes], "theory", th.lambda_exact.round(5),
          "measured/theory mean", r.mean(0).round(4), "sd", r.std(0, ddof=1).round(4),
          "se of mean", (r.std(0, ddof=1) / 4).round(4), "seed0", r[0].round(4), "<a0^2> seed0", round(a2[0], 4),
          "corr(ratio, <a0^2>)", [round(float(np.corrcoef(r[:, k], a2)[0, 1]), 3) for k in range(r.shape[1])])
