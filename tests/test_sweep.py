"""Sweeps: parsing, the cell adapter against direct simulator calls, executors agreeing,
resume after an interruption, failed cells recorded, the t-interval summary."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from heteroplan.cli import main
from heteroplan.cluster import preset
from heteroplan.errors import InputError
from heteroplan.policies.registry import make_policy
from heteroplan.sim.loop import simulate
from heteroplan.sim.sweep import (
    ResultStore,
    load_sweep,
    parse_sweep,
    run_cell,
    run_sweep,
    summarize,
)
from heteroplan.sim.sweep.results import TIMING_COLUMNS, plot_bars, results_table
from heteroplan.sim.sweep.spec import ClusterSpec
from heteroplan.workload.sia import bundled_workload

# 2 workloads x 3 policies, 8 jobs each: a few seconds in all.
TINY = {
    "name": "tiny",
    "jobs": 8,
    "max_hours": 100,
    "workloads": [{"bundled": ["philly/workload-1", "saturn/workload-1"]}],
    "clusters": [{"preset": "sia-64"}],
    "policies": [{"name": "fifo"}, {"name": "tiresias"}, {"name": "sia", "label": "sia-lp",
                                                          "options": {"mode": "lp-round"}}],
}


def deterministic(table):
    """The table without the columns that time this machine (they differ run to run)."""
    return table.drop(columns=[c for c in TIMING_COLUMNS if c in table]).sort_values("key").reset_index(drop=True)


@pytest.fixture(scope="module")
def tiny_inprocess(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    report = run_sweep(TINY, out, executor="inprocess")
    return out, report


# ---------------------------------------------------------------- parsing
@pytest.mark.parametrize("change, field", [
    ({"simulator": "des"}, "simulator"),
    ({"seeds": []}, "seeds"),
    ({"seeds": [0, "1"]}, "seeds"),
    ({"jobs": 0}, "jobs"),
    ({"colour": "red"}, "colour"),
    ({"workloads": [{"bundled": "philly/workload-99"}]}, "workloads[0].bundled"),
    ({"workloads": [{"file": "no/such.csv"}]}, "workloads[0].file"),
    ({"workloads": [{"bundled": "philly/workload-1", "file": "x.csv"}]}, "workloads[0]"),
    ({"workloads": [{"generate": "gavel", "jobs": 5}]}, "workloads[0].generate"),
    ({"clusters": [{"preset": "sia-65"}]}, "clusters[0].preset"),
    ({"clusters": [{"preset": "sia-64", "scale": -1}]}, "clusters[0].scale"),
    ({"policies": [{"name": "sai"}]}, "policies[0].name"),
    ({"policies": [{"name": "sia", "options": {"mdoe": "lp"}}]}, "policies[0].options.mdoe"),
    ({"policies": [{"name": "fifo"}, {"name": "fifo"}]}, "policies.label"),
    ({"policies": [{"name": "tiresias", "options": {"thresholds": [-1.0]}}]}, "policies[0].options.thresholds"),
    ({"policies": [{"name": "tiresias", "options": {"thresholds": "soon"}}]}, "policies[0].options"),
    ({"fidelities": [{"batch_size": "guess"}]}, "fidelities[0].batch_size"),
    ({"fidelities": [{"preset": "perfect"}]}, "fidelities[0].preset"),
    ({"fidelities": [{"restart_delay_s": -5}]}, "fidelities[0].restart_delay_s"),
    ({"policies": [{"name": "fifo", "options": {"restart_delay_s": -5}}]}, "policies[0].options.restart_delay_s"),
    ({"policies": []}, "policies"),
])
def test_bad_sweep_names_field_and_value(change, field):
    with pytest.raises(InputError) as err:
        parse_sweep(TINY | change)
    assert err.value.field == field


def test_bad_sweep_file_exits_2_with_the_field(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text('[[workloads]]\nbundled = "philly/workload-1"\n[[clusters]]\npreset = "sia-64"\n'
                    '[[policies]]\nname = "sia"\noptions = { mode = 3, nope = 1 }\n')
    assert main(["sweep", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "policies[0].options.nope=1" in capsys.readouterr().err
    path.write_text("seeds = [0\n")
    assert main(["sweep", str(path)]) == 2
    assert "not valid TOML" in capsys.readouterr().err


def test_grid_expansion_and_keys(tmp_path):
    spec = parse_sweep(TINY | {"seeds": [0, 1], "fidelities": [{"preset": "sia"}, {"preset": "ideal"}]})
    cells = spec.cells()
    assert len(cells) == 2 * 1 * 3 * 2 * 2
    assert len({c.key for c in cells}) == len(cells)  # every input reaches the key
    assert [c.key for c in parse_sweep(TINY | {"seeds": [0, 1]}).cells()][:3] == \
        [c.key for c in parse_sweep(TINY | {"seeds": [0, 1]}).cells()][:3]  # stable across parses
    # a workload file's contents are part of the key: editing it makes new cells
    csv = tmp_path / "w.csv"
    csv.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\n")
    one = parse_sweep(TINY | {"workloads": [{"file": str(csv)}]}).cells()[0].key
    csv.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,2,128\n")
    assert parse_sweep(TINY | {"workloads": [{"file": str(csv)}]}).cells()[0].key != one


def test_scaled_cluster_multiplies_every_count():
    base = preset("sia-64").capacity()
    assert ClusterSpec("preset", "sia-64", 2.0).build().capacity() == {k: 2 * v for k, v in base.items()}
    assert ClusterSpec("preset", "sia-64", 0.5).build().capacity() == {k: v // 2 for k, v in base.items()}


# ---------------------------------------------------------------- the cell adapter
def test_run_cell_matches_a_direct_simulation():
    cell = next(c for c in parse_sweep(TINY).cells() if c.policy.label == "tiresias")
    out = run_cell(cell)
    direct = simulate(bundled_workload("philly/workload-1")[:8], preset("sia-64"), make_policy("tiresias"),
                      max_time=100 * 3600, progress=False)
    assert out["metrics"]["avg_jct_h"] == direct.summary()["avg_jct_h"]
    assert out["jcts"] == [j.jct_s for j in direct.finished()]
    assert out["error"] is None


def test_slotted_cell_matches_a_direct_simulation():
    from heteroplan.workload.gavel import generate_workload, load_throughputs
    from heteroplan.workload.rigid import rigid_jobs_from_gavel

    spec = parse_sweep({"simulator": "slotted", "seeds": [3],
                        "workloads": [{"generate": "gavel", "jobs": 12, "rate": 6.0}],
                        "clusters": [{"preset": "gavel-108"}], "policies": [{"name": "yarn-cs"}]})
    out = run_cell(spec.cells()[0])
    jobs = rigid_jobs_from_gavel(generate_workload(12, 6.0, seed=3), load_throughputs())
    direct = simulate(jobs, preset("gavel-108"), make_policy("yarn-cs"), round_length=360.0, progress=False)
    assert out["metrics"]["avg_jct_h"] == direct.summary()["avg_jct_h"]
    assert out["jcts"] == [j.jct_s for j in direct.finished()]


# ---------------------------------------------------------------- executors, resume, failures
def test_processes_give_the_same_table_as_inprocess(tiny_inprocess, tmp_path):
    out, report = tiny_inprocess
    assert (report.cells, report.computed, report.failed) == (6, 6, 0)
    procs = run_sweep(TINY, tmp_path, executor="processes", workers=2)
    assert procs.computed == 6
    a, b = deterministic(report.table()), deterministic(procs.table())
    assert a.equals(b)
    recs_a = {r["key"]: r["jcts"] for r in report.records()}
    assert recs_a == {r["key"]: r["jcts"] for r in procs.records()}
    # metadata of each record
    rec = json.loads(next((tmp_path / "cells").glob("*.json")).read_text())
    assert {"version", "inputs", "wall_s", "host", "status"} <= set(rec)
    assert rec["inputs"]["policy"]["name"] in ("fifo", "tiresias", "sia")


def test_rerun_computes_only_missing_cells(tiny_inprocess, tmp_path):
    out, report = tiny_inprocess
    for record in report.records():  # a sweep stopped after 4 of its 6 cells
        (tmp_path / "cells").mkdir(exist_ok=True)
        (tmp_path / "cells" / f"{record['key']}.json").write_text(json.dumps(record))
    gone = [r["key"] for r in report.records()][1::3]
    for key in gone:
        (tmp_path / "cells" / f"{key}.json").unlink()
    again = run_sweep(TINY, tmp_path, executor="processes", workers=2)
    assert (again.skipped, again.computed) == (4, 2)
    assert deterministic(again.table()).equals(deterministic(report.table()))
    assert run_sweep(TINY, tmp_path, executor="inprocess").computed == 0


def _fake_metrics(cell):
    return {"metrics": {"avg_jct_h": float(cell.seed) + len(cell.policy.label)}, "jcts": [1.0], "error": None}


def test_interrupted_sweep_keeps_finished_cells_and_resumes(tmp_path):
    calls = []

    def stops_at_third(cell):
        calls.append(cell.key)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return _fake_metrics(cell)

    sweep = TINY | {"seeds": [0, 1]}
    with pytest.raises(KeyboardInterrupt, match="2 of 12 cells"):
        run_sweep(sweep, tmp_path, executor="inprocess", cell_fn=stops_at_third)
    assert len(list((tmp_path / "cells").glob("*.json"))) == 2
    assert len(results_table(ResultStore(tmp_path).records(calls))) == 2  # the tables were written too
    assert (tmp_path / "results.csv").read_text().count("\n") == 3
    rerun: list[str] = []
    report = run_sweep(sweep, tmp_path, executor="inprocess",
                       cell_fn=lambda c: rerun.append(c.key) or _fake_metrics(c))
    assert (report.skipped, report.computed) == (2, 10)
    assert set(rerun) == {c.key for c in parse_sweep(sweep).cells()} - set(calls[:2])


def test_sigterm_keeps_finished_cells(tmp_path):
    calls = []

    def terminated_at_second(cell):
        calls.append(cell)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler turns it into KeyboardInterrupt
        return _fake_metrics(cell)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(TINY, tmp_path, executor="inprocess", cell_fn=terminated_at_second)
    assert signal.getsignal(signal.SIGTERM) == before
    assert [p.stem for p in (tmp_path / "cells").glob("*.json")] == [calls[0].key]


def test_signal_swallowed_inside_a_cell_is_not_stored_as_its_failure(tmp_path):
    """A signal inside a C extension's import comes back as ImportError; the cell must not be
    recorded as failed (a rerun would skip it), and the sweep must still stop."""
    calls = []

    def import_interrupted_at_second(cell):
        calls.append(cell)
        if len(calls) == 2:
            try:
                os.kill(os.getpid(), signal.SIGINT)
            except KeyboardInterrupt:
                raise ImportError("initialization failed") from None
        return _fake_metrics(cell)

    with pytest.raises(KeyboardInterrupt):
        run_sweep(TINY, tmp_path, executor="inprocess", cell_fn=import_interrupted_at_second)
    assert [p.stem for p in (tmp_path / "cells").glob("*.json")] == [calls[0].key]


def test_failed_cell_is_recorded_and_the_rest_complete(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\nj,0,cifar10,1,64\n")
    sweep = parse_sweep(TINY | {"workloads": [{"bundled": "philly/workload-1"}, {"file": str(bad)}],
                                "policies": [{"name": "fifo"}, {"name": "tiresias"}]})
    # a bad application is refused when the sweep file is read; one written after that fails its cells
    bad.write_text("name,time,application,num_replicas,batch_size\nj,0,no-such-app,1,64\n")
    report = run_sweep(sweep, tmp_path / "out", executor="processes", workers=2)
    assert (report.computed, report.failed) == (2, 2)
    table = report.table()
    failed = table[table["status"] == "error"]
    assert set(failed["workload"]) == {str(bad.resolve())}
    assert failed["error"].str.contains("no-such-app").all()
    assert set(summarize(table)["family"]) == {"philly"}  # failed cells stay out of the summary
    assert run_sweep(sweep, tmp_path / "out", executor="inprocess", retry_failed=False).computed == 0
    assert run_sweep(sweep, tmp_path / "out", executor="inprocess").failed == 2  # retried by default


def test_cli_runs_resumes_and_writes_tables(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text('name = "cli"\njobs = 6\n[[workloads]]\nbundled = "philly/workload-2"\n'
                    '[[clusters]]\npreset = "sia-64"\n[[policies]]\nname = "fifo"\n[[policies]]\nname = "gavel"\n')
    args = ["sweep", str(path), "--out", str(tmp_path / "out"), "--inprocess", "--quiet"]
    assert main(args) == 0
    assert "2 computed" in capsys.readouterr().out
    assert main(args) == 0
    assert "2 already done, 0 computed" in capsys.readouterr().out
    table = __import__("pandas").read_csv(tmp_path / "out" / "results.csv")
    assert sorted(table["policy"]) == ["fifo", "gavel"]


# ---------------------------------------------------------------- results
def test_summary_t_interval_known_values():
    import pandas as pd

    table = pd.DataFrame({"cluster": "c", "fidelity": "f", "policy": "p", "family": "philly", "status": "ok",
                          "workload": "philly/workload-1", "avg_jct_h": [1.0, 2.0, 3.0], "seed": [0, 1, 2]})
    row = summarize(table).set_index("metric").loc["avg_jct_h"]
    # mean 2, s = 1, t_{0.975, 2} = 4.302653 -> half-width 4.302653 / sqrt(3) = 2.484138 -> low clipped at 0
    assert row["n"] == 3 and row["mean"] == 2.0
    assert row["ci_low"] == 0.0 and row["ci_method"] == "t, clipped to [0, inf]"
    assert row["ci_high"] == pytest.approx(2 + 2.484138, abs=1e-6)
    assert "seed" not in set(summarize(table)["metric"])
    shifted = table.assign(avg_jct_h=table["avg_jct_h"] + 10)  # far from 0: the plain t-interval
    row = summarize(shifted).set_index("metric").loc["avg_jct_h"]
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((12 - 2.484138, 12 + 2.484138), abs=1e-6)
    assert row["ci_method"] == "t"
    for n in (1, 2):  # no interval below 3 values
        few = summarize(table.iloc[:n]).set_index("metric").loc["avg_jct_h"]
        assert few["n"] == n and np.isnan(few["ci_low"]) and np.isnan(few["ci_high"]) and few["ci_method"] == ""


def test_summary_is_per_workload_and_inside_each_metric_range():
    """Two workloads x three seeds: one interval per workload (n = 3), never pooled, and every
    interval within its metric's physical range (utilisation in [0, 1], times >= 0)."""
    import pandas as pd

    from heteroplan.sim.quantities import quantity
    from heteroplan.sim.sweep.results import format_summary

    rows = []
    for workload, (jct, util) in {"philly/workload-1": ([0.1, 0.2, 4.0], [0.99, 0.6, 0.97]),
                                  "philly/workload-2": ([9.0, 1.0, 1.2], [0.1, 0.02, 0.5])}.items():
        for seed in range(3):
            rows.append({"cluster": "c", "fidelity": "f", "policy": "p", "family": "philly", "workload": workload,
                         "seed": seed, "status": "ok", "avg_jct_h": jct[seed], "utilization": util[seed]})
    summary = summarize(pd.DataFrame(rows))
    assert len(summary) == 4 and set(summary["n"]) == {3}
    assert sorted(set(summary["workload"])) == ["philly/workload-1", "philly/workload-2"]
    for _, r in summary.iterrows():
        q = quantity(r["metric"])
        assert q.lower <= r["ci_low"] <= r["mean"] <= r["ci_high"] <= q.upper
    util = summary[summary["metric"] == "utilization"].set_index("workload")
    assert util.loc["philly/workload-1", "ci_high"] == 1.0  # the raw t-interval crosses 1
    text = format_summary(summary)
    assert "philly/workload-1" in text and "philly/workload-2" in text and "clipped" in text


