"""Published runs past the server's capacity (``regime`` overloaded): out of every steady-state
residual pool, and checked instead as a capacity question (``folds.overload_check``)."""

from __future__ import annotations

import io
import tempfile

import pandas as pd
import pytest

from specgauge.reports.planning import folds as F
from specgauge.reports.planning import validation as V

OVERLOADED = {"llmd-qwen32b-q8", "llmd-qwen32b-q16"}


@pytest.fixture(scope="module")
def sweep() -> pd.DataFrame:
    """[23]'s rate ladder: stable at 1, 2 and 4 requests/s, overloaded at 8 and 16."""
    table = V.shipped_table()
    return table[table["fit_group"] == "llmd-qwen32b"].reset_index(drop=True)


def test_the_shipped_overloaded_rows_are_the_ones_their_source_served_short(sweep):
    assert set(V.overloaded_rows(sweep)["id"]) == OVERLOADED
    assert OVERLOADED.isdisjoint(V.steady_rows(sweep)["id"])
    curve, = F.runs_curves(sweep)    # the user-runs curve ends at the last steady load
    assert curve["qps"].astype(float).tolist() == [1.0, 2.0, 4.0]


def test_an_overloaded_row_leaves_every_residual_pool(sweep):
    folds = sweep.assign(variant="prior", role="predicted", ratio=0.1, simulated=1.0, alpha_used=0.7,
                         draft_kind="eagle", kind="dense", profile="prior", load=64.0)
    ids = set(V.residuals(folds, sweep)["id"])
    assert ids == set(sweep["id"]) - OVERLOADED
    assert set(V.residuals(folds.iloc[:0], sweep, own=folds.assign(variant="user"))["id"]) == ids


def test_a_regime_is_checked_at_the_door(sweep):
    def check(frame: pd.DataFrame) -> None:
        text = io.StringIO()
        frame.to_csv(text, index=False)
        V.check_table(pd.read_csv(io.StringIO(text.getvalue()), dtype=str, keep_default_na=False), "rows")

    with pytest.raises(V.ValidationInputError, match="regime 'busy'"):
        check(sweep.assign(regime="busy"))
    with pytest.raises(V.ValidationInputError, match="needs arrival poisson"):
        check(sweep.assign(arrival="closed", qps="", regime="overloaded"))
    with pytest.raises(V.ValidationInputError, match="names an overloaded row"):
        check(sweep.assign(alpha=["calibrate"] + ["row:llmd-qwen32b-q8"] * (len(sweep) - 1)))


def test_the_planner_is_asked_whether_the_rate_is_past_capacity(sweep):
    checks, brackets = F.overload_check(sweep, tempfile.mkdtemp(), ({}, {}, {}))
    assert set(checks["id"]) == OVERLOADED and set(checks["arm"]) == {"no speculation", "speculation"}
    assert checks["beyond"].all()      # a known outcome on this sweep, not a tuned one: a miss must show
    assert brackets[["stable_qps", "overloaded_qps"]].drop_duplicates().values.tolist() == [[4.0, 8.0]]
    assert (brackets["capacity_rps"] > 0).all()


@pytest.fixture(scope="module")
def mtp_sweep() -> pd.DataFrame:
    """[25]'s rate ladder, whose engine runs at most 128 requests at once: 1-4 requests/s steady,
    6 and 8 past the cap by its own figures."""
    table = V.shipped_table()
    return table[table["fit_group"] == "vllm-mtp-r1"].reset_index(drop=True)


def test_little_s_law_on_a_row_s_own_figures_counts_its_requests_in_flight(mtp_sweep):
    by_id = {row["id"]: V.little_in_flight(row.to_dict()) for _, row in mtp_sweep.iterrows()}
    assert by_id["vllm-mtp-r1-q6"] == pytest.approx(6 * 201 * 0.12293)   # the slower arm: without speculation
    assert by_id["vllm-mtp-r1-q4"] == pytest.approx(4 * 201 * 0.06429)
    assert V.little_in_flight({"arrival": "closed", "baseline": "10", "baseline_unit": "tpot_ms", "qps": "",
                               "output_len": "100", "measured": "speedup", "published": "1.5"}) == 0.0
    e2e = {"arrival": "poisson", "baseline": "2000", "baseline_unit": "e2e_ms", "qps": "3", "output_len": "100",
           "measured": "speedup", "published": "0.5"}   # a slow-down: the speculative arm holds more
    assert V.little_in_flight(e2e) == pytest.approx(3 * 2.0 / 0.5)


def test_a_rate_past_the_engine_s_cap_by_its_own_figures_must_be_marked_overloaded(mtp_sweep):
    def check(frame: pd.DataFrame) -> None:
        text = io.StringIO()
        frame.to_csv(text, index=False)
        V.check_table(pd.read_csv(io.StringIO(text.getvalue()), dtype=str, keep_default_na=False), "rows")

    assert set(V.overloaded_rows(mtp_sweep)["id"]) == {"vllm-mtp-r1-q6", "vllm-mtp-r1-q8"}
    check(mtp_sweep)
    with pytest.raises(V.ValidationInputError, match=r"row 4: by Little's law .* 148 requests in flight .* 128"):
        check(mtp_sweep.assign(regime=""))
    check(mtp_sweep.assign(regime="", batch_size="1024"))    # the same figures under a larger cap: steady


def test_a_rate_sweep_row_s_load_band_is_the_batch_it_held_not_the_engine_s_cap(mtp_sweep):
    row = mtp_sweep.iloc[0].to_dict()                      # 1 request/s, cap 128
    config = V.row_config(row)
    assert V._load_held(row, config) == pytest.approx(1 + 1 * 0.05547 * 201)   # 12 in flight: band 2-16
    closed = {**row, "arrival": "closed", "qps": ""}
    assert V._load_held(closed, V.row_config(closed)) == 128.0
