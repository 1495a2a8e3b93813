"""Trajectory and ODEResult: JSON + npz round trips, the theory §6 keys, files of the earlier layout, and damaged
files refused with TrajectoryFileError."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from featureode.results.trajectory import ODEResult, Status, Trajectory, TrajectoryFileError, write_json, write_npz

T = np.array([0.0, 0.1, 1.0, 10.0])


def _ode(name: str = "lazy", error: str | None = None) -> Trajectory:
    f = np.stack([1 - np.exp(-T), 0.5 * (1 - np.exp(-2 * T))], axis=1)
    return Trajectory("ode", name, ("z0", "z0*z1"), np.array([1.0, 0.5]), T, np.exp(-T), f=f,
                      lam=np.ones((4, 2)) * [1.0, 2.0], r=np.ones((4, 3)), t50=math.log(2), t10=None,
                      arrays={"D": f * 2, "s": np.ones(4)}, meta={"info": {"nfev": 12}},
                      status=Status(complete=error is None, reached_t=10.0, error=error))


def _mlp() -> Trajectory:
    f = np.stack([1 - np.exp(-T), 0.5 * (1 - np.exp(-2 * T))], axis=1)
    return Trajectory("mlp", "mlp", ("z0", "z0*z1"), np.array([1.0, 0.5]), T, 0.62 * np.exp(-T), f=f,
                      lam=np.ones((4, 2)), r=np.ones((4, 3)), in_support_loss=np.exp(-T), f_stderr=0.01 * f,
                      t50=math.log(2), t10=math.log(10),
                      arrays={"a2": np.linspace(1, 2, 4), "lambda_parts/readout": np.ones((4, 2)) * 0.25},
                      meta={"digest": "abc", "device": "cpu"})


def _same(a: Trajectory, b: Trajectory) -> None:
    # (a status without reached_t is stored with its end time t[-1])
    assert (a.kind, a.name, a.modes, a.t50, a.t10, a.status.complete, a.status.error, a.end_t, dict(a.meta)) == \
        (b.kind, b.name, b.modes, b.t50, b.t10, b.status.complete, b.status.error, b.end_t, dict(b.meta))
    for key in ("t", "loss", "f", "lambda", "r", "in_support_loss", "f_stderr"):
        x, y = a.get(key), b.get(key)
        assert (x is None) == (y is None), key
        if x is not None:
            np.testing.assert_array_equal(x, y)
    assert set(a.arrays) == set(b.arrays)
    for k in a.arrays:
        np.testing.assert_array_equal(a.arrays[k], b.arrays[k])


def test_trajectory_round_trip_json_and_npz(tmp_path):
    tr = _mlp()
    path = tr.save(tmp_path)
    data = json.loads(path.read_text())
    # theory §6 keys of mlp.json, closure diagnostics nested as "lambda_parts": {"readout": ...}
    assert {"modes", "t", "loss", "in_support_loss", "t50", "t10", "f", "f_stderr", "lambda", "r", "a2"} <= set(data)
    assert set(data["lambda_parts"]) == {"readout"}
    _same(Trajectory.load(tmp_path, "mlp"), tr)
    with np.load(tmp_path / "mlp.npz") as z:
        np.testing.assert_array_equal(z["lambda_parts/readout"], tr.arrays["lambda_parts/readout"])
        assert list(z["modes"]) == list(tr.modes)


def test_ode_result_round_trip_keeps_a_failed_variant(tmp_path):
    res = ODEResult(("z0", "z0*z1"), np.array([1.0, 0.5]), {"lazy": _ode(), "agop": _ode("agop", "diverged at t=3")},
                    basis="extended", t_max=10.0)
    res.save(tmp_path)
    data = json.loads((tmp_path / "ode.json").read_text())
    assert set(data) >= {"modes", "target", "variants"} and data["variants"]["agop"]["error"] == "diverged at t=3"
    assert {"t", "loss", "t50", "t10", "f", "lambda"} <= set(data["variants"]["lazy"])
    back = ODEResult.load(tmp_path)
    assert back.errors == {"agop": "diverged at t=3"} and (back.basis, back.t_max) == ("extended", 10.0)
    for name in res.variants:
        _same(back.variants[name], res.variants[name])


def test_files_of_the_earlier_layout_load(tmp_path):
    """mlp.json as the simulator wrote it before Trajectory (no "kind"), and ode.json as solve_config wrote it."""
    f = [[0.0, 0.0], [0.3, 0.1], [0.6, 0.4]]
    legacy_mlp = {"modes": ["z0", "z0*z1"], "target": [0.7, 0.7], "t": [0.0, 1.0, 2.0], "loss": [0.5, 0.3, 0.1],
                  "loss_ratio": [1.0, 0.6, 0.2], "in_support_loss": [1.0, 0.6, 0.2], "t50": 1.3, "t10": None,
                  "f": f, "f_stderr": f, "lambda": f, "r": [[1.0] * 3] * 3, "eta": [0.1, 0.1, 0.1],
                  "lambda_top": [2.0, 2.0, 2.0], "steps": [0, 10, 20], "reached_t": 2.0, "complete": True,
                  "t_max": 2.0, "device": "cpu", "dtype": "float32", "compiled": True, "wall_s": 1.0,
                  "batch_runs": 1, "n_test": 100, "digest": "0123"}
    (tmp_path / "mlp.json").write_text(json.dumps(legacy_mlp))
    write_npz(tmp_path / "mlp.npz", {"t": np.array(legacy_mlp["t"])})
    mlp = Trajectory.load(tmp_path, "mlp")
    assert (mlp.kind, mlp.name, mlp.meta["digest"], mlp.status) == ("mlp", "mlp", "0123", Status(True, 2.0, None))
    np.testing.assert_array_equal(mlp.arrays["steps"], [0, 10, 20])
    np.testing.assert_array_equal(mlp.in_support_loss, [1.0, 0.6, 0.2])
    entry = {"t": [0.0, 1.0, 2.0], "loss": [1.0, 0.5, 0.2], "t50": 1.0, "t10": None, "f": f, "lambda": f,
             "D": f, "r": [[1.0] * 3] * 3, "s": [1.0, 1.0, 1.0], "info": {"method": "LSODA"}}
    legacy_ode = {"modes": ["z0", "z0*z1"], "target": [0.7, 0.7], "eigenvalues": "exact", "basis": "target",
                  "t_max": 2.0, "variants": {"lazy": entry, "displacement": {**entry, "error": "non-finite state"}}}
    (tmp_path / "ode.json").write_text(json.dumps(legacy_ode))
    write_npz(tmp_path / "ode.npz", {"modes": np.array(["z0", "z0*z1"])})
    ode = ODEResult.load(tmp_path)
    assert ode.variants["lazy"].kind == "ode" and ode.variants["lazy"].meta["info"] == {"method": "LSODA"}
    assert ode.errors == {"displacement": "non-finite state"}
    np.testing.assert_array_equal(ode.variants["lazy"].arrays["D"], f)


@pytest.mark.parametrize("damage", ["truncated_json", "not_an_object", "ragged", "missing_npz", "truncated_npz"])
def test_damaged_files_are_refused(tmp_path, damage):
    _mlp().save(tmp_path)
    js, npz = tmp_path / "mlp.json", tmp_path / "mlp.npz"
    if damage == "truncated_json":
        js.write_text(js.read_text()[:200])
    elif damage == "not_an_object":
        js.write_text("[1, 2]")
    elif damage == "ragged":
        data = json.loads(js.read_text())
        data["f"][1] = [0.1]
        js.write_text(json.dumps(data))
    elif damage == "missing_npz":
        npz.unlink()
    else:
        npz.write_bytes(npz.read_bytes()[:100])
    with pytest.raises(TrajectoryFileError, match="mlp"):
        Trajectory.load(tmp_path, "mlp")


def test_damaged_ode_result_is_refused(tmp_path):
    ODEResult(("z0",), np.array([1.0]), {"lazy": _ode()}).save(tmp_path)
    write_json(tmp_path / "ode.json", {"modes": ["z0"]})  # no "variants"
    with pytest.raises(TrajectoryFileError, match="ode.json does not hold ODE results"):
        ODEResult.load(tmp_path)
    (tmp_path / "ode.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(TrajectoryFileError, match="ode.npz is damaged"):
        ODEResult.load(tmp_path)


def test_write_json_layout_round_trips_and_keeps_series_on_one_line(tmp_path):
    """write_json: any nesting of objects and lists reads back equal with json.load (NaN/inf as null, NumPy
    arrays as lists); objects are indented, a list of numbers takes one line."""
    import json

    from featureode.results.trajectory import write_json
    obj = {"a": np.array([1.0, np.nan, np.inf, -2.5]), "b": {"c": [{"x": np.float32(1.5)}, {"y": []}], "d": {}},
           "e": np.arange(6).reshape(2, 3), "f": [[1, [2, 3]], [4]], "g": "text", "h": None, "i": [True, False]}
    want = {"a": [1.0, None, None, -2.5], "b": {"c": [{"x": 1.5}, {"y": []}], "d": {}},
            "e": [[0, 1, 2], [3, 4, 5]], "f": [[1, [2, 3]], [4]], "g": "text", "h": None, "i": [True, False]}
    write_json(tmp_path / "x.json", obj)
    text = (tmp_path / "x.json").read_text()
    assert json.loads(text) == want
    assert ' "a": [1.0, null, null, -2.5],' in text.splitlines()
    write_json(tmp_path / "y.json", obj, indent=None)
    assert json.loads((tmp_path / "y.json").read_text()) == want and "\n" not in (tmp_path / "y.json").read_text()
