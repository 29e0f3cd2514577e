"""One open policy registry: name -> factory with options, for the CLI, the simulator and the runtime.

``make_policy("gavel", round_length=120)`` builds a policy by name; options go to its
constructor (``round_length`` is understood by every policy: Hadar's slot is its round), except
``restart_delay_s``, understood by every policy too: seconds every (re)start of its jobs costs
(set on the built policy; see :class:`~heteroplan.scheduling.SchedulingSession`).

The registry is open: :func:`register_policy` adds a name in this process, and an installed
package adds names through the entry-point group :data:`ENTRY_POINT_GROUP` (``heteroplan.policies``;
each entry point names a factory -- a callable taking the options as keywords, e.g. a
policy class). Entry points are listed lazily (on the first lookup) and imported only when
their policy is built, so ``heteroplan simulate --policy NAME`` and sweep files accept them.

A plugin fails alone: a distribution whose entry points cannot be read, or that names a policy
unfit for a file name, is skipped with a :class:`PluginWarning` naming the distribution (every
other policy and command keeps working); a plugin policy that raises when imported or built is
an :class:`~heteroplan.errors.InputError` naming the policy and its distribution.
"""

from __future__ import annotations

import math
import re
import typing
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from heteroplan.errors import InputError
from heteroplan.inputs import real_value
from heteroplan.names import path_component, printable
from heteroplan.policies.base import Policy

__all__ = ["ENTRY_POINT_GROUP", "PolicyEntry", "POLICIES", "PluginWarning", "make_policy", "policy_names",
           "register_policy"]

ENTRY_POINT_GROUP = "heteroplan.policies"


class PluginWarning(UserWarning):
    """An installed package's policy plugin was skipped (its entry points could not be read, or
    it names a policy unfit for a file name); the message names the distribution."""


@dataclass(frozen=True)
class PolicyEntry:
    """A registered policy: ``factory(**options)`` builds it; ``summary`` says what it is;
    ``restart_delay_s``: the restart delay (s) its policies get unless an option says otherwise
    (``None``: each job's own)."""

    name: str
    factory: Callable[..., Policy]
    summary: str
    restart_delay_s: float | None = None


def _sia(**options: Any) -> Policy:
    from heteroplan.policies.sia import SiaPolicy

    return SiaPolicy(**options)


def _sia_lp(**options: Any) -> Policy:
    from heteroplan.policies.sia import SiaPolicy

    return SiaPolicy(**({"mode": "lp-round", "name": "sia-lp"} | options))


def _pollux(**defaults: Any) -> Callable[..., Policy]:
    def make(**options: Any) -> Policy:
        from heteroplan.policies.pollux import PolluxPolicy
        from heteroplan.policies.pollux_artifact import PolluxArtifactPolicy

        merged = defaults | options
        cls = _mechanism(merged.pop("mechanism", PolluxPolicy.MECHANISM), (PolluxPolicy, PolluxArtifactPolicy))
        return cls(**merged)

    return make


def _gavel(**defaults: Any) -> Callable[..., Policy]:
    def make(**options: Any) -> Policy:
        from heteroplan.policies.gavel import GavelArtifactPolicy, GavelPolicy

        merged = defaults | options
        cls = _mechanism(merged.pop("mechanism", GavelPolicy.MECHANISM), (GavelPolicy, GavelArtifactPolicy))
        return cls(**merged)  # 360 s rounds: at 60 s time-slicing restarts jobs every round

    return make


def _mechanism(name: object, classes: tuple[type[Any], ...]) -> type[Any]:
    """The class of ``classes`` running the mechanism ``name`` (the ``mechanism`` option: each
    class carries its own); :class:`InputError` naming the choices otherwise."""
    by_name = {c.MECHANISM: c for c in classes}
    if not isinstance(name, str) or name not in by_name:
        raise InputError("mechanism", name, f"choose one of {list(by_name)}")
    return by_name[name]