def test_sweep_of_two_workloads_by_three_seeds_prints_per_workload_intervals(tmp_path, capsys):
    sweep = tmp_path / "s.toml"
    sweep.write_text('name = "ci"\nsimulator = "slotted"\nseeds = [0, 1, 2]\n'
                     '[[workloads]]\ngenerate = "gavel"\njobs = 6\nrate = 6.0\nfamily = "a"\n'
                     '[[workloads]]\ngenerate = "gavel"\njobs = 8\nrate = 20.0\nfamily = "b"\n'
                     '[[clusters]]\npreset = "gavel-108"\n[[policies]]\nname = "fifo"\n'
                     '[[policies]]\nname = "yarn-cs"\n')
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--inprocess", "--quiet", "--plots"]) == 0
    out = capsys.readouterr().out
    import pandas as pd

    summary = pd.read_csv(tmp_path / "out" / "summary.csv", keep_default_na=False, na_values=[""])
    assert len(set(summary["workload"])) == 2 and set(summary["n"]) == {3}
    from heteroplan.sim.quantities import quantity

    for _, r in summary.iterrows():
        q = quantity(r["metric"])
        assert q.lower <= r["ci_low"] <= r["ci_high"] <= q.upper, r.to_dict()
    assert "Student-t interval" in out
    # --json: one document (the rerun resumes: nothing computed), the same summary rows
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "out"), "--inprocess", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["cells"], doc["skipped"], doc["computed"], doc["failed"]) == (12, 12, 0, 0)
    assert len(doc["summary"]) == len(summary) and {r["n"] for r in doc["summary"]} == {3}


