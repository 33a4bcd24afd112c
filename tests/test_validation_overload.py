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
