"""The documentation builds with warnings as errors, its code runs, and every heteroplan name it
shows (module, function, class, attribute) exists."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_docs_build_strict(tmp_path: Path) -> None:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "site" / "api" / "index.html").exists()
    # math is MathML made at build time: nothing left for a CDN script to typeset
    hadar = (tmp_path / "site" / "hadar" / "index.html").read_text()
    assert "<math" in hadar and 'class="arithmatex"' not in hadar
    pages = [p.read_text() for p in (tmp_path / "site").rglob("*.html")]
    assert not any("mathjax" in p.lower() or "fonts.googleapis" in p for p in pages)


def test_quickstart_code_blocks_run() -> None:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 4
    for code in blocks:
        namespace: dict[str, object] = {}
        exec(compile(code, "quickstart.md", "exec"), namespace)  # noqa: S102 - our own docs


def test_jupyter_page_code_blocks_run(tmp_path: Path, monkeypatch) -> None:
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "jupyter.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) == 3
    namespace: dict[str, object] = {}
    for code in blocks:  # the third block uses the second one's pool
        exec(compile(code, "jupyter.md", "exec"), namespace)  # noqa: S102 - our own docs
    front, result = namespace["front"], namespace["result"]
    assert [r.summary().finished for r in namespace["results"]] == [6, 6]  # the summary block
    assert result.cost_per_iteration_usd <= 0.07
    # the page's claims: the budget plan is on the front and pipelines over both A100 zones
    assert any(abs(p.throughput - result.throughput_iter_s) < 1e-9 for p in front)
    assert {z for _, z in result.plan.gpus_by_type_zone()} == {"us-central1-a", "us-central1-b"}
    assert list(tmp_path.iterdir()) == []  # the docs' code writes no files


def test_runtime_page_code_blocks_run(tmp_path: Path, monkeypatch) -> None:
    """The runtime guide's examples train for real and end where the page says."""
    pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "docs" / "runtime.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "__main__" in b]
    assert len(blocks) == 5  # plan executor, round executor, profiler + planner, calibration, GPU recipe
    plan_ns: dict[str, object] = {"__name__": "__main__"}
    exec(compile(blocks[0], "runtime.md", "exec"), plan_ns)  # noqa: S102 - our own docs
    result = plan_ns["result"]
    assert result.final_step == 20 and result.checkpoint.step == 20 and result.losses[-1] < result.losses[0]
    rounds_ns: dict[str, object] = {"__name__": "__main__"}
    exec(compile(blocks[1], "runtime.md", "exec"), rounds_ns)  # noqa: S102 - our own docs
    assert all(o.finish_time is not None and o.steps_done == 200 for o in rounds_ns["outcomes"].values())
    exec(compile(blocks[2], "runtime.md", "exec"), {"__name__": "__main__"})  # noqa: S102 - asserts inside
    assert (tmp_path / "my-profile" / "profiles" / "my-lm" / "cpu.json").is_file()
    # the calibration block imports cleanly as a module (its 30 measured rounds run under the guard)
    exec(compile(blocks[3], "runtime.md", "exec"), {"__name__": "docs"})  # noqa: S102 - our own docs
    # the GPU recipe, on this CPU: device cpu, no graphs, a tiny model in place of the 320M GPT
    recipe = blocks[4]
    for gpu, cpu in [('device="cuda"', 'device="cpu"'), ("cuda_graphs=True", "cuda_graphs=False"),
                     ("TinyGPTTask(vocab=8192, seq_len=512, d_model=1024, n_layers=24, n_heads=16)",
                      "TinyGPTTask(vocab=64, seq_len=16, d_model=32, n_layers=2, n_heads=2)")]:
        assert gpu in recipe
        recipe = recipe.replace(gpu, cpu)
    recipe_ns: dict[str, object] = {"__name__": "__main__"}
    exec(compile(recipe, "runtime.md", "exec"), recipe_ns)  # noqa: S102 - our own docs
    info = json.loads((tmp_path / "gpu-profile" / "llm_info.json").read_text())
    assert info["gpt-bf16"]["1"]["0"]["precision"] == "bf16" and info["gpt-bf16"]["1"]["0"]["cuda_graphs"] is False
    assert (tmp_path / "gpu-profile" / "profiles" / "gpt-bf16" / "H100.json").is_file()


@pytest.mark.parametrize("page", ["model", "sailor", "goodput", "hadar", "own_loop", "sia", "topology"])
def test_guide_code_blocks_run(page: str, tmp_path: Path, monkeypatch) -> None:
    """Every Python block of the page runs as written (one namespace per page, in order),
    from any directory: no path into the checkout (an installed wheel has no tests/ or docs/)."""
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / f"{page}.md").read_text(), flags=re.S)
    assert blocks
    namespace: dict[str, object] = {"__name__": "__main__"}
    for code in blocks:
        exec(compile(code, f"{page}.md", "exec"), namespace)  # noqa: S102 - our own docs


