"""Shared pytest configuration: optional extras (torch, ray) in CI.

- ``HETEROPLAN_REQUIRE=torch,ray`` (``HETEROPLAN_REQUIRE_TORCH=1`` means ``torch``) turns a test
  skipped for want of one of those packages into a failure, so CI cannot silently skip the runtime
  or Ray tests once it has installed them.
- ``HETEROPLAN_SKIP_LOG=FILE`` appends the node id of every test (or module) skipped for want of
  torch or ray to FILE, one a line. ``.ci/run`` runs the suite without the extras first, then
  installs them and runs exactly those node ids again.

Fixtures shared by the test modules: ``cli_error`` (run the CLI expecting exit code 2, get stderr);
``one_rank_group`` (a one-process gloo group, torch only); every test's matplotlib figures are
closed after it (``_close_figures``); ``docs_block`` gives ``run_docs_block(page, marker)``, which
runs the one Python block of ``docs/<page>`` that contains ``marker`` and returns its namespace.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

EXTRAS = ("torch", "ray")
_required = {name.strip() for name in os.environ.get("HETEROPLAN_REQUIRE", "").split(",") if name.strip()}
if os.environ.get("HETEROPLAN_REQUIRE_TORCH", "") not in ("", "0"):
    _required.add("torch")
REQUIRED = frozenset(_required)
SKIP_LOG = os.environ.get("HETEROPLAN_SKIP_LOG", "")


def _missing_extra(report) -> str | None:
    """The extra a skipped report was skipped for (its reason names it), else None."""
    text = str(report.longrepr)
    return next((name for name in EXTRAS if re.search(rf"\b{name}\b", text, re.IGNORECASE)), None)


def _check(report, nodeid: str) -> None:
    if not report.skipped:
        return
    extra = _missing_extra(report)
    if extra is None:
        return
    if SKIP_LOG:
        with open(SKIP_LOG, "a", encoding="utf-8") as log:
            log.write(nodeid + "\n")
    if extra in REQUIRED:
        report.outcome = "failed"
        report.longrepr = f"HETEROPLAN_REQUIRE names {extra} but {nodeid} was skipped: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _check(outcome.get_result(), collector.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _check(outcome.get_result(), item.nodeid)


@pytest.fixture
def cli_error(capsys) -> Callable[[list[str]], str]:
    """``cli_error(argv)``: run ``heteroplan argv`` expecting exit code 2 (argparse or an InputError),
    return what it wrote to stderr (for the test to check it names the field and the value)."""
    from heteroplan.cli import main

    def run(argv: list[str]) -> str:
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
        assert code == 2, argv
        return capsys.readouterr().err

    return run


@pytest.fixture(autouse=True)
def _close_figures():
    """Close the figures a test's plotting left open (pyplot keeps them; past 20 it warns)."""
    yield
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")


@pytest.fixture
def one_rank_group(tmp_path):
    """A one-process ``torch.distributed`` gloo group (its ``WORLD``), destroyed after the test;
    the test is skipped where a group already exists in this process."""
    pytest.importorskip("torch", reason="the runtime tests need torch: pip install torch==2.13.0 (CPU wheel: --index-url https://download.pytorch.org/whl/cpu)")
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def run_docs_block(page: str, marker: str) -> dict[str, object]:
    """Run the one ```python block of ``docs/<page>`` that contains ``marker`` (compiled without
    this module's ``__future__`` flags, as a reader's script would be); its namespace."""
    text = (Path(__file__).resolve().parent.parent / "docs" / page).read_text(encoding="utf-8")
    (code,) = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if marker in b]
    namespace: dict[str, object] = {"__name__": "docs"}
    exec(compile(code, page, "exec", dont_inherit=True), namespace)  # noqa: S102 - our own docs
    return namespace


@pytest.fixture(scope="session")
def docs_block() -> Callable[[str, str], dict[str, object]]:
    """:func:`run_docs_block`, for test modules (which do not import conftest)."""
    return run_docs_block