def _yarn(name: str) -> Callable[..., Policy]:
    def make(**options: Any) -> Policy:
        from heteroplan.policies.yarn import YarnCSPolicy

        return YarnCSPolicy(**({"name": name} | options))

    return make


def _tiresias(**options: Any) -> Policy:
    from heteroplan.policies.tiresias import TiresiasPolicy

    return TiresiasPolicy(**options)


def _hadar(**defaults: Any) -> Callable[..., Policy]:
    def make(**options: Any) -> Policy:
        from heteroplan.policies.hadar import HadarPolicy

        merged = defaults | options
        if "round_length" in merged:
            merged["slot"] = merged.pop("round_length")
        return HadarPolicy(**merged)

    return make


# Gavel's other objectives, each a policy named after it: (name, objective, summary).
_GAVEL_OBJECTIVES = (
    ("gavel-agnostic", "max_min_fairness_agnostic",
     "Gavel: heterogeneity-agnostic max-min fairness over time shares (rigid)"),
    ("gavel-throughput", "max_sum_throughput", "Gavel: max-sum-throughput LP (rigid)"),
    ("gavel-ftf", "finish_time_fairness", "Gavel: finish-time fairness (bisection over LPs, rigid)"),
    ("gavel-makespan", "min_makespan", "Gavel: minimize makespan LP (rigid)"),
    ("gavel-cost", "max_throughput_per_cost", "Gavel: throughput per dollar LP (GPU prices of the cluster; rigid)"),
)

_BUILTIN: dict[str, PolicyEntry] = {e.name: e for e in (
    PolicyEntry("sia", _sia, "Sia: heterogeneity- and adaptivity-aware ILP over goodput (elastic)"),
    PolicyEntry("sia-lp", _sia_lp, "Sia with LP relaxation + rounding (elastic)"),
    PolicyEntry("pollux", _pollux(), "Pollux: goodput-optimizing, heterogeneity-unaware (elastic)"),
    PolicyEntry("pollux-sia", _pollux(mechanism="sia-artifact"),
                "Pollux as the Sia artifact runs it: one profile merged across GPU types, 4-GPU virtual nodes in a random order, majority-type fix-up, restarts priced at 30 s (elastic)"),
    PolicyEntry("gavel", _gavel(), "Gavel: max-min fairness LP over time fractions (rigid, 360 s rounds)"),
    *(PolicyEntry(name, _gavel(objective=objective, name=name), summary)
      for name, objective, summary in _GAVEL_OBJECTIVES),
    PolicyEntry("gavel-sia", _gavel(objective="max_sum_throughput", mechanism="sia-artifact"),
                "Gavel as the Sia artifact runs it: max-sum-throughput, interior-point, its priorities (rigid)"),
    PolicyEntry("fifo", _yarn("fifo"), "FIFO gang scheduling, no preemption (rigid)"),
    PolicyEntry("yarn-cs", _yarn("yarn-cs"), "YARN capacity scheduler: FIFO + gang (rigid)"),
    PolicyEntry("tiresias", _tiresias, "Tiresias: discretized 2D-LAS (rigid)"),
    PolicyEntry("hadar", _hadar(),
                "Hadar: online primal-dual, task-level heterogeneous, re-planned each round (rigid, 360 s slots)"),
    PolicyEntry("hadar-committed", _hadar(planning="committed"),
                "Hadar committing each admitted schedule to completion (OASiS; rigid)"),
    PolicyEntry("hadare", _hadar(forking=True), "HadarE: Hadar with job forking onto idle GPUs (rigid)"),
)}