def test_readme_code_blocks_run(monkeypatch, tmp_path: Path) -> None:
    """The README's taste runs as written and prints the table of the three policies it names."""
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    assert len(blocks) == 1
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102 - our own docs
    frame = namespace["results"].to_dataframe()  # one row per policy, indexed by its name
    assert frame.index.tolist() == ["sia", "gavel", "fifo"] and frame["finished"].tolist() == [30, 30, 30]


def test_cluster_page_code_blocks_build_the_jobs() -> None:
    """The Ray page's block up to its main-module guard (joining a Ray cluster is not for CI; the
    Ray backend's own tests run that part): the imports and the emulated jobs it builds."""
    pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "cluster.md").read_text(), flags=re.S)
    assert len(blocks) == 1 and 'if __name__ == "__main__":' in blocks[0]
    namespace: dict[str, object] = {"__name__": "docs"}
    exec(compile(blocks[0], "cluster.md", "exec"), namespace)  # noqa: S102 - our own docs
    assert len(namespace["jobs"]) == 4


# --------------------------------------------------------------------- names the docs show
DOC_PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
EXTRAS = {"torch": "torch==2.13.0", "ray": "'heteroplan[ray]'"}  # extra -> what installs it (the runtime needs torch)
# `Class.attr` spans of the docs that are not heteroplan's class of that name
FOREIGN = {("Cluster", "step")}  # sia.md: the Sia artifact's simulator


