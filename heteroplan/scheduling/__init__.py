"""The scheduling session: one place that tracks each job's life between rounds.

The simulator (:mod:`heteroplan.sim`), the runtime's round executor and a user's own loop
all drive a :class:`SchedulingSession`: submit jobs, ask for a round's typed
:class:`Decision` per job, report what was observed, finish jobs; save and restore it as JSON,
with the policy's own state between rounds (:mod:`heteroplan.policies.state`).
See ``docs/own_loop.md``.
"""

from heteroplan.scheduling.admission import Parked, ParkReason
from heteroplan.scheduling.decisions import Decision, DecisionKind, RoundDecisions, StepTiming
from heteroplan.scheduling.policy_check import check_policy, restart_delay_of
from heteroplan.scheduling.records import JobRecord
from heteroplan.scheduling.session import SchedulingSession, UnreportedJobWarning
from heteroplan.scheduling.storage import SESSION_FORMAT, PolicyStateLostWarning

__all__ = [
    "Decision",
    "DecisionKind",
    "JobRecord",
    "ParkReason",
    "Parked",
    "PolicyStateLostWarning",
    "RoundDecisions",
    "SESSION_FORMAT",
    "SchedulingSession",
    "StepTiming",
    "UnreportedJobWarning",
    "check_policy",
    "restart_delay_of",
]