def test_figures_of_one_sweep_give_each_policy_one_colour(tiny_inprocess):
    import matplotlib.colors as mcolors

    from heteroplan.sim.sweep import plot_jct_cdf

    _, report = tiny_inprocess
    summary = report.summary()
    colors = {}
    for metric in ("avg_jct_h", "utilization"):
        ax = plot_bars(summary, metric).axes[0]
        handles, labels = ax.get_legend_handles_labels()
        for handle, label in zip(handles, labels, strict=True):
            colors.setdefault(label, set()).add(mcolors.to_hex(handle.patches[0].get_facecolor()))
        assert "avg_jct_h" not in ax.get_title() and "utilization" not in ax.get_ylabel()
        assert "(" in ax.get_ylabel() and ax.get_ylabel() in ax.get_title()  # a unit, on the axis and title
    for line in plot_jct_cdf(report.records()).axes[0].lines:
        colors.setdefault(line.get_label(), set()).add(mcolors.to_hex(line.get_color()))
    assert set(colors) == {"fifo", "tiresias", "sia-lp"}
    assert all(len(c) == 1 for c in colors.values()), colors
    assert len({next(iter(c)) for c in colors.values()}) == 3


def test_jct_cdf_under_a_decade_labels_plain_ticks():
    import matplotlib

    matplotlib.use("Agg")
    from heteroplan.plots import jct_cdf_of

    fig = jct_cdf_of({"a": [0.2 * 3600, 0.25 * 3600, 0.45 * 3600]})
    ax = fig.axes[0]
    fig.canvas.draw()
    low, high = ax.get_xlim()
    labels = [t.get_text() for t in ax.get_xticklabels(minor=True) + ax.get_xticklabels()
              if low <= t.get_position()[0] <= high and t.get_text()]
    assert len(labels) >= 2 and not any("10^" in t or "times" in t for t in labels), labels
    assert {"0.2", "0.3"} <= set(labels)