def doc_text(page: Path) -> str:
    """The page, with api.md's "Removed names" section (names that are gone, on purpose) blanked
    out line for line so that line numbers stay."""
    text = page.read_text()
    if page.name == "api.md":
        start = text.index("\n## Removed names")
        end = text.find("\n## ", start + 1) % (len(text) + 1)
        text = text[:start] + "\n" * text[start:end].count("\n") + text[end:]
    return text


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def shown_names(page: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every heteroplan name the page shows: what its Python blocks import
    (``from heteroplan.x import a``, ``import heteroplan.x``) and every ``heteroplan.a.b`` of its text."""
    text, names = doc_text(page), []
    for block in re.finditer(r"```python\n(.*?)```", text, flags=re.S):
        first = line_of(text, block.start(1))
        for node in ast.walk(ast.parse(block.group(1))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "heteroplan":
                names += [(first + node.lineno - 1, f"{node.module}.{a.name}") for a in node.names]
            elif isinstance(node, ast.Import):
                names += [(first + node.lineno - 1, a.name) for a in node.names if a.name.split(".")[0] == "heteroplan"]
    names += [(line_of(text, m.start()), m.group(0)) for m in re.finditer(r"(?<![\w./-])heteroplan(?:\.\w+)+", text)]
    return names


def resolve(name: str) -> object:
    """The object ``name`` names: its longest importable module prefix, then attributes; an
    AttributeError when the rest is missing, an ImportError when a module fails to import."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if not (exc.name and f"{module}.".startswith(f"{exc.name}.")):  # it exists but imports something missing
                raise
            continue
        for attr in parts[i:]:
            if inspect.isclass(obj) and not hasattr(obj, attr) and has_attribute(obj, attr):
                return obj  # a field without a class-level default
            obj = getattr(obj, attr)
        return obj
    raise AttributeError(f"no module {parts[0]}")


def extra_missing(exc: ImportError) -> str | None:
    """The optional extra (torch, ray) an import failed for, else None."""
    return next((extra for extra in EXTRAS if re.search(rf"\b{extra}\b", f"{exc} {exc.name}")), None)


def check_all(checks, what: str) -> None:
    """Run every (where, check) pair; fail listing every stale one; skip (after checking the rest)
    naming the extras some needed."""
    stale, extras = [], set()
    for where, check in checks:
        try:
            check()
        except ImportError as exc:
            if (extra := extra_missing(exc)) is None:
                raise
            extras.add(extra)
        except AttributeError as exc:
            stale.append(f"{where}: {exc}")
    assert not stale, f"{what}:\n" + "\n".join(stale)
    if extras:
        pytest.skip(f"the rest checked; names that need {' and '.join(sorted(extras))} were not: "
                    f"pip install {' '.join(EXTRAS[e] for e in sorted(extras))}")


def test_code_blocks_and_text_name_heteroplan_names_that_exist() -> None:
    """Every heteroplan module, function, class or constant the docs show (imported in a Python
    block or written out as ``heteroplan.a.b``) exists: a renamed or removed name fails here,
    naming the page and line."""
    checks = [(f"{page.name}:{line}: {name}", lambda name=name: resolve(name))
              for page in DOC_PAGES for line, name in shown_names(page)]
    assert len(checks) > 300
    check_all(checks, "the docs show names that do not exist (see docs/api.md, 'Removed names')")


def test_code_blocks_command_lines_use_flags_the_commands_have() -> None:
    """Every flag of a ``heteroplan CMD ...`` line the docs show (blocks and inline spans) is one
    that CMD has: a removed or misspelt flag (``heteroplan plan --explain``) fails here."""
    from heteroplan.cli import build_parser

    parser = build_parser()
    general = {o for a in parser._actions for o in a.option_strings}
    commands = {name: general | {o for a in sub._actions for o in a.option_strings}
                for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name, sub in a.choices.items()}
    stale, lines = [], 0
    for page in DOC_PAGES:
        text = doc_text(page).replace("\\\n", " ")  # a command continued on the next line
        for m in re.finditer(r"(?<![\w/.-])heteroplan((?: --?[a-z][\w-]*)*) ([a-z]+)\b([^`\n#]*)", text):
            if m.group(2) not in commands:
                continue  # prose ("heteroplan plans and schedules ...")
            lines += 1
            for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", m.group(1) + m.group(3)):
                if flag not in commands[m.group(2)]:
                    stale.append(f"{page.name}: heteroplan {m.group(2)} {flag}  (in: {m.group(0).strip()})")
    assert lines > 50
    assert not stale, "the docs show flags the commands do not have:\n" + "\n".join(stale)


def test_code_blocks_name_check_rejects_the_removed_names() -> None:
    """The check above can fail: every dotted name in the "removed" column of api.md's Removed
    names tables is one it rejects (a removed function whose module keeps its name aside)."""
    text = (ROOT / "docs" / "api.md").read_text()
    start = text.index("\n## Removed names")
    section = text[start:text.find("\n## ", start + 1) % (len(text) + 1)]
    removed = {name for row in re.findall(r"^\| (.*?) \|", section, flags=re.M) if not row.startswith("the function")
               for name in re.findall(r"(?<![\w./-])heteroplan(?:\.\w+)+", row)}
    assert len(removed) >= 12
    for name in sorted(removed):
        try:
            resolve(name)
        except AttributeError:
            continue
        except ImportError as exc:  # heteroplan.runtime without torch: unchecked here
            if extra_missing(exc) is None:
                raise
            continue
        pytest.fail(f"{name} is listed as removed but resolves")


def public_classes() -> tuple[dict[str, list[type]], set[str]]:
    """heteroplan's public classes by name, and the modules that could not be imported for want
    of an extra (their classes unchecked)."""
    import heteroplan

    classes: dict[str, list[type]] = {}
    unchecked = set()
    for info in pkgutil.walk_packages(heteroplan.__path__, "heteroplan."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError as exc:
            if extra_missing(exc) is None:
                raise
            unchecked.add(extra_missing(exc))
            continue
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__.startswith("heteroplan") and not name.startswith("_"):
                classes.setdefault(name, []).append(obj)
    return classes, unchecked


def has_attribute(cls: type, attr: str) -> bool:
    """A class attribute, method, property, enum member or (dataclass) field, annotated or not."""
    return hasattr(cls, attr) or any(attr in getattr(k, "__annotations__", {}) for k in cls.__mro__)


def test_code_blocks_and_text_name_attributes_that_exist() -> None:
    """Every ``Class.attr`` in the docs' code (inline spans and blocks), where Class is one of
    heteroplan's public classes, names an attribute that class has: ``JobRecord.jct``,
    ``PlanResult.extra`` and the other removed attributes fail here."""
    classes, unchecked = public_classes()
    stale = []
    for page in DOC_PAGES:
        text = doc_text(page)
        for span in re.finditer(r"```.*?```|`[^`\n]+`", text, flags=re.S):
            for m in re.finditer(r"(?<![\w.])([A-Z]\w*)\.([a-z_]\w*)\b", span.group(0)):
                cls, attr = m.groups()
                if cls in classes and (cls, attr) not in FOREIGN and not any(has_attribute(c, attr) for c in classes[cls]):
                    stale.append(f"{page.name}:{line_of(text, span.start() + m.start())}: {cls}.{attr}")
    assert not stale, "the docs name attributes their classes do not have:\n" + "\n".join(stale)
    if unchecked:
        pytest.skip(f"the rest checked; the classes of modules that need {' and '.join(sorted(unchecked))} were not: "
                    f"pip install {' '.join(EXTRAS[e] for e in sorted(unchecked))}")


def test_sweeps_page_toml_code_blocks_parse(tmp_path: Path) -> None:
    """The sweeps page's annotated sweep file is a valid one, given the Sia CSV it names
    (``traces/mine.csv`` beside it): every option it shows reaches the cells."""
    from heteroplan.sim.sweep import load_sweep
    from heteroplan.workload.sia import bundled_workload, write_sia_workload

    blocks = re.findall(r"```toml\n(.*?)```", (ROOT / "docs" / "sweeps.md").read_text(), flags=re.S)
    assert len(blocks) == 1 and 'file = "traces/mine.csv"' in blocks[0]
    (tmp_path / "traces").mkdir()
    write_sia_workload(bundled_workload("philly/workload-1")[:5], tmp_path / "traces" / "mine.csv")
    (tmp_path / "small.toml").write_text(blocks[0])
    cells = load_sweep(tmp_path / "small.toml").cells()
    # workloads (2 bundled + mine) x 1 cluster x 1 fidelity x 3 seeds x 2 policies
    assert len(cells) == 3 * 3 * 2
    assert {c.policy.label for c in cells} == {"sia", "sia-lp"}