class _Registry(Mapping[str, PolicyEntry]):
    """Built-in policies, those added by :func:`register_policy`, and installed packages' entry
    points (listed on first use, imported when built)."""

    def __init__(self) -> None:
        self._added: dict[str, PolicyEntry] = {}
        self._plugins: dict[str, PolicyEntry] | None = None

    def _entries(self) -> dict[str, PolicyEntry]:
        if self._plugins is None:
            self._plugins = _plugin_entries()
        return _BUILTIN | self._plugins | self._added

    def add(self, entry: PolicyEntry) -> None:
        self._added[entry.name] = entry

    def refresh(self) -> None:
        """Forget the listed entry points (after installing a package in this process)."""
        self._plugins = None

    def __getitem__(self, name: str) -> PolicyEntry:
        return self._entries()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())


def _distribution_name(dist: metadata.Distribution) -> str:
    """The distribution's name as installed (its directory where its metadata has none)."""
    try:
        name = dist.metadata["Name"]
    except Exception:  # an unreadable METADATA file
        name = None
    return str(name) if name else str(getattr(dist, "_path", "an unnamed distribution"))


def _skip(dist: str, why: str) -> None:
    warnings.warn(PluginWarning(f"heteroplan: skipping the policy plugins of package {printable(dist)!r}: "
                                f"{printable(why)}"), stacklevel=3)


def _plugin_entries() -> dict[str, PolicyEntry]:
    """The policies installed packages add, one distribution at a time: one that cannot be read
    is skipped with a :class:`PluginWarning` and the others are kept."""
    found: dict[str, PolicyEntry] = {}
    seen: set[str] = set()
    try:
        dists = list(metadata.distributions())
    except Exception as exc:  # a sys.path entry that cannot be listed
        _skip("(all)", f"installed packages cannot be listed: {type(exc).__name__}: {exc}")
        return found
    for dist in dists:
        name = _distribution_name(dist)
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:  # the same distribution further down sys.path: shadowed, as importlib.metadata does
            continue
        seen.add(key)
        try:
            eps = list(dist.entry_points.select(group=ENTRY_POINT_GROUP))
        except Exception as exc:  # a malformed entry_points.txt
            _skip(name, f"its entry_points.txt cannot be read ({type(exc).__name__}: {exc})")
            continue
        for ep in eps:
            if ep.name in _BUILTIN:
                _skip(name, f"its policy {ep.name!r} has the name of a built-in policy (the built-in one is kept)")
                continue
            try:
                path_component("policy", ep.name)
            except InputError as exc:
                _skip(name, f"its policy name is refused: {exc}")
                continue
            found[ep.name] = PolicyEntry(ep.name, _entry_point_factory(ep, name),
                                         f"from package {name} (entry point {ep.value})")
    return found


def _entry_point_factory(ep: metadata.EntryPoint, dist: str) -> Callable[..., Policy]:
    def make(**options: Any) -> Policy:
        try:
            factory = ep.load()
        except (Exception, SystemExit) as exc:  # a broken plugin fails alone, named
            raise InputError("policy", ep.name, f"its plugin (package {dist!r}, entry point {ep.value!r}) "
                             f"failed to load: {type(exc).__name__}: {exc}") from exc
        try:
            policy = factory(**options)
        except (TypeError, InputError):  # an option it does not take; a bad option value
            raise
        except (Exception, SystemExit) as exc:
            raise InputError("policy", ep.name, f"its plugin (package {dist!r}, entry point {ep.value!r}) "
                             f"failed to build the policy: {type(exc).__name__}: {exc}") from exc
        if not callable(getattr(policy, "allocate", None)):
            raise InputError("policy", ep.name, f"its plugin (package {dist!r}, entry point {ep.value!r}) "
                             f"built {type(policy).__name__}, not a policy (it has no allocate method)")
        return policy

    return make


POLICIES: _Registry = _Registry()


