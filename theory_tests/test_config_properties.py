"""Config validation as properties (hypothesis): random valid configs load with their values, random invalid ones raise
a ConfigError naming the key; run-time-only keys leave a config's digest alone, every other key changes it.

The valid ranges are written out here by hand from what each key means (theory §1–§4 and the simulator's use of
it), not read from ``featureode.config.RULES``, so a rule that drifts from its meaning fails here.
"""
from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from featureode.config import RUNTIME_KEYS, SECTIONS, ConfigError, config_from_dict

INF = math.inf
# (section, key): (kind, low, high, low_open, high_open); kind "int" or "float"
NUMERIC = {
    ("data", "dim"): ("int", 1, 10**7, False, False),           # d numbers per sample, weight and spectrum
    ("data", "exponent"): ("float", 0, 5, False, False),        # g_i non-increasing needs exponent ≥ 0
    ("data", "offset"): ("float", 0, 50, True, False),          # (i + offset) > 0 at i = 0
    ("network", "width"): ("int", 1, 10**6, False, False),
    ("network", "richness"): ("float", 0, 10, True, False),     # γ > 0
    ("network", "bias_std"): ("float", 0, 10, False, False),
    ("training", "batch"): ("int", 1, 10**6, False, False),
    ("training", "t_max"): ("float", 1.0, 1e6, True, False),    # > 0; kept above the default t_min = 0.1
    ("training", "seed"): ("int", 0, 2**32, False, True),       # 32-bit seeds (larger ones would repeat)
    ("training", "eta_max"): ("float", 0, 100, True, False),
    ("training", "eta_safety"): ("float", 0, 100, True, False),  # > 0 (≥ 2 diverges: the simulator's tests use it)
    ("training", "ntk_every"): ("int", 1, 10**6, False, False),
    ("training", "ntk_probe"): ("int", 1, 10**5, False, False),
    ("training", "max_steps"): ("int", 1, 10**9, False, False),
    ("training", "n_test"): ("int", 1, 10**7, False, False),
    ("training", "n_points"): ("int", 1, 10**4, False, False),
    ("training", "t_min"): ("float", 0, 0.5, True, False),      # > 0; kept below the default t_max
    ("training", "checkpoint_every"): ("int", 0, 10**6, False, False),
    ("training", "threads"): ("int", 0, 256, False, False),
    ("training", "stop_loss"): ("float", 0, 1, False, True),    # a floor on L/L(0) in [0, 1)
    ("ode", "kappa"): ("float", 0, 100, False, False),
    ("ode", "extended_degree"): ("int", 0, 6, False, False),
    ("ode", "extended_max_modes"): ("int", 1, 5000, False, False),    # a stated limit (Gram cost)
    ("ode", "rtol"): ("float", 0, 1, True, True),
    ("ode", "atol"): ("float", 0, 1, True, False),
    ("ode", "n_points"): ("int", 2, 10**5, False, False),        # t = 0 and at least one more time
}
CHOICES = {
    ("network", "parametrization"): ["meanfield"],
    ("training", "device"): ["auto", "cpu"],  # "cuda" needs a GPU at run time, it is still a valid name
    ("training", "dtype"): ["float32", "float64"],
    ("ode", "eigenvalues"): ["exact", "hea"],
    ("ode", "basis"): ["target", "extended"],
    ("ode", "method"): ["RK45", "RK23", "DOP853", "Radau", "BDF", "LSODA"],
    ("ode", "backend"): ["numpy", "numba"],
}
BOOLS = [("target", "normalize"), ("training", "compile"), ("training", "exact_loss"), ("ode", "scale")]
BASE = {"target": {"expr": "z0"}}


def _inside(kind, lo, hi, lo_open, hi_open):
    if kind == "int":
        return st.integers(lo + lo_open, hi - hi_open)
    return st.floats(lo, hi, exclude_min=lo_open, exclude_max=hi_open, allow_nan=False)


