"""Every file format heteroplan reads, fuzzed (issue 47): hypothesis mutates a valid document
(wrong types; NaN, infinite, negative, zero, fractional and huge numbers; missing and extra keys;
deep nesting; huge strings; control characters) or the file's bytes (truncated, binary garbage,
not UTF-8), and each format's property holds: reading either returns an object that passes the
physical checks (finite, non-negative times, sizes and prices; bounded counts and names), or raises
:class:`InputError` naming the file — nothing else escapes.

The strategies are generic (``hostile_json``, ``hostile_csv``); each format gives a valid document
and a ``physical`` check of what was read."""

from __future__ import annotations

import copy
import csv
import io
import json
import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heteroplan.errors import InputError
from heteroplan.schema import MAX_NAME

FUZZ = settings(max_examples=int(__import__("os").environ.get("HP_FUZZ_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])

HUGE_TEXT = "A" * 131_073  # one character beyond csv's field limit
HOSTILE_VALUES = [math.nan, math.inf, -math.inf, -1, -1e-9, 0, 0.0, 0.5, 2.5, 1e9, 1e300, 10 ** 30, -(10 ** 30),
                  True, False, None, "", "x", "8", "\x1b[2J", "\x00", HUGE_TEXT, [], {}, [1, 2, 3], {"x": 1},
                  [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]
hostile_values = st.one_of(st.sampled_from(HOSTILE_VALUES), st.integers(-(10 ** 12), 10 ** 12),
                           st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8))


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """The path (keys and indices) of every node of ``doc``, the root included."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


@st.composite
def mutated(draw, valid: Any) -> Any:
    """``valid`` with one to three nodes replaced, deleted, duplicated under a new key, nested
    deeper or given an extra key."""
    doc = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "extra", "nest", "scale"]))
        if not path:
            if action == "replace":
                doc = copy.deepcopy(draw(hostile_values))
            continue
        parent, key = _get(doc, path[:-1]), path[-1]
        if action == "replace":
            parent[key] = copy.deepcopy(draw(hostile_values))
        elif action == "delete":
            del parent[key]
        elif action == "extra" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "0", "-1", "99999999", HUGE_TEXT, "\x1b]0;x\x07"]))] = parent[key]
        elif action == "extra" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        elif action == "nest":
            parent[key] = [parent[key]] if draw(st.booleans()) else {"x": parent[key]}
        elif action == "scale" and isinstance(parent[key], int | float) and not isinstance(parent[key], bool):
            parent[key] = parent[key] * draw(st.sampled_from([-1, 0, 1e9, 1e-9, 1e30]))
    return doc


def _file_bytes(draw, text: str) -> bytes:
    """``text`` as bytes, or cut short, or binary garbage, or with a byte that is not UTF-8."""
    data = text.encode()
    how = draw(st.sampled_from(["as is", "as is", "as is", "truncate", "garbage", "not utf-8"]))
    if how == "truncate":
        return data[:draw(st.integers(0, max(len(data) - 1, 0)))]
    if how == "garbage":
        return draw(st.binary(max_size=300))
    if how == "not utf-8":
        at = draw(st.integers(0, len(data)))
        return data[:at] + b"\xff\xfe" + data[at:]
    return data


@st.composite
def hostile_json(draw, valid: Any) -> bytes:
    """A JSON file: ``valid`` (sometimes), a mutation of it, or broken bytes."""
    doc = valid if draw(st.integers(0, 9)) == 0 else draw(mutated(valid))
    try:
        text = json.dumps(doc, allow_nan=True)
    except ValueError:  # an integer json cannot write
        text = json.dumps(valid)
    return _file_bytes(draw, text)


@st.composite
def hostile_csv(draw, header: list[str], rows: list[list[str]]) -> bytes:
    """A CSV file: the valid rows with cells replaced (hostile numbers, huge or control text,
    quotes), cells removed or added, a column renamed, or broken bytes."""
    header, rows = list(header), [list(r) for r in rows]
    for _ in range(draw(st.integers(0, 3))):
        row = draw(st.sampled_from(rows))
        action = draw(st.sampled_from(["cell", "cell", "cell", "drop", "add", "header"]))
        col = draw(st.integers(0, len(header) - 1))
        if action == "cell" and col < len(row):
            row[col] = draw(st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e12", "2.5", "1e999", "", "x",
                                             HUGE_TEXT, "\x1b[2J", '"', "9" * 400, "0x10", " 8 "]))
        elif action == "drop" and row:
            row.pop()
        elif action == "add":
            row.append("extra")
        elif action == "header":
            header[col] = draw(st.sampled_from(["", "nme", header[col].upper()]))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return _file_bytes(draw, out.getvalue())


def check_reads(read: Callable[[Path], Any], path: Path, physical: Callable[[Any], None]) -> None:
    """The property: ``read(path)`` returns what passes ``physical``, or raises InputError naming the file."""
    try:
        value = read(path)
    except InputError as exc:
        assert path.name in str(exc), f"the error does not name the file: {exc}"
        return
    physical(value)


def check_file(data: bytes, name: str, read: Callable[[Path], Any], physical: Callable[[Any], None]) -> None:
    """:func:`check_reads` on ``data`` written to a file called ``name`` in a fresh directory."""
    path = fresh_dir() / name
    path.write_bytes(data)
    check_reads(read, path, physical)


_DIRS: list[Path] = []


def fresh_dir() -> Path:
    """A new directory per example (the readers cache by path, modification time and size);
    removed when the module's tests end."""
    _DIRS.append(Path(tempfile.mkdtemp(prefix="hp-fuzz-")))
    return _DIRS[-1]


@pytest.fixture(autouse=True, scope="module")
def _remove_dirs():
    yield
    for path in _DIRS:
        shutil.rmtree(path, ignore_errors=True)


def printable(name: str) -> bool:
    return 0 < len(name) <= MAX_NAME and name.isprintable()


# ------------------------------------------------------------------------------------ plan files
VALID_PLAN = {"format_version": 2, "model": "OPT-350", "global_batch_size": 32, "microbatch_size": 2,
              "precision": "bf16",
              "stages": [{"layers": [0, 9], "replicas": [{"gpu_type": "A100-40", "zone": "z", "tp": 1, "count": 2}]},
                         {"layers": [10, 25], "replicas": [{"gpu_type": "V100-16", "zone": "z", "tp": 2, "count": 2}],
                          "recompute": "full"}],
              "microbatches_per_replica": [8, 8]}
VALID_SAILOR_PLAN = {"pipeline_list": [{"layers_per_stage": [[0, 1, 2], [3, 4]],
                                        "tmp_per_stage": [[[[["A100-40", 1, "z"]], 1], [[["A100-40", 1, "z"]], 1]],
                                                          [[[["V100-16", 2, "z"]], 2], [[["V100-16", 2, "z"]], 2]]],
                                        "dp": 2}], "gbs": 16, "mbs": 2}


def plan_physical(plan) -> None:
    from heteroplan.planner.plan import MAX_PLAN_GPUS

    assert 1 <= plan.num_gpus <= MAX_PLAN_GPUS
    assert plan.microbatch_size >= 1 and plan.global_batch_size >= plan.microbatch_size
    assert all(m >= 1 for m in plan.microbatches())
    assert sum(plan.microbatches()) * plan.microbatch_size == plan.global_batch_size
    for stage in plan.stages:
        assert all(g.tp >= 1 and g.count >= 1 and printable(g.gpu_type) and printable(g.zone) for g in stage.replicas)
    assert printable(plan.model)
    assert plan.describe()


@FUZZ
@given(st.one_of(hostile_json(VALID_PLAN), hostile_json(VALID_SAILOR_PLAN)))
def test_plan_files(data: bytes) -> None:
    from heteroplan.planner.plan import Plan

    check_file(data, "plan.json", Plan.from_json, plan_physical)


@FUZZ
@given(mutated(VALID_PLAN))
def test_plan_dicts(data: Any) -> None:
    """The same through ``Plan.from_dict`` (Python values: NaN and infinities reach the decoder)."""
    from heteroplan.planner.plan import Plan

    try:
        plan = Plan.from_dict(data)
    except InputError:
        return
    plan_physical(plan)


def test_a_billion_replicas_is_refused_with_a_bound(tmp_path) -> None:
    from heteroplan.planner.plan import MAX_PLAN_GPUS, Plan

    data = copy.deepcopy(VALID_PLAN)
    data["stages"][0]["replicas"][0]["count"] = 1e9
    data.pop("microbatches_per_replica")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=f"plan.json.*count.*{MAX_PLAN_GPUS}"):
        Plan.from_json(path)


# ---------------------------------------------------------------------- profile directories
VALID_LLM_INFO = {"m": {"1": {str(i): {"params_floats": 1000 * (i + 1), "act_output_floats": 64,
                                       "act_mem_floats": 128} for i in range(3)},
                        "2": {str(i): {"params_floats": 500 * (i + 1), "act_output_floats": 64,
                                       "act_mem_floats": 64} for i in range(3)}}}
VALID_PROFILE = {str(mbs): {str(tp): {str(i): [0.001 * mbs / tp, 0.002 * mbs / tp, 0.0005] for i in range(3)}
                            for tp in (1, 2)} for mbs in (1, 2, 4)}


def profile_physical(profile) -> None:
    assert profile.num_layers == 3
    for tp, params in profile.params.items():
        assert tp >= 1 and np.all(np.isfinite(params)) and np.all(params >= 0) and params.sum() > 0
        assert np.all(np.isfinite(profile.act_mem[tp])) and np.all(profile.act_mem[tp] >= 0)
    for (gpu, mbs, tp), times in profile.compute.items():
        assert mbs >= 1 and tp >= 1 and printable(gpu)
        assert np.all(np.isfinite(times)) and np.all(times >= 0) and times[:2].sum() > 0
        if profile.has(gpu, mbs, tp):  # a TP degree llm_info lacks is skipped by the planner
            assert np.all(np.diff(profile.compute_prefix(gpu, mbs, tp), axis=-1) >= 0)


@st.composite
def profile_dirs(draw) -> tuple[bytes, bytes]:
    if draw(st.booleans()):
        return draw(hostile_json(VALID_LLM_INFO)), json.dumps(VALID_PROFILE).encode()
    return json.dumps(VALID_LLM_INFO).encode(), draw(hostile_json(VALID_PROFILE))


@FUZZ
@given(profile_dirs())
def test_profile_directories(files: tuple[bytes, bytes]) -> None:
    from heteroplan.perf.sailor_profiles import load_model_profile

    root = fresh_dir()
    (root / "profiles" / "m").mkdir(parents=True)
    (root / "llm_info.json").write_bytes(files[0])
    (root / "profiles" / "m" / "A100-40.json").write_bytes(files[1])
    bad = "llm_info.json" if files[1] == json.dumps(VALID_PROFILE).encode() else "A100-40.json"
    try:
        profile = load_model_profile("m", root)
    except InputError as exc:
        # a model the mutation removed from llm_info is "unknown model", naming the model
        assert bad in str(exc) or "unknown model" in str(exc), f"the error does not name the file: {exc}"
        return
    profile_physical(profile)


@pytest.mark.parametrize(("mbs", "tp"), [("0", "1"), ("1", "0")])
def test_zero_microbatch_or_tp_keys_are_refused(tmp_path, mbs, tp) -> None:
    from heteroplan.perf.sailor_profiles import load_model_profile

    (tmp_path / "profiles" / "m").mkdir(parents=True)
    (tmp_path / "llm_info.json").write_text(json.dumps(VALID_LLM_INFO))
    (tmp_path / "profiles" / "m" / "A100-40.json").write_text(json.dumps({mbs: {tp: VALID_PROFILE["1"]["1"]}}))
    with pytest.raises(InputError, match="A100-40.json"):
        load_model_profile("m", tmp_path)


# ------------------------------------------------------------------------------ network files
CURVE = [[-0.01, 0.2, 1.5], 2.4e9]
VALID_HOMO = {"inter": {"A100-40": {"1": CURVE, "2": CURVE}}, "intra": {"A100-40": {"2": CURVE}}}
VALID_MULTI = {"za": {"A100-40": {"1": {"zb": {"A100-40": {"1": CURVE}}}}},
               "zb": {"A100-40": {"1": {"za": {"A100-40": {"1": CURVE}}}}}}
VALID_EGRESS = {"za": {"za": 0.0, "zb": 0.01}, "zb": {"za": 0.01, "zb": 0.0}}


def network_physical(net) -> None:
    for z1 in net.zones:
        for z2 in net.zones:
            try:  # no measurements or price between these endpoints: said, not guessed
                bw = net.per_gpu_bandwidth(("A100-40", z1), ("A100-40", z2), 1, 1e8)
                price = net.egress_per_gb(z1, z2)
            except InputError:
                continue
            assert math.isfinite(bw) and bw > 0
            assert math.isfinite(price) and price >= 0


@st.composite
def network_dirs(draw) -> tuple[int, list[bytes]]:
    which = draw(st.integers(0, 2))
    files = [json.dumps(doc).encode() for doc in (VALID_HOMO, VALID_MULTI, VALID_EGRESS)]
    files[which] = draw(hostile_json((VALID_HOMO, VALID_MULTI, VALID_EGRESS)[which]))
    return which, files


@FUZZ
@given(network_dirs())
def test_network_directories(case: tuple[int, list[bytes]]) -> None:
    from heteroplan.perf.sailor_network import NETWORK_FILES, load_network

    which, files = case
    root = fresh_dir()
    for name, data in zip(NETWORK_FILES, files, strict=True):
        (root / name).write_bytes(data)
    try:
        net = load_network(root)
    except InputError as exc:
        assert NETWORK_FILES[which] in str(exc), f"the error does not name the file: {exc}"
        return
    network_physical(net)


# ------------------------------------------------------------------------- calibration files
VALID_SIM_CONFIG = {"platforms": {"A100-40": {"compute_scale": 1.02, "overhead_gb": 4.5, "working_layers": 2.3,
                                              "eager_send_bytes": 4194304}},
                    "fitted_on": {"A100-40": "two runs"}}


def sim_config_physical(table) -> None:
    for config in [table.default, *table.platforms.values()]:
        values = config.to_dict()
        assert all(math.isfinite(v) for v in values.values())
        assert values["compute_scale"] > 0 and values["overhead_gb"] >= 0 and values["transfer_latency_s"] >= 0
    assert all(printable(t) for t in table.platforms)


@FUZZ
@given(hostile_json(VALID_SIM_CONFIG))
def test_calibration_files(data: bytes) -> None:
    from heteroplan.planner.model.sim_config import load_platforms

    root = fresh_dir()
    (root / "sim_config.json").write_bytes(data)
    check_reads(lambda _: load_platforms(root), root / "sim_config.json", sim_config_physical)


# ----------------------------------------------------------------------------- cluster files
VALID_CLUSTER = {"name": "c", "gpu_types": [{"name": "A100-40", "memory_gb": 40, "gpus_per_node": 4,
                                             "price_per_hour": 3.67, "memory_bandwidth_gbs": 1555},
                                            {"name": "V100-16", "memory_gb": 16, "gpus_per_node": 8}],
                 "zones": ["za", {"name": "zb", "region": "r"}],
                 "nodes": [{"name": "n0", "gpu_type": "A100-40", "num_gpus": 4, "zone": "za"},
                           {"name": "n1", "gpu_type": "V100-16", "num_gpus": 8, "zone": "zb"}]}
VALID_COUNTS_CLUSTER = {"gpu_types": VALID_CLUSTER["gpu_types"], "counts": {"A100-40": 8, "V100-16@zb": 4}}


def cluster_physical(cluster) -> None:
    from heteroplan.cluster import MAX_CLUSTER_GPUS

    assert 1 <= cluster.num_gpus <= MAX_CLUSTER_GPUS
    for t in cluster.gpu_types:
        assert printable(t.name) and math.isfinite(t.memory_gb) and t.memory_gb > 0 and t.gpus_per_node >= 1
        assert math.isfinite(t.price_per_hour) and t.price_per_hour >= 0
    for n in cluster.nodes:
        assert n.gpu_type in {t.name for t in cluster.gpu_types} and n.num_gpus >= 1 and printable(n.name)


@FUZZ
@given(st.one_of(hostile_json(VALID_CLUSTER), hostile_json(VALID_COUNTS_CLUSTER)))
def test_cluster_files(data: bytes) -> None:
    from heteroplan.cluster import Cluster

    check_file(data, "cluster.json", Cluster.from_json, cluster_physical)


# ----------------------------------------------------------------------------- sweep files
VALID_SWEEP = {"name": "s", "simulator": "sia", "seeds": [0, 1], "jobs": 4, "max_hours": 10.0, "round": 60,
               "workloads": [{"bundled": ["philly/workload-1"]}], "clusters": [{"preset": "sia-64", "scale": 1}],
               "policies": [{"name": "fifo"}, {"name": "sia", "label": "sia-lp", "options": {"mode": "lp-round"}}],
               "fidelities": [{"preset": "ideal"}]}


def sweep_physical(spec) -> None:
    from heteroplan.sim.sweep.spec import MAX_CELLS

    cells = spec.cells()
    assert 1 <= len(cells) <= MAX_CELLS
    for cell in cells:
        assert cell.seed >= 0
        assert cell.jobs is None or cell.jobs >= 1
        assert cell.max_hours is None or (math.isfinite(cell.max_hours) and cell.max_hours > 0)
        assert cell.round_length is None or (math.isfinite(cell.round_length) and cell.round_length >= 10)
        assert cell.cluster.scale > 0 and math.isfinite(cell.cluster.scale)
        assert printable(cell.policy.label)
        json.dumps(cell.to_dict(), allow_nan=False)  # every input finite, plain data


@FUZZ
@given(mutated(VALID_SWEEP))
def test_sweep_tables(data: Any) -> None:
    """Sweep files as TOML parses them (NaN and infinities are valid TOML): parse_sweep."""
    from heteroplan.sim.sweep.spec import parse_sweep

    try:
        spec = parse_sweep(data)
    except InputError:
        return
    sweep_physical(spec)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.builds(lambda b: b, st.just(
    b'name = "s"\nseeds = [0]\n[[workloads]]\nbundled = "philly/workload-1"\n[[clusters]]\npreset = "sia-64"\n'
    b'[[policies]]\nname = "fifo"\n')).flatmap(lambda text: st.builds(
        lambda cut, junk, how: text[:cut] if how == 0 else junk if how == 1 else text.replace(b"fifo", b"\xff"),
        st.integers(0, len(text)), st.binary(max_size=200), st.integers(0, 2))))
def test_sweep_files(data: bytes) -> None:
    from heteroplan.sim.sweep.spec import load_sweep

    check_file(data, "s.toml", load_sweep, sweep_physical)


TOML_VALUES = ["nan", "inf", "-inf", "-1", "0", "1e300", "2.5", '"30"', "true", "[]", "[1]", "[5, 2]", "[0, 1e9]",
               "{ x = 1 }", '"' + "x" * 5000 + '"', "99999999999999999999"]


@st.composite
def regime_files(draw) -> bytes:
    """A regime file (a sweep file with a [gavel_setting] table) with hostile TOML values."""
    delay, window = draw(st.sampled_from(["30.0", *TOML_VALUES])), draw(st.sampled_from(["[30, 80]", *TOML_VALUES]))
    extra = draw(st.sampled_from(["", "colour = 1\n"]))
    text = (f'name = "r"\nsimulator = "slotted"\nseeds = [0]\n[gavel_setting]\nrestart_delay_s = {delay}\n'
            f'window = {window}\n{extra}[[workloads]]\ngenerate = "gavel"\njobs = 4\n[[clusters]]\n'
            f'preset = "gavel-108"\n[[policies]]\nname = "fifo"\n')
    return _file_bytes(draw, text)


def regime_physical(regime) -> None:
    setting = regime.setting
    assert math.isfinite(setting.restart_delay_s) and setting.restart_delay_s >= 0
    assert setting.window is None or 0 <= setting.window[0] < setting.window[1]
    sweep_physical(regime.spec)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(regime_files())
def test_regime_files(data: bytes) -> None:
    from heteroplan.sim.hadar_experiments import load_regime

    check_file(data, "regime.toml", load_regime, regime_physical)


# ----------------------------------------------------------------------------- workload CSVs
SIA_HEADER = ["name", "time", "application", "num_replicas", "batch_size"]
SIA_ROWS = [["a", "0", "cifar10", "1", "128"], ["b", "30.5", "imagenet", "4", "256"], ["c", "60", "bert", "2", "12"]]


def workload_physical(jobs) -> None:
    from heteroplan.workload.job_spec import MAX_ARRIVAL, MAX_BATCH_SIZE, MAX_REPLICAS

    assert jobs
    assert len({j.name for j in jobs}) == len(jobs)
    for j in jobs:
        assert printable(j.name.split("#")[0]) and printable(j.application)
        assert math.isfinite(j.arrival_time) and 0 <= j.arrival_time <= MAX_ARRIVAL
        assert 1 <= j.num_replicas <= MAX_REPLICAS and 1 <= j.batch_size <= MAX_BATCH_SIZE


@FUZZ
@given(hostile_csv(SIA_HEADER, SIA_ROWS))
def test_sia_workload_csvs(data: bytes) -> None:
    from heteroplan.workload.sia import read_sia_workload

    check_file(data, "w.csv", read_sia_workload, workload_physical)


def test_a_128k_character_cell_is_refused_with_a_bound(tmp_path) -> None:
    from heteroplan.workload.sia import read_sia_workload

    path = tmp_path / "w.csv"
    for name in ("x" * 131_072, "x" * 5000):
        path.write_text(",".join(SIA_HEADER) + f"\n{name},0,cifar10,1,128\n")
        with pytest.raises(InputError, match="w.csv"):
            read_sia_workload(path)


PLACEMENTS_HEADER = ["placement", "local_bsz", "step_time", "sync_time"]
PLACEMENTS_ROWS = [["1", "32", "0.1", "0"], ["22", "16", "0.2", "0.02"], ["4", "8", "0.05", "0.01"]]


def measurements_physical(m) -> None:
    for name in ("num_nodes", "num_gpus", "local_bsz", "step_time", "sync_time"):
        assert np.all(np.isfinite(getattr(m, name)))
    assert np.all(m.num_nodes >= 1) and np.all(m.num_gpus >= m.num_nodes) and np.all(m.local_bsz >= 1)
    assert np.all(m.step_time > 0) and np.all(m.sync_time >= 0)


@FUZZ
@given(hostile_csv(PLACEMENTS_HEADER, PLACEMENTS_ROWS))
def test_measurement_csvs(data: bytes) -> None:
    from heteroplan.perf.measurements import load_placements

    check_file(data, "placements-aws.csv", load_placements, measurements_physical)


VALID_THROUGHPUTS = {"source": "test", "throughputs": {"v100": {"ResNet-50": {"1": 10.5, "2": 19.0},
                                                                "LM": {"1": 3.0}},
                                                       "k80": {"ResNet-50": {"1": 2.5}}}}
VALID_GAVEL_THROUGHPUTS = {"v100": {"('ResNet-50', 1)": {"null": 10.5, "('LM', 1)": [1, 2]},
                                    "('LM', 2)": {"null": 5.0}},
                           "v100_unconsolidated": {"junk": 1}}


def throughputs_physical(table) -> None:
    assert table.gpu_types
    for gpu in table.gpu_types:
        for job in table.job_types:
            for scale in (1, 2, 4, 8):
                value = table.throughput(job, scale, gpu)
                assert math.isfinite(value) and value >= 0


@FUZZ
@given(st.one_of(hostile_json(VALID_THROUGHPUTS), hostile_json(VALID_GAVEL_THROUGHPUTS)))
def test_gavel_throughput_files(data: bytes) -> None:
    from heteroplan.workload.gavel import load_throughputs

    check_file(data, "throughputs.json", load_throughputs, throughputs_physical)


# ---------------------------------------------------------------------------- saved sessions
_SESSIONS: dict[str, Any] = {}


def valid_session() -> dict:
    """A saved session (format 2) with a job of each saved model kind -- a bootstrapped model
    after step timings on two types, an oracle with a noise scale, a table, none -- after a round."""
    if "doc" not in _SESSIONS:
        from heteroplan.cluster import preset
        from heteroplan.perf.goodput import ThroughputTable
        from heteroplan.policies.registry import make_policy
        from heteroplan.scheduling import SchedulingSession, StepTiming

        session = SchedulingSession(preset("sia-64"), make_policy("fifo"))
        session.submit("a", arrival_time=0.0, application="cifar10", perf_model="bootstrap")
        session.submit("b", arrival_time=5.0, application="bert", perf_model="oracle")
        session.submit("c", arrival_time=0.0, application="mine", perf_model=ThroughputTable({"rtx": 2.0}),
                       total_work=50.0)
        session.submit("d", arrival_time=0.0, application="mine", perf_model=None, total_work=5.0)
        for gpu_type in ("rtx", "aws"):
            session.report("a", step_timing=StepTiming(gpu_type, (2,), 32.0, 0.1, 0.01))
        session.report("b", phi=120.0)
        session.round(60.0)
        session.report("c", work_done=10.0)
        _SESSIONS["doc"] = json.loads(session.save(fresh_dir() / "s.json").read_text())
    return _SESSIONS["doc"]


def session_physical(session) -> None:
    records = session.records()
    for r in records:
        assert printable(r.job_id) or r.job_id in "abcd"
        assert math.isfinite(r.arrival_time) and r.arrival_time >= 0
        for t in (r.start_time, r.finish_time):
            assert t is None or (math.isfinite(t) and t >= r.arrival_time)
        assert 0 <= r.restarts and math.isfinite(r.gpu_seconds) and r.gpu_seconds >= 0
        assert 0 <= r.fraction_done <= 1 and r.requested_gpus >= 1
        assert r.phi is None or (math.isfinite(r.phi) and r.phi > 0)
    for job_id in session.job_ids:
        alloc = session.allocation(job_id)
        if alloc is not None:
            assert sum(c for _, c in alloc.placement) == alloc.num_gpus >= 1
    again = fresh_dir() / "again.json"  # what loaded saves and loads back alike
    from heteroplan.policies.registry import make_policy
    from heteroplan.scheduling import SchedulingSession

    assert SchedulingSession.load(session.save(again), session.cluster, make_policy("fifo")).records() == records


@FUZZ
@given(st.data())
def test_saved_session_files(data) -> None:
    from heteroplan.cluster import preset
    from heteroplan.policies.registry import make_policy
    from heteroplan.scheduling import SchedulingSession

    path = fresh_dir() / "session.json"
    path.write_bytes(data.draw(hostile_json(valid_session())))
    check_reads(lambda p: SchedulingSession.load(p, preset("sia-64"), make_policy("fifo")), path, session_physical)


def test_session_files_old_and_damaged(tmp_path) -> None:
    """The control and the examples: the valid file loads; a file of before ``rigid`` and the
    faults' fields loads with their defaults; a missing format, a format as a string, a model on a
    job of kind "none" and a GPU count of 2.5 are refused naming the file, the field and the value."""
    from heteroplan.cluster import preset
    from heteroplan.policies.registry import make_policy
    from heteroplan.scheduling import SchedulingSession

    def load(doc: dict):
        path = tmp_path / "session.json"
        path.write_text(json.dumps(doc))
        return SchedulingSession.load(path, preset("sia-64"), make_policy("fifo"))

    good = valid_session()
    loaded = load(good)
    session_physical(loaded)
    assert loaded.view("a").estimator is not None and loaded.record("b").phi == 120.0 and loaded.rounds == 1
    old = copy.deepcopy(good)
    for job in old["jobs"]:
        for key in ("rigid", "failures", "steps_redone", "gave_up"):
            del job[key]
    assert load(old).records() == loaded.records()
    none_job = next(i for i, j in enumerate(good["jobs"]) if j["model_kind"] == "none")
    for change, field, value in ((lambda d: d.pop("format"), "session.format", None),
                                 (lambda d: d.update(format="2"), "session.format", "2"),
                                 (lambda d: d["jobs"][none_job].update(model={"rtx": 1.0}),
                                  f"session.jobs[{none_job}].model", {"rtx": 1.0}),
                                 (lambda d: d["jobs"][0].update(requested_gpus=2.5),
                                  "session.jobs[0].requested_gpus", 2.5)):
        bad = copy.deepcopy(good)
        change(bad)
        with pytest.raises(InputError) as info:
            load(bad)
        assert info.value.field == f"{tmp_path / 'session.json'}: {field}" and info.value.value == value


def test_every_session_save_writes_loads_back(tmp_path) -> None:
    """What the session's API takes the file takes too: a 1,000-character job id with a tab, a
    reason over several lines, a ThroughputTable keyed by a long type name."""
    from heteroplan.cluster import preset
    from heteroplan.perf.goodput import ThroughputTable
    from heteroplan.policies.registry import make_policy
    from heteroplan.scheduling import SchedulingSession

    session = SchedulingSession(preset("sia-64"), make_policy("fifo"))
    odd = "j\t" * 500
    session.submit(odd, arrival_time=0.0, application="my app\n", perf_model=ThroughputTable({"rtx": 1.0, "x" * 300: 2.0}),
                   total_work=5.0)
    session.round(0.0)
    session.give_up(odd, 30.0, "failed 3 times;\nlast: a rank died")
    loaded = SchedulingSession.load(session.save(tmp_path / "s.json"), preset("sia-64"), make_policy("fifo"))
    assert loaded.records() == session.records() and loaded.record(odd).gave_up.endswith("a rank died")


# ------------------------------------------------------------------------ checkpoint manifests
def valid_checkpoint() -> tuple[Path, dict]:
    """A checkpoint of step 2 (a DCP save of a small model) and its manifest (format 2, with a plan)."""
    if "checkpoint" not in _SESSIONS:
        import warnings

        import torch

        from heteroplan.planner.plan import Plan
        from heteroplan.runtime import checkpoint as ckpt

        root = fresh_dir()
        model = torch.nn.Linear(3, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DCP: "assuming the intent is to save in a single process"
            ckpt.save_state(root, 2, model, torch.optim.SGD(model.parameters(), lr=0.1))
        plan = Plan.from_dict({**VALID_PLAN, "stages": VALID_PLAN["stages"][:1], "microbatches_per_replica": [8, 8]})
        written = ckpt.write_manifest(root, 2, 1, {"loss": 0.5, "plan": plan.to_dict()})
        _SESSIONS["checkpoint"] = (root, written.manifest)
    return _SESSIONS["checkpoint"]


def manifest_physical(checkpoint) -> None:
    if checkpoint is None:  # its files no longer match the (edited) checksums: skipped
        return
    manifest = checkpoint.manifest
    assert checkpoint.step == manifest["step"] == 2 and manifest["num_layers"] >= 1
    assert manifest["files"] and all(len(d) == 64 and "/" not in n for n, d in manifest["files"].items())
    assert checkpoint.loss is None or isinstance(checkpoint.loss, float | int)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.booleans())
def test_checkpoint_manifests(data, resign: bool) -> None:
    """A hostile manifest, its checksum sometimes recomputed (as one who edits it would): the
    newest checkpoint, or none, or an InputError naming the manifest."""
    pytest.importorskip("torch", reason="checkpoints need torch: pip install torch (CPU build)")
    from heteroplan.runtime import checkpoint as ckpt

    source, manifest = valid_checkpoint()
    root = fresh_dir() / "ck"
    shutil.copytree(source, root)
    text = data.draw(hostile_json(manifest))
    if resign:
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            doc = None  # not JSON any more: as it is
        if isinstance(doc, dict):
            doc["manifest_sha256"] = ckpt._manifest_sha256(doc)
            text = json.dumps(doc).encode()
    path = ckpt.step_dir(root, 2) / ckpt.MANIFEST
    path.write_bytes(text)
    check_reads(lambda _: ckpt.latest_checkpoint(root), path, manifest_physical)


def test_a_written_manifest_reads_back_with_its_plan() -> None:
    """The control: the manifest write_manifest wrote decodes to itself (NaN-free loss, the plan's
    dict, the checksum), and a manifest with a key it does not know is refused even re-signed."""
    pytest.importorskip("torch", reason="checkpoints need torch: pip install torch (CPU build)")
    from heteroplan.planner.plan import Plan
    from heteroplan.runtime import checkpoint as ckpt

    source, manifest = valid_checkpoint()
    got = ckpt.latest_checkpoint(source)
    assert got is not None and got.step == 2 and got.manifest == json.loads(json.dumps(manifest)) and got.loss == 0.5
    assert Plan.from_dict(got.manifest["plan"]).num_gpus == 2
    root = fresh_dir() / "ck"
    shutil.copytree(source, root)
    doc = {**manifest, "colour": 1}
    doc["manifest_sha256"] = ckpt._manifest_sha256(doc)
    (ckpt.step_dir(root, 2) / ckpt.MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(InputError, match="manifest.json.*corrupt.*colour"):
        ckpt.latest_checkpoint(root)


# ------------------------------------------------------------------------ the valid documents
def test_the_valid_documents_read(tmp_path) -> None:
    """The control: every format's valid document reads (so the properties test more than refusals)."""
    from heteroplan.cluster import Cluster
    from heteroplan.perf.sailor_network import NETWORK_FILES, load_network
    from heteroplan.perf.sailor_profiles import load_model_profile
    from heteroplan.planner.model.sim_config import load_platforms
    from heteroplan.planner.plan import Plan
    from heteroplan.sim.sweep.spec import parse_sweep
    from heteroplan.workload.gavel import load_throughputs
    from heteroplan.workload.sia import read_sia_workload

    for doc in (VALID_PLAN, VALID_SAILOR_PLAN):
        (tmp_path / "p.json").write_text(json.dumps(doc))
        plan_physical(Plan.from_json(tmp_path / "p.json"))
    (tmp_path / "profiles" / "m").mkdir(parents=True)
    (tmp_path / "llm_info.json").write_text(json.dumps(VALID_LLM_INFO))
    (tmp_path / "profiles" / "m" / "A100-40.json").write_text(json.dumps(VALID_PROFILE))
    profile_physical(load_model_profile("m", tmp_path))
    for name, doc in zip(NETWORK_FILES, (VALID_HOMO, VALID_MULTI, VALID_EGRESS), strict=True):
        (tmp_path / name).write_text(json.dumps(doc))
    net = load_network(tmp_path)
    assert net.zones == ("za", "zb") and net.egress_per_gb("za", "zb") == 0.01
    network_physical(net)
    (tmp_path / "sim_config.json").write_text(json.dumps(VALID_SIM_CONFIG))
    table = load_platforms(tmp_path)
    assert table.for_gpu("A100-40").compute_scale == 1.02
    sim_config_physical(table)
    for doc in (VALID_CLUSTER, VALID_COUNTS_CLUSTER):
        (tmp_path / "c.json").write_text(json.dumps(doc))
        cluster_physical(Cluster.from_json(tmp_path / "c.json"))
    sweep_physical(parse_sweep(VALID_SWEEP))
    (tmp_path / "w.csv").write_text("\n".join(",".join(r) for r in [SIA_HEADER, *SIA_ROWS]) + "\n")
    workload_physical(read_sia_workload(tmp_path / "w.csv"))
    from heteroplan.perf.measurements import load_placements

    (tmp_path / "p.csv").write_text("\n".join(",".join(r) for r in [PLACEMENTS_HEADER, *PLACEMENTS_ROWS]) + "\n")
    measurements_physical(load_placements(tmp_path / "p.csv"))
    for doc in (VALID_THROUGHPUTS, VALID_GAVEL_THROUGHPUTS):
        (tmp_path / "t.json").write_text(json.dumps(doc))
        throughputs_physical(load_throughputs(tmp_path / "t.json"))
