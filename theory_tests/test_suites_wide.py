"""The `wide` and `wide_quick` grid files: theory §7 format, every case a valid config, the axes issue 14 asks for."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from featureode.calculus.activations import get_activation
from featureode.config import SECTIONS, config_from_dict
from featureode.calculus.targets import parse_target
from featureode.ode.variants import closure_names

SUITES = Path(__file__).resolve().parents[1] / "featureode" / "suites"


def _cases(name: str) -> tuple[dict, list[dict]]:
    grid = tomllib.loads((SUITES / f"{name}.toml").read_text(encoding="utf-8"))
    assert set(grid) <= {"base", "set", "grid", "zip", "sweep"}
    lengths = {len(v) for v in grid["zip"].values()}
    assert len(lengths) == 1, "[zip] keys must have equal lengths"
    n = lengths.pop()
    cases = []
    for k in range(n):
        raw: dict = {}
        for key, value in {**grid.get("set", {}), **{key: v[k] for key, v in grid["zip"].items()}}.items():
            table, _, field = key.partition(".")
            assert table in SECTIONS and field, key
            # "auto" is resolved by the sweep runner (theory §7) before a config is built; any number stands in
            raw.setdefault(table, {})[field] = 100.0 if value == "auto" else value
        cases.append(raw)
    return grid, cases


@pytest.mark.parametrize("name", ["wide", "wide_quick"])
def test_every_case_is_a_valid_config(name):
    grid, cases = _cases(name)
    assert grid["sweep"]["seeds"] == [0, 1]
    for raw in cases:
        cfg = config_from_dict(raw, source=f"{name}.toml")
        assert cfg.training.threads == 1
        assert all(v in closure_names() for v in cfg.ode.variants)
        get_activation(cfg.network.activation)
        parse_target(cfg.target.expr, cfg.spectrum())


def test_wide_covers_the_axes_of_issue_14():
    grid, cases = _cases("wide")
    assert len(cases) >= 40 and len(grid["sweep"]["seeds"]) >= 2
    cfgs = [config_from_dict(raw) for raw in cases]
    acts = {c.network.activation for c in cfgs}
    assert {"relu", "erf", "tanh", "gelu"} <= acts and len(acts - {"relu", "erf", "tanh", "gelu"}) >= 1
    assert {c.data.dim for c in cfgs} == {8, 16, 32, 64}
    assert {c.data.exponent for c in cfgs} == {0.5, 1.0, 1.5, 2.0}
    gammas = {c.network.richness for c in cfgs}
    assert min(gammas) == 0.005 and max(gammas) == 1.0 and len(gammas) >= 5
    assert {c.network.bias_std for c in cfgs} == {0.0, 0.5, 1.0}
    widths = {c.network.width for c in cfgs}
    assert min(widths) == 256 and max(widths) == 4096
    exprs = {c.target.expr for c in cfgs}
    degrees = {max(m.degree for m in parse_target(e, c.spectrum()).modes) for e, c in
               ((c.target.expr, c) for c in cfgs)}
    assert degrees == {1, 2, 3, 4}
    assert {"z0*z1*z2*z3", "h3(z0)", "h4(z0)", "h2(z0)*z1", "staircase(2)", "staircase(3)", "staircase(4)"} <= exprs
    assert any(e.startswith("x") for e in exprs)                       # a polynomial in x
    # one-at-a-time: every case differs from the base in few keys, and the base is the first case
    base = cases[0]
    for raw in cases[1:]:
        changed = [f"{t}.{k}" for t in raw for k in raw[t] if raw[t][k] != base[t][k]]
        assert 1 <= len(changed) <= 3, changed


def test_quick_suite_is_small():
    grid, cases = _cases("wide_quick")
    cfgs = [config_from_dict(raw) for raw in cases]
    assert len(cases) * len(grid["sweep"]["seeds"]) <= 16
    assert max(c.network.width for c in cfgs) <= 256
    assert max(max(m.degree for m in parse_target(c.target.expr, c.spectrum()).modes) for c in cfgs) <= 2