#: keys with an upper end that is refused above it
UPPER = {("data", "dim"), ("training", "seed"), ("training", "stop_loss"), ("ode", "rtol")}


#: keys whose lower end in NUMERIC is a margin kept for other defaults, with the value at which they are refused
#: (t_max > 0: 1.0 only keeps random valid configs above the default t_min = 0.1, and t_max = 1.0 is valid)
REFUSED_AT = {("training", "t_max"): 0.0}


def _outside(kind, lo, hi, lo_open, hi_open, key=None):
    """Values that are wrong for the key: below the range, non-finite, non-numbers, fractions for integers, and
    above the range for the keys of ``UPPER``."""
    below = st.just(REFUSED_AT[key]) if key in REFUSED_AT else st.just(lo) if lo_open else (st.integers(lo - 10**6, lo - 1) if kind == "int"
                                          else st.floats(lo - 1e6, lo, exclude_max=True))
    wrong = [below, st.just(math.nan), st.just(INF), st.just(-INF), st.just(True), st.just("1"),
             st.just([1]), st.just(None)]
    if key in UPPER:
        wrong.append(st.just(hi) if hi_open else (st.integers(hi + 1, hi * 10) if kind == "int"
                                                   else st.floats(hi, hi * 10, exclude_min=True)))
    if kind == "int":
        wrong.append(st.floats(lo + 0.01, lo + 100, allow_nan=False).filter(lambda x: not x.is_integer()))
    return st.one_of(wrong)


def _raw(extra: dict) -> dict:
    raw = {sec: dict(vals) for sec, vals in BASE.items()}
    for (sec, key), value in extra.items():
        raw.setdefault(sec, {})[key] = value
    return raw


valid_entries = st.dictionaries(
    st.sampled_from(sorted(NUMERIC) + sorted(CHOICES) + BOOLS),
    st.just(None), max_size=8).flatmap(
    lambda keys: st.fixed_dictionaries({k: (_inside(*NUMERIC[k]) if k in NUMERIC else
                                            st.sampled_from(CHOICES[k]) if k in CHOICES else st.booleans())
                                        for k in keys}))


@given(valid_entries)
def test_random_valid_configs_load_with_their_values(entries: dict) -> None:
    cfg = config_from_dict(_raw(entries))
    for (sec, key), value in entries.items():
        got = getattr(getattr(cfg, sec), key)
        assert got == value
        if (sec, key) in NUMERIC:
            assert type(got) is (int if NUMERIC[sec, key][0] == "int" else float)
    again = config_from_dict(cfg.to_dict())
    assert again.to_dict() == cfg.to_dict() and again.digest() == cfg.digest()


@given(st.sampled_from(sorted(NUMERIC)).flatmap(lambda k: st.tuples(st.just(k), _outside(*NUMERIC[k], key=k))))
def test_random_invalid_numbers_name_the_key(case) -> None:
    (sec, key), value = case
    if key == "kappa" and value is None:
        return  # absent κ is valid: it is derived
    with pytest.raises(ConfigError) as err:
        config_from_dict(_raw({(sec, key): value}))
    msg = str(err.value)
    assert f"[{sec}] {key}" in msg and "\n" not in msg, msg


@given(st.sampled_from(sorted(CHOICES)), st.text(min_size=1, max_size=12))
def test_unknown_names_are_refused_with_the_key(key, name) -> None:
    sec, k = key
    if name in CHOICES[key] or re.fullmatch(r"cuda(:\d+)?", name):
        return
    with pytest.raises(ConfigError, match=re.escape(f"[{sec}] {k}")):
        config_from_dict(_raw({key: name}))


@pytest.mark.parametrize("key, value, suggestion", [
    (("ode", "method"), "lsoda", "LSODA"), (("ode", "backend"), "numbaa", "numba"), (("ode", "basis"), "extend",
                                                                                       "extended"),
    (("ode", "eigenvalues"), "exat", "exact"), (("training", "dtype"), "float33", "float32"),
    (("training", "device"), "cdua", "cuda"), (("network", "parametrization"), "mean-field", "meanfield")])
