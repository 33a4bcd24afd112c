"""SLO parsing as `vllm bench serve --goodput` takes it, and judging rows against it."""

from __future__ import annotations

import pandas as pd
import pytest

from specgauge.reports.planning.slo import SLOError, parse_slo


def test_parses_vllm_goodput_spelling():
    slo = parse_slo(["ttft:200", "tpot:50"])
    assert [o.column for o in slo.objectives] == ["p99_ttft_ms", "p99_tpot_ms"]
    assert str(slo) == "ttft:200 tpot:50"
    assert [o.column for o in parse_slo("mean_itl:30,median_e2el_ms:4000").objectives] == ["mean_itl_ms", "median_e2el_ms"]


@pytest.mark.parametrize("term, message", [
    ("latency:200", "unknown SLO metric 'latency'"),
    ("ttft", "not METRIC:MILLISECONDS"),
    ("ttft:fast", "not a number"),
    ("tpot:-3", "positive"),
])
def test_bad_terms_name_the_problem(term, message):
    with pytest.raises(SLOError, match=message):
        parse_slo([term])


def test_duplicate_bounds_are_refused():
    with pytest.raises(SLOError, match="twice"):
        parse_slo(["ttft:1", "p99_ttft:2"])


def test_met_requires_every_bound_and_treats_missing_as_failed():
    frame = pd.DataFrame({"p99_ttft_ms": [100, 300, None], "p99_tpot_ms": [40, 40, 10]})
    assert parse_slo(["ttft:200", "tpot:50"]).met(frame).tolist() == [True, False, False]
    assert parse_slo(None).met(frame).all()
