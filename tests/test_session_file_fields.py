"""The saved session's job fields are a written list (issue 48): every field of the session's job
record is either saved under its name in :data:`~heteroplan.scheduling.storage.JOB_FIELDS`, saved
in its own form, or deliberately not saved; a field added to the record without a decision fails."""

from __future__ import annotations

from dataclasses import fields

from heteroplan.scheduling.session_job import SessionJob
from heteroplan.scheduling.storage import JOB, JOB_FIELDS

SAVED_OWN_FORM = {"allocation", "estimator", "model_kind"}  # "allocation", "model" (by its kind), "model_kind"
NOT_SAVED = {"admitted_on", "parked"}  # admission's cache and verdict: recomputed at the next round


def test_every_job_field_is_saved_by_name_or_deliberately_not() -> None:
    names = {f.name for f in fields(SessionJob)}
    assert set(JOB_FIELDS) <= names, "JOB_FIELDS names a field the job record lacks"
    assert names == set(JOB_FIELDS) | SAVED_OWN_FORM | NOT_SAVED


def test_the_file_spec_holds_every_saved_field() -> None:
    assert set(JOB_FIELDS) | {"model_kind", "model", "allocation"} == set(JOB.required) | set(JOB.optional)
