"""Shared pytest configuration: optional extras (torch, ray) in CI.

- ``HETEROPLAN_REQUIRE=torch,ray`` (``HETEROPLAN_REQUIRE_TORCH=1`` means ``torch``) turns a test
  skipped for want of one of those packages into a failure, so CI cannot silently skip the runtime
  or Ray tests once it has installed them.
- ``HETEROPLAN_SKIP_LOG=FILE`` appends the node id of every test (or module) skipped for want of
  torch or ray to FILE, one a line. ``.ci/run`` runs the suite without the extras first, then
  installs them and runs exactly those node ids again.

Fixtures shared by the test modules: ``cli_error`` (run the CLI expecting exit code 2, get stderr);
every test's matplotlib figures are closed after it (``_close_figures``).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable

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
