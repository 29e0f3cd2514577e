"""Notebook views of results: DataFrames that agree with the summaries, readable plots."""

from __future__ import annotations

import math

import numpy as np
import pytest

pd = pytest.importorskip("pandas", reason="pandas is a core dependency; install heteroplan properly")

from heteroplan.cluster import preset  # noqa: E402
from heteroplan.errors import InputError  # noqa: E402
from heteroplan.sim.compare import compare_policies  # noqa: E402
from heteroplan.workload.sia import bundled_workload  # noqa: E402


@pytest.fixture(scope="module")
def results():
    return compare_policies(bundled_workload("philly/workload-1")[:6], preset("sia-64"), ["fifo", "sia"], progress=False)


def test_summary_frame_is_the_summaries(results) -> None:
    frame = results.to_dataframe()
    assert list(frame.index) == ["fifo", "sia"]
    for r in results:
        for key, value in r.summary().items():
            if key != "policy" and isinstance(value, float) and not math.isnan(value):
                assert frame.loc[r.policy, key] == pytest.approx(value)


def test_jobs_frame_recomputes_the_mean_jct(results) -> None:
    jobs = results.to_dataframe("jobs")
    assert len(jobs) == sum(len(r.jobs) for r in results)
    for r in results:
        mine = r.to_dataframe()
        assert mine["jct_h"].mean() == pytest.approx(r.summary()["avg_jct_h"])
        assert (mine["jct_s"] == mine["finish_time_s"] - mine["arrival_time_s"]).all()
        assert jobs.loc[r.policy]["jct_h"].tolist() == mine["jct_h"].tolist()
    with pytest.raises(InputError, match="what"):
        results.to_dataframe("nope")


def test_gpus_frame_sums_types_within_capacity(results) -> None:
    gpus = results[1].to_dataframe("gpus")
    types = [c for c in gpus.columns if c != "total"]
    assert set(types) == set(results[1].capacity)
    assert (gpus["total"] == gpus[types].sum(axis=1)).all()
    assert (gpus[types] <= pd.Series(results[1].capacity)).all().all()


def test_comparison_shows_a_html_table(results) -> None:
    html = results._repr_html_()
    assert html.startswith("<table") and "fifo" in html and "avg_jct_h" in html


def test_jct_cdf_has_a_title_and_plain_log_labels(results) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from heteroplan import plots

    fig = plots.jct_cdf(results)
    ax = fig.axes[0]
    assert "6 jobs" in ax.get_title() and ax.get_xscale() == "log"
    formatter = ax.xaxis.get_major_formatter()
    assert [formatter(v) for v in (0.1, 1.0, 10.0)] == ["0.1", "1", "10"]


def test_pareto_plot_draws_the_budget() -> None:
    import matplotlib

    matplotlib.use("Agg")
    from heteroplan import plots

    fig = plots.cost_throughput_front([(0.1, 1.0), (0.3, 2.0)], budget=0.2)
    (line,) = [ln for ln in fig.axes[0].lines if ln.get_label().startswith("budget")]
    assert np.allclose(line.get_ydata(), 0.2)


def test_progress_is_silent_off_a_terminal(capfd) -> None:
    from heteroplan.sim.progress import ProgressBar

    bar = ProgressBar("x")  # pytest's stderr is not a terminal
    bar.update(0.5, "half")
    bar.close()
    assert capfd.readouterr().err == ""
    bar = ProgressBar("x", enabled=True)
    bar.update(0.5, "half")
    bar.close()
    assert "50.0%" in capfd.readouterr().err