def test_unknown_names_suggest_the_closest(key, value, suggestion) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"did you mean {suggestion!r}")):
        config_from_dict(_raw({key: value}))


@pytest.mark.parametrize("value, expected", [(1e3, 1000), (2048.0, 2048), (7, 7)])
def test_whole_floats_read_as_integers(value, expected) -> None:
    """TOML writes 1e3 as a float: a whole number is accepted as the integer it is; 1.5 is not."""
    cfg = config_from_dict(_raw({("network", "width"): value}))
    assert cfg.network.width == expected and type(cfg.network.width) is int
    with pytest.raises(ConfigError, match=r"\[network\] width must be an integer ≥ 1, got 1.5"):
        config_from_dict(_raw({("network", "width"): 1.5}))


@pytest.mark.parametrize("raw, needle", [
    ({"training": {"t_min": 5.0, "t_max": 2.0}}, "[training] t_min = 5 must be below t_max = 2"),
    ({"ode": {"variants": []}}, "[ode] variants is empty"),
    ({"ode": {"variants": ["lazzy"]}}, "unknown variant 'lazzy'"),
    ({"ode": {"variants": "lazy"}}, "[ode] variants must be a list"),
    ({"ode": {"variants": [1]}}, "[ode] variants must be a list of names"),
    ({"ode": {"ablate": ["nope"]}}, "unknown term 'nope'"),
    ({"target": {"expr": "z0 + foo"}}, "[target] expr"),
    ({"target": {"expr": "z16"}}, "z16 at position 0 is out of range for d = 16"),
    ({"target": {"expr": 3}}, "[target] expr must be a string"),
    ({"target": {"expr": "z0", "normalize": "yes"}}, "[target] normalize must be true or false"),
    ({"network": {"activation": "relux"}}, "[network] activation: unknown activation 'relux'"),
    ({"data": {"eigenvalues": [0.5, 0.5], "covariance": [[1, 0], [0, 1]], "dim": 2}}, "keep one of them"),
    ({"data": {"eigenvalues": [0.5, 0.5], "dim": 2, "exponent": 2.0}}, "[data] exponent would be ignored"),
    ({"data": {"eigenvalues": "0.5, 0.5", "dim": 2}}, "[data] eigenvalues must be a list"),
    ({"ode": {"custom": []}}, "[ode] custom must be a table"),
    ({"network": []}, "[network] must be a table"),
])
def test_cross_key_and_type_errors_name_the_key(raw, needle) -> None:
    raw = {"target": {"expr": "z0*z1"}, **raw}
    with pytest.raises(ConfigError, match=re.escape(needle)) as err:
        config_from_dict(raw)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------------------------------
# folder identity
# ------------------------------------------------------------------------------------------------------------------
def test_runtime_keys_are_the_documented_ones() -> None:
    assert set(RUNTIME_KEYS) == {"training.checkpoint_every", "training.threads", "training.compile",
                                 "training.device"}


