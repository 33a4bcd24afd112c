"""`--acceptance`: a number, a list, a named profile, a vLLM result JSON."""

from __future__ import annotations

import json

import pytest

from specgauge.reports.planning.measured_rates import AcceptanceError, load_profiles, parse_acceptance


def test_single_alpha_and_per_position_list():
    assert parse_acceptance("0.8").rates == (0.8,)
    spec = parse_acceptance("0.9, 0.8,0.7")
    assert spec.rates == (0.9, 0.8, 0.7) and spec.per_position and spec.label == "0.9|0.8|0.7"


def test_every_profile_loads_and_names_its_source():
    profiles = load_profiles()
    assert "t5-ende-greedy" in profiles
    for name in profiles:
        spec = parse_acceptance(name)
        assert "source" not in spec.source and len(spec.source) > 20
    assert parse_acceptance("seed-six-token").rates == (0.9,)


def test_vllm_json_per_position_rates_become_conditional(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"spec_decode_acceptance_rate": 71.7,
                                "spec_decode_per_position_acceptance_rates": [0.9, 0.72, 0.504]}))
    spec = parse_acceptance(str(path))
    assert spec.rates == pytest.approx((0.9, 0.8, 0.7))
    assert "made conditional" in spec.source


def test_vllm_json_percent_lists_and_aggregate_rate(tmp_path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"spec_decode_per_position_acceptance_rates": [80.0, 40.0]}))
    assert parse_acceptance(str(a)).rates == pytest.approx((0.8, 0.5))
    b = tmp_path / "b.json"
    b.write_text(json.dumps({"spec_decode_acceptance_rate": 65.0}))
    assert parse_acceptance(str(b)).rates == pytest.approx((0.65,))
    b.write_text(json.dumps({"spec_decode_acceptance_rate": 65.0, "spec_decode_per_position_acceptance_rates": []}))
    with pytest.raises(AcceptanceError, match="is empty"):   # an empty list is refused, not read as the rate alone
        parse_acceptance(str(b))


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    ('{"request_throughput": 3}', "neither"),
    ('{"spec_decode_per_position_acceptance_rates": ["x"]}', "not a list of numbers"),
    ('{"spec_decode_per_position_acceptance_rates": [0.5, 0.7]}', "rises"),
])
def test_malformed_vllm_json_is_one_clear_error(tmp_path, content, message):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(AcceptanceError, match=message):
        parse_acceptance(str(path))


@pytest.mark.parametrize("text, message", [
    ("no-such-profile", "unknown acceptance"),
    ("1.2", r"\[0, 1\]"),
    ("0.9,x", "numbers only"),
    ("missing.json", "cannot read"),
])
def test_bad_acceptance(text, message):
    with pytest.raises(AcceptanceError, match=message):
        parse_acceptance(text)


@pytest.mark.parametrize("content, message", [
    ({"spec_decode_per_position_acceptance_rates": [1.2, 0.9, 0.7]}, "mixes values above 1"),
    ({"spec_decode_acceptance_rate": 0.8}, "vLLM writes it as a percentage"),
])
def test_fractions_and_percentages_that_cannot_be_told_apart_are_refused(tmp_path, content, message):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(content))
    with pytest.raises(AcceptanceError, match=message):
        parse_acceptance(str(path))
