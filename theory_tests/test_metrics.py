"""Curve metrics of theory §5 and the Ratio of two crossing times, against closed forms and hand-computed cases."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from featureode.results.metrics import Ratio, crossing_time, curve_metrics, in_support_loss

T = np.concatenate([[0.0], np.logspace(-2, 2, 81)])


def test_crossing_time_recovers_exponential_exactly():
    t = np.concatenate([[0.0], np.logspace(-2, 1, 37)])
    loss = np.exp(-t)
    # log L is linear in t, so log-linear interpolation is exact: t50 = ln 2, t10 = ln 10
    assert crossing_time(t, loss, 0.5) == pytest.approx(math.log(2), rel=1e-12)
    assert crossing_time(t, loss, 0.1) == pytest.approx(math.log(10), rel=1e-12)
    assert crossing_time(t, loss, 1e-9) is None


def test_in_support_loss_leaves_out_extended_modes():
    v = [0.6, 0.8, 0.0]  # third mode: an extended-basis mode outside the target's support
    f = np.array([[0.0, 0.0, 0.0], [0.3, 0.4, 0.5], [0.6, 0.8, -0.2]])
    # by hand: (0.36 + 0.64)/1, (0.09 + 0.16)/1, 0
    np.testing.assert_allclose(in_support_loss(f, v), [1.0, 0.25, 0.0], atol=1e-15)


def test_relative_loss_by_hand_and_its_compiled_twin():
    """One loss: L/L(0) by hand on the full mode set, and the integrator's scalar loop (what numba compiles; run here
    as Python) gives the same numbers on random states."""
    from featureode.ode.integrate import _relative_loss
    from featureode.results.metrics import relative_loss

    v = np.array([0.6, 0.8, 0.0])
    f = np.array([[0.0, 0.0, 0.0], [0.3, 0.4, 0.5], [0.6, 0.8, -0.2]])
    # by hand: 1, (0.09 + 0.16 + 0.25)/1, 0.04/1
    np.testing.assert_allclose(relative_loss(f, v), [1.0, 0.5, 0.04], atol=1e-15)
    rng = np.random.default_rng(3)
    for _ in range(5):
        v, y = rng.normal(size=4), rng.normal(size=8)   # y = (f, D): the loss reads f = y[:M]
        assert _relative_loss(v, y) == pytest.approx(float(relative_loss(y[:4], v)), rel=1e-14)


def test_ratio_of_crossings_hand_cases():
    # both cross: exact
    r = Ratio.of_crossings(3.0, 10.0, 2.0, 10.0)
    assert r == Ratio(1.5, 1.5) and r.is_exact and r.value == 1.5
    # only the reference crosses (at 2); the other ends at 5 without crossing: its crossing is later, ratio > 5/2
    r = Ratio.of_crossings(None, 5.0, 2.0, 10.0)
    assert (r.lo, r.hi) == (2.5, math.inf) and not r.is_exact and r.value is None
    # only the first crosses (at 3); the reference ends at 4 without: ratio < 3/4
    r = Ratio.of_crossings(3.0, 10.0, None, 4.0)
    assert (r.lo, r.hi) == (0.0, 0.75)
    # neither crosses, a reference crossing at 0, or a non-crossing curve that ends at t = 0: nothing is known
    for args in ((None, 5.0, None, 4.0), (3.0, 10.0, 0.0, 10.0), (None, 0.0, 2.0, 10.0), (3.0, 10.0, None, 0.0)):
        assert Ratio.of_crossings(*args).is_unknown


def test_ratio_text():
    cases = [(Ratio.unknown(), "—"), (Ratio.exact(1.25), "1.25"), (Ratio(0.0, 0.4967), "< 0.497"),
             (Ratio(4.031, math.inf), "> 4.03"), (Ratio(0.5, 0.75), "[0.5, 0.75]")]
    assert [r.text() for r, _ in cases] == [text for _, text in cases]


def test_ratio_in_band_verdicts():
    band = (0.75, 1.30)
    assert Ratio.exact(1.0).in_band(*band) is True
    assert Ratio.exact(1.31).in_band(*band) is False
    assert Ratio.exact(0.75).in_band(*band) is True  # closed band
    assert Ratio(0.0, 0.49).in_band(*band) is False  # below 0.49: outside
    assert Ratio(0.0, 0.9).in_band(*band) is None  # below 0.9: could be either
    assert Ratio(1.4, math.inf).in_band(*band) is False  # above 1.4: outside
    assert Ratio(1.0, math.inf).in_band(*band) is None
    assert Ratio(0.8, 1.2).in_band(*band) is True  # a bounded interval inside the band
    assert Ratio.unknown().in_band(*band) is None


@given(lo=st.floats(0, 10), width=st.floats(0, 10), infinite=st.booleans(),
       a=st.floats(0.1, 5), b=st.floats(0.1, 5))
def test_ratio_in_band_agrees_with_every_value_it_allows(lo, width, infinite, a, b):
    """A verdict True/False must hold for every ratio the Ratio allows (its value when exact; a bound excludes its
    end, since the curve that did not cross would cross later): check it on a grid of allowed values."""
    r = Ratio(lo, math.inf if infinite else lo + width)
    band = (min(a, b), max(a, b))
    verdict = r.in_band(*band)
    top = r.hi if math.isfinite(r.hi) else r.lo + 100
    inside = [band[0] <= x <= band[1] for x in np.linspace(r.lo, top, 201)]
    if verdict is True:
        assert all(inside)
    elif verdict is False:
        assert not inside[0] if r.is_exact else not any(inside[1:-1])


def test_ratio_json_round_trip_matches_the_stored_form():
    # the form report.json has always stored: [lo, hi] with null for ∞, null for no information
    for r, stored in ((Ratio.exact(1.2), [1.2, 1.2]), (Ratio(0.0, 0.5), [0.0, 0.5]),
                      (Ratio(2.0, math.inf), [2.0, None]), (Ratio.unknown(), None)):
        assert r.to_json() == stored and Ratio.from_json(stored) == r
    assert Ratio.from_entry({"t10_ratio": None, "t10_ratio_range": [0.0, 0.5]}, "t10_ratio") == Ratio(0.0, 0.5)
    assert Ratio.from_entry({"t10_ratio": 0.9}, "t10_ratio") == Ratio.exact(0.9)
    assert Ratio.from_entry({"t10_ratio": None}, "t10_ratio").is_unknown
    with pytest.raises(ValueError, match="0 ≤ lo ≤ hi"):
        Ratio(2.0, 1.0)


def test_curve_metrics_of_time_rescaled_curve():
    ref = np.exp(-T)
    ode = np.exp(-T / 1.2)  # the same curve slowed by 1.2: every crossing ratio is 1.2
    m = curve_metrics(T, ode, T, ref)
    assert m.t50 == pytest.approx(1.2 * math.log(2), rel=1e-10)
    assert m.t50_ratio.value == pytest.approx(1.2, rel=1e-10) and m.t10_ratio.value == pytest.approx(1.2, rel=1e-10)
    mask = (ref > 1e-2) & (T > 0)
    assert m.log_rms == pytest.approx(np.sqrt(np.mean((T[mask] - T[mask] / 1.2) ** 2)), rel=1e-9)


def test_ratio_of_truncated_curves_contains_the_true_ratio():
    """Exponential curves L = exp(−t/τ) cross 10% at τ ln 10, so the true t10 ratio is τ_ode/τ_mlp. Cut one curve
    before it crosses: the ratio is then unknown, and the range must bound it by the end of the cut curve."""
    mlp, ode = np.exp(-T / 3.0), np.exp(-T / 1.5)  # true ratios 0.5
    cut = T <= 4.0  # the MLP ends at t = 4 < 3 ln 10 ≈ 6.9, the ODE crosses at 1.5 ln 10 ≈ 3.45
    m = curve_metrics(T, ode, T[cut], mlp[cut])
    r = m.t10_ratio
    assert r.value is None and r.lo == 0.0 and r.hi == pytest.approx(1.5 * math.log(10) / T[cut][-1], rel=1e-12)
    assert r.lo < 0.5 < r.hi
    assert m.t50_ratio.value == pytest.approx(0.5, rel=1e-10)  # both cross 50% before t = 4
    r = curve_metrics(T[cut], mlp[cut], T, ode).t10_ratio  # now the *ODE* is cut and slower: ratio > t_end/t10
    assert math.isinf(r.hi) and r.lo == pytest.approx(T[cut][-1] / (1.5 * math.log(10)), rel=1e-12) and r.lo < 2.0
    assert curve_metrics(T[cut], mlp[cut], T[cut], mlp[cut] ** 0.5).t10_ratio.is_unknown  # neither crosses 10%
    m = curve_metrics(T, ode, [0.0], [1.0])  # a reference that ends at t = 0 bounds nothing
    assert m.t10_ratio.is_unknown and m.t50_ratio.is_unknown and m.log_rms is None
    assert m.to_json()["t10_ratio_range"] is None