def test_bars_show_the_summary_means(tiny_inprocess):
    _, report = tiny_inprocess
    summary = report.summary()
    fig = plot_bars(summary, "avg_jct_h")
    heights = sorted(p.get_height() for p in fig.axes[0].patches)
    assert heights == pytest.approx(sorted(summary[summary["metric"] == "avg_jct_h"]["mean"]))
    with pytest.raises(InputError, match="metric"):
        plot_bars(summary, "happiness")
    from heteroplan.sim.sweep import plot_jct_cdf

    records = report.records()
    lines = {line.get_label(): line for line in plot_jct_cdf(records).axes[0].lines}
    fifo = sorted(j / 3600 for r in records if r["labels"]["policy"] == "fifo" for j in r["jcts"])
    assert set(lines) == {"fifo", "tiresias", "sia-lp"}
    assert lines["fifo"].get_xdata().tolist() == pytest.approx(fifo)  # pooled over both workloads
    assert len(fifo) == 16


def test_example_sweep_files_parse():
    root = Path(__file__).resolve().parents[1] / "examples" / "sweeps"
    files = sorted(root.glob("*.toml"))
    assert files
    for path in files:
        if "[gavel_setting]" in path.read_text():  # a Hadar regime: tests/test_hadar_gavel_setting.py
            continue
        assert load_sweep(path).cells()