@given(st.integers(0, 10**5), st.integers(0, 64), st.booleans(), st.sampled_from(["auto", "cpu"]))
def test_runtime_keys_do_not_change_the_digest(every, threads, compile_, device) -> None:
    """On this CPU-only test machine "auto" resolves to the CPU, so it is one identity with "cpu"."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("auto resolves to CUDA here")
    base = config_from_dict(BASE)
    other = base.replace(training={"checkpoint_every": every, "threads": threads, "compile": compile_,
                                   "device": device})
    sections = ("data", "target", "network", "training")
    assert other.digest() == base.digest() and other.digest(sections) == base.digest(sections)


def test_cpu_and_cuda_are_different_identities() -> None:
    """CUDA runs differ from CPU runs beyond round-off order (other kernels and batching): another digest, with no
    GPU needed to compute it; asking for CUDA where there is none is a config error at run time."""
    from featureode.config import resolved_device

    torch = pytest.importorskip("torch")
    base = config_from_dict(BASE)
    cuda = [base.replace(training={"device": d}).digest() for d in ("cuda", "cuda:0", "cuda:1")]
    assert len(set(cuda)) == 1 and cuda[0] != base.digest()
    if not torch.cuda.is_available():
        assert resolved_device("auto") == "cpu"
        with pytest.raises(ConfigError, match=r"device = 'cuda:1' but CUDA is not available"):
            resolved_device("cuda:1")


@given(st.sampled_from(sorted(NUMERIC) + sorted(CHOICES) + BOOLS), st.data())
def test_every_other_key_changes_the_digest(key, data) -> None:
    sec, k = key
    base = config_from_dict(BASE)
    old = getattr(getattr(base, sec), k)
    if key in NUMERIC:
        new = data.draw(_inside(*NUMERIC[key]).filter(lambda v: v != old))
    elif key in CHOICES:
        if key == ("training", "device"):
            return  # a run-time key
        if len(CHOICES[key]) == 1:
            return
        new = data.draw(st.sampled_from([c for c in CHOICES[key] if c != old]))
    else:
        new = not old
    if f"{sec}.{k}" in RUNTIME_KEYS:
        return
    assert base.replace(**{sec: {k: new}}).digest() != base.digest()
    if sec != "ode":  # the MLP's identity ignores [ode]
        assert base.replace(**{sec: {k: new}}).digest(("data", "target", "network", "training")) != \
            base.digest(("data", "target", "network", "training"))


def test_digest_of_a_suite_run_is_unchanged() -> None:
    """A config as the validation suites write it (threads = 1; here the quick suite's z0*z1, γ = 0.5 case at
    t_max = 250) keeps the digests it had before the run-time keys left the hash (main at commit 8e2c03b), so the
    suites' run folders stay valid; other run-time values now share them. ``[ode] method`` is pinned to the solver
    of that time (the default is now the compiled ``rodas4``, so a suite's ODE reports are recomputed while the
    MLP digest, the expensive part, is unchanged whatever the ODE settings)."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("device = auto resolves to CUDA here: another identity")
    raw = {"data": {"exponent": 1.5, "offset": 3.0, "dim": 8}, "target": {"expr": "z0*z1"},
           "network": {"activation": "relu", "width": 256, "bias_std": 0.5, "richness": 0.5},
           "training": {"batch": 512, "seed": 0, "n_test": 4000, "n_points": 30, "stop_loss": 0.005, "threads": 1,
                        "t_max": 250.0},
           "ode": {"variants": ["lazy", "displacement"], "method": "LSODA"}}
    for runtime in ({}, {"threads": 0, "compile": False, "checkpoint_every": 0, "device": "cpu"}):
        cfg = config_from_dict(raw).replace(training=runtime)
        assert cfg.digest() == "55f4029346730335"
        assert cfg.digest(("data", "target", "network", "training")) == "885a250b3c1c56a4"
    # exact_loss = false (the default) is left out of the hash as the default lr_scale is; true is a new identity
    assert config_from_dict(raw).replace(training={"exact_loss": False}).digest() == "55f4029346730335"
    assert config_from_dict(raw).replace(training={"exact_loss": True}).digest() != "55f4029346730335"


def test_every_key_is_covered_here() -> None:
    """Each key of every table is either given a range above or is a list/table/string checked elsewhere."""
    others = {("data", "eigenvalues"), ("data", "covariance"), ("target", "expr"), ("network", "activation"),
              ("ode", "variants"), ("ode", "ablate"), ("ode", "custom"),
              ("training", "lr_scale")}  # a table {a, w, b}: theory_tests/test_lr_scale.py
    keys = {(sec, f) for sec, cls in SECTIONS.items() for f in cls.__dataclass_fields__}
    assert keys == set(NUMERIC) | set(CHOICES) | set(BOOLS) | others
