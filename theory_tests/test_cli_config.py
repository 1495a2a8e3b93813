"""CLI JSON contract (theory §6), config validation and the comparison metrics, against independent oracles."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate

from featureode.cli import main
from featureode.config import load_config


def run_json(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_hermite_relu_json_matches_design_closed_form(capsys):
    out = run_json(capsys, "hermite", "relu", "--max-degree", "10", "--json")
    assert out["activation"] == "relu"
    assert set(out) >= {"activation", "coefficients", "exact"}
    # theory §2: E[σ He_n] = 1/sqrt(2π), 1/2, then (−1)^{n/2−1}(n−3)!!/sqrt(2π) for even n ≥ 2, 0 for odd n ≥ 3
    for n, mu in enumerate(out["coefficients"]):
        if n == 0:
            e_he = 1 / math.sqrt(2 * math.pi)
        elif n == 1:
            e_he = 0.5
        elif n % 2:
            e_he = 0.0
        else:
            dfact = math.prod(range(n - 3, 0, -2)) if n > 3 else 1
            e_he = (-1) ** (n // 2 - 1) * dfact / math.sqrt(2 * math.pi)
        assert mu == pytest.approx(e_he / math.sqrt(math.factorial(n)), abs=1e-14)
    assert all(isinstance(x, str) for x in out["exact"])


def test_hermite_tanh_bias_against_scipy_quadrature(capsys):
    out = run_json(capsys, "hermite", "tanh", "--max-degree", "7", "--bias", "0.3", "--json")
    assert out["exact"] == [None] * 8
    he = np.polynomial.hermite_e
    for n, mu in enumerate(out["coefficients"]):
        c = np.zeros(n + 1)
        c[n] = 1
        f = lambda x: math.tanh(x + 0.3) * he.hermeval(x, c) * math.exp(-x * x / 2)  # noqa: E731
        ref = integrate.quad(f, -40, 40, limit=400, epsabs=1e-14)[0] / math.sqrt(2 * math.pi * math.factorial(n))
        assert mu == pytest.approx(ref, abs=1e-11)


def test_decompose_json_against_hand_derivation(capsys):
    out = run_json(capsys, "decompose", "x0^2 + staircase(3)", "--dim", "8", "--no-normalize", "--json")
    g = np.array([(i + 3.0) ** -1.5 for i in range(8)])
    g0 = g[0] / g.sum()
    # x0² = g0 z0² = g0 (sqrt(2) h2(z0) + 1); staircase(3) = (z0 + z0 z1 + z0 z1 z2)/sqrt(3)
    expect = {"1": g0, "z0": 1 / math.sqrt(3), "h2(z0)": math.sqrt(2) * g0, "z0*z1": 1 / math.sqrt(3),
              "z0*z1*z2": 1 / math.sqrt(3)}
    got = {m["mode"]: m["coefficient"] for m in out["modes"]}
    assert set(got) == set(expect)
    for k, v in expect.items():
        assert got[k] == pytest.approx(v, rel=1e-13)
    idx = {m["mode"]: m["index"] for m in out["modes"]}
    assert idx["h2(z0)"] == {"0": 2} and idx["z0*z1*z2"] == {"0": 1, "1": 1, "2": 1} and idx["1"] == {}


def test_decompose_normalized_against_hand_variance(capsys):
    """x0² + staircase(3) has variance Var(g0 z0²) + Var(staircase) = 2 g0² + 1 (the cross terms are odd in z0), so
    the normalised coefficients are the raw ones over sqrt(1 + 2 g0²), and the constant g0 is reported apart."""
    out = run_json(capsys, "decompose", "x0^2 + staircase(3)", "--dim", "8", "--json")
    g = np.array([(i + 3.0) ** -1.5 for i in range(8)])
    g0 = g[0] / g.sum()
    sd = math.sqrt(1 + 2 * g0**2)
    expect = {"z0": 1 / math.sqrt(3) / sd, "h2(z0)": math.sqrt(2) * g0 / sd, "z0*z1": 1 / math.sqrt(3) / sd,
              "z0*z1*z2": 1 / math.sqrt(3) / sd}
    got = {m["mode"]: m["coefficient"] for m in out["modes"]}
    assert set(got) == set(expect) and all(got[k] == pytest.approx(v, rel=1e-13) for k, v in expect.items())
    assert out["constant"] == pytest.approx(g0, rel=1e-13)


def test_decompose_at_large_dimension(capsys):
    """d = 100 000 (once a recursion-depth crash after 29 s): one mode, named with its 0-based dimensions."""
    out = run_json(capsys, "decompose", "z0*z99999", "--dim", "100000", "--json")
    assert [(m["mode"], m["index"], m["coefficient"]) for m in out["modes"]] == [("z0*z99999", {"0": 1, "99999": 1},
                                                                                  1.0)]


def test_decompose_reports_a_constant_beyond_double_precision_exactly(capsys):
    """z0**320: the constant E[z^320] = 319!! ≈ 3.07e331 is beyond float64 (it printed 'inf'): the text shows its
    exact value to 16 digits, the JSON null beside the exact integer; the normalised modes stay floats."""
    import sympy as sp

    out = run_json(capsys, "decompose", "z0**320", "--dim", "2", "--json")
    assert out["constant"] is None and int(out["constant_exact"]) == int(sp.factorial2(319))
    assert all(m["coefficient"] is not None for m in out["modes"])
    assert main(["decompose", "z0**320", "--dim", "2"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith(str(sp.N(sp.factorial2(319), 16))) and "inf" not in last


@pytest.mark.parametrize("argv, needle", [
    (["hermite", "relux", "--max-degree", "3"], "valid activations: relu, abs"),
    (["hermite", "foo(u)", "--max-degree", "3"], "unknown function foo"),       # was a NameError traceback
    (["hermite", "u**", "--max-degree", "3"], "'u**': invalid syntax; give a name"),   # was SymPy's two lines
    (["hermite", "", "--max-degree", "3"], "'': empty; give a name"),
    (["decompose", "z0*z8", "--dim", "8"], "z8"),
    (["decompose", "z0 + foo", "--dim", "8"], "foo"),
    (["decompose", "z0", "--dim", "4", "--exponent", "-1"], "exponent"),
    (["decompose", "z0", "--dim", "100000000"], "dim must be an integer in [1, 1e+07]"),
])
def test_cli_bad_input_one_line_error(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("featureode: error:") and needle in err and err.count("\n") == 1


@pytest.mark.parametrize("argv, needle", [
    (["hermite", "relu", "--max-degree", "-1"], "argument --max-degree: must be an integer ≥ 0, got -1"),
    (["hermite", "relu", "--max-degree", "2.5"], "argument --max-degree: must be an integer ≥ 0, got '2.5'"),
    (["hermite", "relu", "--max-degree", "3", "--bias", "nan"], "argument --bias: must be a finite number, got nan"),
    (["hermite", "relu", "--max-degree", "3", "--scale", "0"], "argument --scale: must be a finite number > 0"),
    (["hermite", "relu", "--max-degree", "3", "--scale", "-inf"], "argument --scale"),
    (["decompose", "z0", "--dim", "0"], "argument --dim: must be an integer ≥ 1, got 0"),
    (["decompose", "z0", "--dim", "4", "--offset", "-5"], "argument --offset: must be a finite number > 0"),
    (["decompose", "z0", "--dim", "4", "--exponent", "inf"], "argument --exponent: must be a finite number"),
])
def test_cli_bad_arguments_are_refused_by_the_parser(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and needle in capsys.readouterr().err


@pytest.mark.parametrize("value, fix", [
    ("[rational, lazy]", """--set 'ode.variants=["rational", "lazy"]'"""),
    ("rational", """--set 'ode.variants=["rational"]'"""),
    ("rational,lazy", """--set 'ode.variants=["rational", "lazy"]'"""),
])
def test_a_list_given_as_text_names_the_toml_fix(capsys, value, fix):
    """``--set ode.variants=[rational]`` (unquoted names: not TOML, so it arrives as text) names the quoted form."""
    assert main(["kernel", "--set", f"ode.variants={value}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("featureode: error: [ode] variants must be a list") and fix in err and err.count("\n") == 1


def test_config_file_errors_are_one_line(capsys, tmp_path):
    """A bad key in a file (the user's value named), a missing file and a folder given as the config."""
    bad = tmp_path / "bad.toml"
    bad.write_text('[target]\nexpr = "z0"\n[training]\nt_max = inf\n')
    cases = [(str(bad), "[training] t_max is inf"), (str(tmp_path / "nope.toml"), "does not exist"),
             (str(tmp_path), "is a folder")]
    for path, needle in cases:
        assert main(["kernel", path]) == 2
        err = capsys.readouterr().err
        assert err.startswith("featureode: error:") and needle in err and err.count("\n") == 1, err


def test_user_errors_are_one_line_and_others_are_tracebacks(capsys, monkeypatch):
    """Every FeatureODEError of the package (all its modules walked) and each OS file error becomes one line with
    exit status 2, even when its message has several lines; an interrupt exits 130 with its message; anything else
    is a bug and propagates, as do user errors with --traceback."""
    import featureode.cli as cli
    from featureode.core.errors import FeatureODEError
    from test_errors import package_exceptions

    classes = [c for c in package_exceptions().values() if issubclass(c, FeatureODEError)]
    assert len(classes) >= 20
    classes += [FileExistsError, FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError]
    for cls in classes:
        name = cls.__name__

        def boom(args, cls=cls):
            raise cls("first part\n  second part")

        monkeypatch.setattr(cli, "cmd_decompose", boom)
        assert cli.main(["decompose", "z0", "--dim", "2"]) == 2, name
        assert capsys.readouterr().err == "featureode: error: first part second part\n", name
        with pytest.raises(cls):
            cli.main(["--traceback", "decompose", "z0", "--dim", "2"])

    def interrupted(args):
        raise KeyboardInterrupt("checkpoint saved to out/checkpoint.pt; rerun with --resume")

    monkeypatch.setattr(cli, "cmd_decompose", interrupted)
    assert cli.main(["decompose", "z0", "--dim", "2"]) == 130
    assert capsys.readouterr().err == ("featureode: interrupted: checkpoint saved to out/checkpoint.pt; rerun with "
                                       "--resume\n")

    def bug(args):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(cli, "cmd_decompose", bug)
    with pytest.raises(ZeroDivisionError):
        cli.main(["decompose", "z0", "--dim", "2"])


def test_every_argument_has_help(capsys):
    import argparse

    from featureode.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = [(name, a.dest) for name, p in [("featureode", parser)] + list(sub.choices.items())
               for a in p._actions if not a.help]
    assert missing == []
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "featureode compare" in text and "``" not in text and "DESIGN §6" not in text


def test_validate_names_its_suites(capsys):
    with pytest.raises(SystemExit):
        main(["validate", "nope", "--out", "unused"])
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err
    assert all(f"'{name}'" in err for name in ("quick", "standard", "wide", "wide_quick"))


def test_default_config_loads():
    """The built-in default: staircase(2) at d = 16 on the theory §1 power law (offset 3, exponent 1.5)."""
    cfg = load_config()
    raw = np.arange(3, 19, dtype=float) ** -1.5
    np.testing.assert_allclose(cfg.spectrum().g, raw / raw.sum(), rtol=1e-13)
    assert cfg.target.expr == "staircase(2)" and cfg.training.threads == 1


def test_kernel_json_contract(capsys, tmp_path):
    """`featureode kernel CONFIG --json` (theory §6): the listed keys, the target's modes, HEA = Λ_{|β|} g^β with g
    written out by hand, the theory ReLU values Λ_1, Λ_2 ≈ 0.694, 0.412 (σ_b = 0.5), κ = γ² c_1/Λ_1²."""
    path = tmp_path / "k.toml"
    path.write_text('[data]\ndim = 4\n\n[target]\nexpr = "z0*z1 + z2"\n\n'
                    '[network]\nactivation = "relu"\nbias_std = 0.5\nrichness = 0.3\n')
    out = run_json(capsys, "kernel", str(path), "--json")
    assert {"modes", "exact", "exact_stderr", "hea", "c", "level_coefficients"} <= set(out)
    assert out["modes"] == ["z2", "z0*z1"]
    assert out["exact_stderr"] == [0.0, 0.0] and all(e > 0 for e in out["exact"])
    raw = np.array([(i + 3.0) ** -1.5 for i in range(4)])
    g = raw / raw.sum()
    lam = out["level_coefficients"]
    assert len(lam) == 3 and lam[1:] == pytest.approx([0.694, 0.412], abs=5e-4)  # Λ_0 … Λ_{max degree}
    assert out["hea"] == pytest.approx([lam[1] * g[2], lam[2] * g[0] * g[1]], rel=1e-13)
    assert len(out["c"]) == len(lam) and all(c > 0 for c in out["c"])
    assert out["kappa"] == pytest.approx(0.3**2 * out["c"][1] / lam[1] ** 2, rel=1e-13)