def test_policy_options_reach_the_policy():

    spec = parse_sweep(TINY | {"policies": [
        {"name": "tiresias", "label": "t", "options": {"thresholds": [600.0, 6000.0]}},
        {"name": "gavel", "options": {"round_length": 120.0, "time_limit": 5.0}},
        {"name": "sia", "label": "s", "options": {"mode": "lp-round"}}]})
    tiresias, gavel, sia = (c.policy.build() for c in spec.cells()[:3])
    assert tiresias.thresholds.tolist() == [600.0, 6000.0] and tiresias.name == "t"
    assert (gavel.round_length, gavel.time_limit) == (120.0, 5.0)
    assert (sia.mode, sia.name) == ("lp-round", "s")


def test_docs_page_code_runs():
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "sweeps.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 1
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], "sweeps.md", "exec"), namespace)  # noqa: S102 - our own docs
    assert namespace["report"].computed == 6
    assert set(namespace["summary"]["family"]) == {"philly", "saturn"}
    assert set(namespace["summary"]["workload"]) == {"philly/workload-1", "philly/workload-2", "saturn/workload-1"}


def test_a_fidelity_preset_keeps_every_field_it_sets():
    """The "ideal" preset is SimFidelity.ideal() (it lost free_moves and epoch_rates once), and an
    override changes only its own field."""
    from heteroplan.sim.fidelity import SimFidelity
    from heteroplan.sim.sweep.spec import FidelitySpec

    ideal = FidelitySpec("ideal", "ideal").build()
    assert (ideal.free_moves, ideal.epoch_rates, ideal.batch_size) == (False, False, "truth")
    assert ideal == SimFidelity.ideal()
    tweaked = FidelitySpec("x", "ideal", (("restart_delay_s", 30.0),)).build()
    assert tweaked.restart_delay_s == 30.0 and (tweaked.free_moves, tweaked.epoch_rates) == (False, False)
    assert FidelitySpec().build() == SimFidelity()