def register_policy(name: str, factory: Callable[..., Policy], summary: str = "",
                    restart_delay_s: float | None = None) -> None:
    """Make ``name`` a policy name in this process: ``factory(**options)`` builds the policy (a
    policy class will do). A built-in name cannot be replaced; registering a name again replaces
    the earlier registration."""
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        raise InputError("name", name, "must be a non-empty name without spaces")
    path_component("name", name)  # it names result files (simulate --out DIR: <name>.json)
    if name in _BUILTIN:
        raise InputError("name", name, "is a built-in policy; choose another name")
    if not callable(factory):
        raise InputError("factory", factory, "must be callable(**options) -> Policy")
    if not isinstance(summary, str):
        raise InputError("summary", summary, "must be a line of text")
    if restart_delay_s is not None and not (math.isfinite(real_value(restart_delay_s)) and restart_delay_s >= 0):
        raise InputError("restart_delay_s", restart_delay_s, "must be a finite number of seconds >= 0, or None")
    POLICIES.add(PolicyEntry(name, factory, summary or (getattr(factory, "__doc__", None) or name).strip().split("\n")[0],
                             restart_delay_s))


def policy_names() -> list[str]:
    """Registered policy names, sorted."""
    return sorted(POLICIES)


def make_policy(name: str, /, **options: Any) -> Policy:
    """A fresh policy by registered name; ``options`` go to its constructor (a ``name`` option too:
    ``name`` is positional only)."""
    try:
        entry = POLICIES[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name (a list from a JSON file)
        raise InputError("policy", name, f"unknown policy; known: {policy_names()}") from None
    delay = options.pop("restart_delay_s", entry.restart_delay_s)
    if delay is not None and not (math.isfinite(real_value(delay)) and delay >= 0):  # inf: every restart would never end
        raise InputError(f"policy[{name}].options.restart_delay_s", delay, "must be a finite number of seconds >= 0")
    try:
        if options:
            _check_option_kinds(entry.factory(), options)
        policy = entry.factory(**options)
    except TypeError as exc:  # an option the policy does not take
        raise InputError(f"policy[{name}].options", sorted(options), f"not accepted: {exc}") from None
    if not callable(getattr(policy, "allocate", None)):  # a registered factory that returns something else
        raise InputError(f"policy[{name}]", type(policy).__name__, "its factory returned no policy (nothing with "
                         "allocate(cluster, jobs, now))")
    if delay is not None:
        policy.restart_delay_s = float(delay)  # type: ignore[attr-defined]
    return policy


def _optional_options(cls: type) -> set[str] | None:
    """The options ``cls`` annotates as admitting ``None`` (``float | None``: Pollux's ``lam``,
    ``auto_limit``); ``None`` where its annotations cannot be read."""
    hints: dict[str, Any] = {}
    try:
        for source in (cls, cls.__init__):  # dataclass fields, and a hand-written __init__'s parameters
            hints.update(typing.get_type_hints(source))
    except Exception:  # an annotation naming what the module does not define at run time
        return None
    return {name for name, hint in hints.items() if type(None) in typing.get_args(hint)}


def _check_option_kinds(default: Policy, options: Mapping[str, Any]) -> None:
    """Refuse an option of another kind than the policy's default value of it (a flag must be
    True or False, a number finite, a label a non-empty string) or one of its private state
    (``_cache``, ``last_result``); each policy checks the ranges of its own options when made."""
    defaults = vars(default)
    optional = _optional_options(type(default))
    for key, value in options.items():
        field = key  # as the policies name their options
        if key.startswith("_") or key == "last_result":
            raise InputError(field, value, "not an option: the policy's own state")
        if key not in defaults or (value is None and (optional is None or key in optional)):
            continue  # None where the policy's annotation admits it (or it cannot be read): the policy decides
        kind = defaults[key]
        if isinstance(kind, bool):
            if not isinstance(value, bool):
                raise InputError(field, value, "must be True or False")
        elif isinstance(kind, int | float):
            if not math.isfinite(real_value(value)):
                raise InputError(field, value, "must be a finite number")
        elif isinstance(kind, str) and (not isinstance(value, str) or not value):
            raise InputError(field, value, "must be a non-empty string")
