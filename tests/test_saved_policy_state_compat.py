"""Sessions saved before Hadar, Gavel and Pollux were split into one class per mechanism (issue 48)
still load, and the restored policies decide the next round exactly as the code that saved them did.

Oracle: ``tests/data/sessions/<policy>.json`` and the next round's decisions beside it
(``<policy>.next.json``) were both written by the code of commit bd34548 (the sessions of
``tests/test_scheduling_policy_state.py``: the first 8 jobs of philly/workload-1 on sia-64).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from heteroplan.cluster import preset
from heteroplan.policies.registry import make_policy
from heteroplan.scheduling import SchedulingSession

DATA = Path(__file__).resolve().parent / "data" / "sessions"
POLICIES = ("gavel", "gavel-sia", "pollux", "pollux-sia", "hadar", "hadar-committed", "hadare")


@pytest.mark.parametrize("name", POLICIES)
def test_a_session_saved_before_the_split_decides_as_before(name: str) -> None:
    expected = json.loads((DATA / f"{name}.next.json").read_text())
    session = SchedulingSession.load(DATA / f"{name}.json", preset("sia-64"), make_policy(name))
    got = [[d.job_id, d.kind.value, repr(d.allocation), d.restore_s] for d in session.round(expected["now"])]
    assert got == expected["decisions"]
    assert len(got) >= 4 and any(kind != "keep" for _, kind, _, _ in got)  # a round with decisions to make
