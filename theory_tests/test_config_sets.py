"""One set of defaults (a config file is laid over the built-in default run) and ``--set TABLE.KEY=VALUE``."""
from __future__ import annotations

import json
import tomllib

import pytest

from featureode.cli import main
from featureode.config import DEFAULT_PATH, ConfigError, config_from_dict, load_config, parse_set

DEFAULT = tomllib.loads(DEFAULT_PATH.read_text())


def test_a_partial_file_takes_the_built_in_run_defaults(tmp_path):
    """A file with only [target] gets every key the default file sets (read here with tomllib, not through the
    package), where config_from_dict would give the dataclass defaults."""
    path = tmp_path / "t.toml"
    path.write_text('[target]\nexpr = "z0*z1"\n')
    cfg = load_config(path)
    for sec, vals in DEFAULT.items():
        for key, value in vals.items():
            if (sec, key) != ("target", "expr"):
                assert getattr(getattr(cfg, sec), key) == value, (sec, key)
    assert cfg.target.expr == "z0*z1"
    bare = config_from_dict({"target": {"expr": "z0*z1"}})
    assert bare.training.t_max != DEFAULT["training"]["t_max"]  # the low-level door documents the difference
    assert load_config(path).digest() == load_config(None, ["target.expr=z0*z1"]).digest()


def test_a_file_still_must_name_its_target(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text('[network]\nrichness = 0.1\n')
    with pytest.raises(ConfigError, match=r"missing required key: \[target\] expr"):
        load_config(path)
    assert load_config(path, ['target.expr="z0"']).network.richness == 0.1


@pytest.mark.parametrize("item, value", [
    ("network.richness=0.1", 0.1), ("network.width=64", 64), ("target.normalize=false", False),
    ('ode.variants=["lazy", "agop"]', ["lazy", "agop"]), ("target.expr=z0*z1 + h2(z0)", "z0*z1 + h2(z0)"),
    ('target.expr="z0"', "z0"), ("ode.custom.mine.closure=displacement", "displacement")])
def test_set_values_are_toml_literals_or_text(item, value):
    parts, got = parse_set(item)
    assert got == value and type(got) is type(value) and ".".join(parts) == item.partition("=")[0]


@pytest.mark.parametrize("item, needle", [
    ("network.richnes=0.1", "unknown key 'richnes' in [network]; did you mean 'richness'?"),
    ("netwrk.width=3", "unknown config table [netwrk]; did you mean 'network'?"),
    ("richness", "must be TABLE.KEY=VALUE"),
    ("network.width=1.5", "[network] width must be an integer"),
    ("network.width.x=1", "[network] width is not a table")])
def test_bad_set_items_are_one_line_errors(capsys, item, needle):
    assert main(["kernel", "--set", item]) == 2
    err = capsys.readouterr().err
    assert err.startswith("featureode: error:") and needle in err and err.count("\n") == 1, err


def test_set_reaches_the_command_and_the_run_stamp(tmp_path, capsys):
    """kernel --json sees the --set keys; solve stores them in config.json (config and source)."""
    assert main(["kernel", "--json", "--set", "data.dim=4", "--set", "target.expr=z0*z1 + z2"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["dim"] == 4 and sorted(rep["modes"]) == ["z0*z1", "z2"]
    out = tmp_path / "run"
    sets = ["data.dim=4", "target.expr=z0", 'ode.variants=["lazy"]', 'ode.basis="target"', "training.t_max=5.0",
            'ode.method="RK45"', 'ode.backend="numpy"', "ode.n_points=5"]
    assert main(["solve", "--out", str(out)] + [a for s in sets for a in ("--set", s)]) == 0
    stamp = json.loads((out / "config.json").read_text())
    assert stamp["config"]["data"]["dim"] == 4 and stamp["config"]["training"]["t_max"] == 5.0
    assert stamp["config"]["ode"]["variants"] == ["lazy"] and "--set data.dim=4" in stamp["source"]
    ode = json.loads((out / "ode.json").read_text())
    assert list(ode["variants"]) == ["lazy"] and ode["t_max"] == 5.0


def test_validate_list_and_sweep_set(capsys, tmp_path):
    assert main(["validate", "quick", "--out", str(tmp_path / "v"), "--list"]) == 0
    text = capsys.readouterr().out
    assert "4 points × 1 seeds = 4 runs" in text and "z0_z1_d8_g0.5" in text
    assert not (tmp_path / "v").exists()  # listing runs nothing
    assert main(["validate", "quick", "--list"]) == 0  # no folder needed to list
    assert "4 points × 1 seeds = 4 runs" in capsys.readouterr().out
    from featureode.workflow.grid import load_grid, suite_names, suite_path

    assert main(["validate", "--list"]) == 0  # the suites, each with its size
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == suite_names()
    assert all(f"= {load_grid(suite_path(ln.split()[0])).n_runs} runs" in ln for ln in lines)
    assert main(["validate", "quick"]) == 2 and "needs --out DIR" in capsys.readouterr().err
    assert main(["validate"]) == 2 and "name a suite" in capsys.readouterr().err
    assert main(["validate", "quick", "--out", str(tmp_path / "v"), "--list", "--set", "network.richness=1"]) == 2
    assert "network.richness is an axis" in capsys.readouterr().err
