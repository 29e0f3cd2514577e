"""One class per mechanism (issue 48): the registry's ``mechanism`` option picks the class, Gavel's
objective is an enum that still takes its strings, and each class's options are its own."""

from __future__ import annotations

import pytest

from heteroplan.errors import InputError
from heteroplan.perf.applications import SIA_SLOWDOWNS
from heteroplan.policies.gavel import GavelArtifactPolicy, GavelObjective, GavelPolicy, GavelState
from heteroplan.policies.pollux import PolluxPolicy, PolluxState, SpeedupBase
from heteroplan.policies.pollux_artifact import PolluxArtifactPolicy, VnodeOrder
from heteroplan.policies.registry import make_policy
from heteroplan.policies.state import policy_state


def test_the_mechanism_option_picks_the_class() -> None:
    assert type(make_policy("gavel")) is GavelPolicy and type(make_policy("gavel-sia")) is GavelArtifactPolicy
    built = make_policy("gavel", mechanism="sia-artifact")
    assert type(built) is GavelArtifactPolicy and built.slowdowns == SIA_SLOWDOWNS
    assert type(make_policy("gavel-sia", mechanism="rounds")) is GavelPolicy
    assert type(make_policy("pollux", mechanism="sia-artifact")) is PolluxArtifactPolicy
    assert type(make_policy("pollux-sia", mechanism="pooled-type")) is PolluxPolicy
    for name in ("gavel", "pollux"):
        with pytest.raises(InputError, match=r"mechanism='genetic'.*choose one of"):
            make_policy(name, mechanism="genetic")


def test_both_mechanisms_keep_one_state_type_each_family() -> None:
    """A saved session names its policy state's type: both Gavel classes keep a GavelState, both
    Pollux classes a PolluxState (so files saved before the split load)."""
    assert {type(policy_state(make_policy(n))) for n in ("gavel", "gavel-sia")} == {GavelState}
    assert {type(policy_state(make_policy(n))) for n in ("pollux", "pollux-sia")} == {PolluxState}
    assert policy_state(make_policy("pollux")).rng is None  # draws no random numbers
    assert policy_state(make_policy("pollux-sia")).rng is not None


def test_gavel_objectives_are_an_enum_that_takes_their_names() -> None:
    policy = GavelPolicy(objective="min_makespan")
    assert policy.objective is GavelObjective.MIN_MAKESPAN and policy.resolve_every_round
    assert not GavelPolicy(objective=GavelObjective.MAX_SUM_THROUGHPUT).resolve_every_round
    with pytest.raises(InputError, match=r"objective='fastest'.*max_min_fairness"):
        GavelArtifactPolicy(objective="fastest")
    assert GavelArtifactPolicy(slowdowns={}).slowdowns == {}


def test_pollux_classes_carry_their_defaults() -> None:
    pooled, artifact = PolluxPolicy(), PolluxArtifactPolicy()
    assert (pooled.speedup_base, pooled.merged_profile, pooled.restart_price_s, pooled.pin_restoring) == \
        (SpeedupBase.ONE_GPU, False, None, True)
    assert (artifact.speedup_base, artifact.vnode_order, artifact.restart_price_s, artifact.pin_restoring) == \
        (SpeedupBase.FAIR_SHARE, VnodeOrder.SHUFFLED, 30.0, False)
    assert (pooled.mechanism, artifact.mechanism) == ("pooled-type", "sia-artifact")
    with pytest.raises(TypeError, match="mechanism"):
        PolluxPolicy(mechanism="sia-artifact")  # the artifact's mechanism is its own class
    with pytest.raises(TypeError):
        PolluxPolicy(vnode_order="node")  # an option of the artifact's placement only
