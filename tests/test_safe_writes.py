"""Issue 47 (item 3): writes that cannot be raced or redirected, names that cannot leave their
directory, terminal text that cannot drive the terminal."""

from __future__ import annotations

import json
import multiprocessing
import os
import string
import sys
import threading
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heteroplan.atomic_json import write_json_atomic, write_text_atomic
from heteroplan.cli import main
from heteroplan.errors import InputError
from heteroplan.names import MAX_NAME_BYTES, path_component, printable

HOSTILE = st.one_of(
    st.text(max_size=40),  # all of unicode
    st.lists(st.sampled_from(["/", "\\", ".", "..", "\x00", "\x1b", "\n", "a", "é", "\u202e", " "]),
             max_size=12).map("".join),
    st.sampled_from(["..", ".", "", "a/../b", "../escaped", "/etc/passwd", "x" * (MAX_NAME_BYTES + 1),
                     "é" * (MAX_NAME_BYTES // 2 + 1), "ok-name_1.2", "日本語", "a\x00b"]),
)


# ------------------------------------------------------------------ path_component
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=HOSTILE)
def test_a_name_either_stays_inside_its_directory_or_is_refused(tmp_path: Path, name: str) -> None:
    try:
        path_component("name", name)
    except InputError as exc:
        assert exc.field == "name"
        return
    target = (tmp_path / name).resolve()
    assert target.parent == tmp_path.resolve() and target.name == name  # exactly one component, inside
    assert not any(unicodedata.category(c).startswith("C") for c in name)
    assert len(name.encode("utf-8")) <= MAX_NAME_BYTES
    target.write_text("x")  # the file system takes it
    assert [p.name for p in tmp_path.iterdir()] == [name]
    target.unlink()


@pytest.mark.parametrize("name", ["..", ".", "", "  ", "../../escaped", "a/b", "a\\b", "nul\x00", "esc\x1b[2J",
                                  "new\nline", "bidi\u202eexe", "x" * (MAX_NAME_BYTES + 1), 7, None])
def test_unsafe_names_are_refused_naming_the_field(name: object) -> None:
    with pytest.raises(InputError, match="policy name"):
        path_component("policy name", name)


def test_ordinary_names_pass_unchanged() -> None:
    for name in ("sia", "gavel-ftf", "job.7", "日本語", "x" * MAX_NAME_BYTES, ".hidden", "a b"):
        assert path_component("name", name) == name


# ------------------------------------------------------------------ printable
@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_printable_never_lets_a_control_character_through(text: str) -> None:
    out = printable(text)
    assert all(unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") for c in out)
    if all(c in string.ascii_letters + string.digits + " -_." for c in text):
        assert out == text  # ordinary text is left alone


def test_printable_escapes_what_would_drive_a_terminal() -> None:
    assert printable("zone\x1b[2J\x1b]0;pwned\x07") == "zone\\x1b[2J\\x1b]0;pwned\\x07"
    assert printable("a\rb\tc\u202ed\u2028") == "a\\x0db\\x09c\\u202ed\\u2028"
    assert printable("two\nlines\x1b", keep="\n") == "two\nlines\\x1b"
    assert printable("ünïcødé 日本") == "ünïcødé 日本"


def test_cluster_names_from_a_file_are_printed_escaped(tmp_path: Path, capsys) -> None:
    cluster = {"name": "evil\x1b[2J", "gpu_types": [{"name": "a100\x1b[31m", "memory_gb": 80, "gpus_per_node": 8}],
               "nodes": [{"name": "n0", "gpu_type": "a100\x1b[31m", "num_gpus": 8}]}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(cluster))
    assert main(["clusters", str(path)]) == 2  # names must be printable (heteroplan.schema refuses them)
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b[" in err  # the refusal names the value, escaped


def test_an_error_naming_a_field_from_a_file_is_printed_escaped(tmp_path: Path, capsys) -> None:
    cluster = {"name": "c", "gpu_types": [{"name": "a100", "memory_gb": 80, "gpus_per_node": 8}],
               "nodes": [{"name": "n\x1b[2J\r", "gpu_type": "nope", "num_gpus": 8}]}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(cluster))
    assert main(["clusters", str(path)]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err and "n\\x1b[2J" in err  # refused by the decoder, escaped


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(min_size=1, max_size=12), gpu=st.text(min_size=1, max_size=8))
def test_no_name_from_a_cluster_file_reaches_the_terminal_raw(tmp_path: Path, capsys, name: str, gpu: str) -> None:
    cluster = {"name": name, "gpu_types": [{"name": gpu, "memory_gb": 80, "gpus_per_node": 8}],
               "nodes": [{"name": name, "gpu_type": gpu, "num_gpus": 8, "zone": name}]}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(cluster))
    main(["clusters", str(path)])
    captured = capsys.readouterr()
    shown = (captured.out + captured.err).replace("\n", "")
    assert not [c for c in shown if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")]


# ------------------------------------------------------------------ atomic writes
def _plant(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    return out, outside


def test_a_symlink_planted_in_the_output_directory_cannot_redirect_the_write(tmp_path: Path) -> None:
    out, outside = _plant(tmp_path)
    (outside / "victim.json").write_text("precious")
    (out / "results.json").symlink_to(outside / "victim.json")
    with pytest.raises(InputError, match="outside the output directory"):
        write_json_atomic(out / "results.json", {"a": 1}, root=out)
    assert (outside / "victim.json").read_text() == "precious"
    (out / "sub").symlink_to(outside, target_is_directory=True)  # a directory on the way
    with pytest.raises(InputError, match="outside the output directory"):
        write_json_atomic(out / "sub" / "x.json", {"a": 1}, root=out)
    assert sorted(p.name for p in outside.iterdir()) == ["victim.json"]


def test_a_symlink_at_the_old_predictable_temp_name_is_never_followed(tmp_path: Path) -> None:
    out, outside = _plant(tmp_path)
    for pid in (os.getpid(), 0, 1):
        (out / f".results.json.{pid}.tmp").symlink_to(outside / f"pwned-{pid}")
    write_json_atomic(out / "results.json", {"a": 1}, root=out)
    assert json.loads((out / "results.json").read_text()) == {"a": 1}
    assert not list(outside.iterdir())
    assert not (out / "results.json").is_symlink()


def test_simulate_refuses_a_planted_symlink_in_out(tmp_path: Path, capsys) -> None:
    out, outside = _plant(tmp_path)
    (out / "fifo.json").symlink_to(outside / "escaped.json")
    code = main(["simulate", "--jobs", "2", "--policy", "fifo", "--out", str(out), "--quiet"])
    assert code == 2 and "outside the output directory" in capsys.readouterr().err
    assert not list(outside.iterdir())


def test_simulate_refuses_a_planted_symlink_for_its_plots(tmp_path: Path, capsys) -> None:
    out, outside = _plant(tmp_path)
    (out / "jct_cdf.png").symlink_to(outside / "escaped.png")
    code = main(["simulate", "--jobs", "2", "--policy", "fifo", "--out", str(out), "--quiet"])
    assert code == 2 and "outside the output directory" in capsys.readouterr().err
    assert not list(outside.iterdir()) and (out / "fifo.json").is_file()  # the results were kept


def test_a_new_file_gets_the_usual_permissions(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    write_text_atomic(tmp_path / "f.txt", "x")
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o666 & ~umask
    (tmp_path / "g.txt").write_text("old")
    (tmp_path / "g.txt").chmod(0o640)
    write_text_atomic(tmp_path / "g.txt", "new")
    assert (tmp_path / "g.txt").stat().st_mode & 0o777 == 0o640 and (tmp_path / "g.txt").read_text() == "new"


def _document(writer: int, size: int = 2000) -> dict:
    return {"writer": writer, "payload": [writer] * size}


def _is_one_document(path: Path, writers: range) -> bool:
    data = json.loads(path.read_text())
    return data["writer"] in writers and data == _document(data["writer"])


def test_threads_saving_one_file_never_lose_a_save_or_tear_it(tmp_path: Path) -> None:
    target = tmp_path / "session.json"
    errors: list[BaseException] = []
    seen_torn: list[str] = []

    def save(writer: int) -> None:
        try:
            for _ in range(15):
                write_json_atomic(target, _document(writer))
                if not _is_one_document(target, range(8)):
                    seen_torn.append(target.read_text()[:80])
        except BaseException as exc:  # a lost save (the old code: FileNotFoundError on its temp file)
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not seen_torn
    assert _is_one_document(target, range(8))
    assert [p.name for p in tmp_path.iterdir()] == ["session.json"]  # no temporary file left


def _save_many(path: str, writer: int) -> None:
    for _ in range(15):
        write_json_atomic(Path(path), _document(writer))


@pytest.mark.skipif(sys.platform == "win32", reason="fork start method")
def test_processes_saving_one_file_never_lose_a_save_or_tear_it(tmp_path: Path) -> None:
    target = tmp_path / "session.json"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_save_many, args=(str(target), w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]  # every save went through
    assert _is_one_document(target, range(4))
    assert [p.name for p in tmp_path.iterdir()] == ["session.json"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=20), max_size=5),
                     min_size=2, max_size=5))
def test_concurrent_saves_leave_one_of_the_documents(tmp_path: Path, docs: list[dict]) -> None:
    target = tmp_path / "doc.json"
    threads = [threading.Thread(target=write_json_atomic, args=(target, d)) for d in docs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert json.loads(target.read_text()) in docs
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]
    target.unlink()


# ------------------------------------------------------------------ names that become paths
def test_a_policy_named_to_escape_out_is_refused_before_the_run(tmp_path: Path, capsys) -> None:
    from heteroplan.policies.base import PolicyBase
    from heteroplan.policies.registry import POLICIES, make_policy, register_policy

    class Escaping(PolicyBase):
        name = "../../escaped"

        def allocate(self, cluster, jobs, now):
            return make_policy("fifo").allocate(cluster, jobs, now)

    register_policy("escaping-test", Escaping)
    try:
        code = main(["simulate", "--jobs", "2", "--policy", "escaping-test", "--out", str(tmp_path / "o"), "--quiet"])
    finally:
        POLICIES._added.pop("escaping-test")
    assert code == 2 and "policy name" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["o"]
    with pytest.raises(InputError, match="path separator"):
        register_policy("../x", Escaping)


def test_a_runtime_job_id_cannot_name_a_directory_outside_the_workdir() -> None:
    pytest.importorskip("torch", reason="the runtime needs torch")
    from heteroplan.runtime.rounds import RuntimeJob

    with pytest.raises(InputError, match="job_id"):
        RuntimeJob(job_id="../../etc", task=None, steps=1, global_batch_size=1, max_gpus=1)  # type: ignore[arg-type]


def test_a_sweep_name_cannot_leave_the_sweeps_directory(tmp_path: Path, monkeypatch, capsys) -> None:
    sweep = tmp_path / "s.toml"
    sweep.write_text('name = "../../escaped"\nsimulator = "sia"\njobs = 2\n\n[[workloads]]\nbundled = '
                     '["philly/workload-1"]\n\n[[clusters]]\npreset = "sia-64"\n\n[[policies]]\nname = "fifo"\n')
    monkeypatch.chdir(tmp_path)
    code = main(["sweep", str(sweep), "--inprocess", "--quiet"])
    assert code == 2 and "path separator" in capsys.readouterr().err
    assert not (tmp_path.parent / "escaped").exists()


def test_threads_saving_one_session_leave_a_file_that_loads(tmp_path: Path) -> None:
    from heteroplan import SchedulingSession
    from heteroplan.cluster import preset
    from heteroplan.policies.registry import make_policy

    session = SchedulingSession(preset("sia-64"), make_policy("fifo"))
    for i in range(5):
        session.submit(f"job-{i}", arrival_time=0.0, application="cifar10", perf_model="oracle", elastic=False)
    session.round(0.0)
    path = tmp_path / "session.json"
    errors: list[BaseException] = []

    def save() -> None:
        try:
            for _ in range(10):
                session.save(path)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=save) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    loaded = SchedulingSession.load(path, preset("sia-64"), make_policy("fifo"))
    assert sorted(loaded._jobs) == [f"job-{i}" for i in range(5)]
    assert [p.name for p in tmp_path.iterdir()] == ["session.json"]
