"""Issue 47 (item 4): a broken policy plugin fails alone, named by its distribution; every other
policy and command keeps working. The installed packages are faked as ``*.dist-info`` directories
on ``sys.path``, read by ``importlib.metadata`` as installed ones are."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from heteroplan.cli import main
from heteroplan.errors import InputError
from heteroplan.policies.registry import POLICIES, PluginWarning, make_policy, policy_names

_MODULE = '''
from heteroplan.policies.base import PolicyBase
from heteroplan.policies.registry import make_policy

{extra}

class Fifo(PolicyBase):
    """FIFO from an installed package."""

    def __init__(self, **options):
        {init}
        super().__init__(**options)

    def allocate(self, cluster, jobs, now):
        return make_policy("fifo").allocate(cluster, jobs, now)


def not_a_policy(**options):
    return 42
'''


def _package(site: Path, dist: str, entry_points: str, module: str | None = None, extra: str = "",
             init: str = "pass") -> None:
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    if module is not None:
        (site / f"{module}.py").write_text(_MODULE.format(extra=extra, init=init))


@pytest.fixture
def site(tmp_path: Path, monkeypatch) -> Iterator[Path]:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    POLICIES.refresh()
    yield site
    monkeypatch.undo()
    for name in [m for m in sys.modules if m.startswith("hp_fake_")]:
        del sys.modules[name]
    POLICIES.refresh()


def _plugins(site: Path) -> None:
    _package(site, "hp-good", "[heteroplan.policies]\ngood-fifo = hp_fake_good:Fifo\n", "hp_fake_good")
    _package(site, "hp-malformed", "[heteroplan.policies]\nthis line has no equals sign\n")
    _package(site, "hp-escaping", "[heteroplan.policies]\n../../escaped = hp_fake_esc:Fifo\n", "hp_fake_esc")
    _package(site, "hp-shadow", "[heteroplan.policies]\nsia = hp_fake_shadow:Fifo\n", "hp_fake_shadow")
    _package(site, "hp-import-error", "[heteroplan.policies]\nboom-import = hp_fake_boom:Fifo\n", "hp_fake_boom",
             extra="raise RuntimeError('cannot import me')")
    _package(site, "hp-exit", "[heteroplan.policies]\nboom-exit = hp_fake_exit:Fifo\n", "hp_fake_exit",
             extra="raise SystemExit(3)")
    _package(site, "hp-ctor-error", "[heteroplan.policies]\nboom-build = hp_fake_ctor:Fifo\n", "hp_fake_ctor",
             init="raise ZeroDivisionError('no')")
    _package(site, "hp-not-policy", "[heteroplan.policies]\nnot-policy = hp_fake_np:not_a_policy\n", "hp_fake_np")


def test_a_malformed_or_escaping_distribution_is_skipped_with_a_warning_naming_it(site: Path) -> None:
    _plugins(site)
    with pytest.warns(PluginWarning) as caught:
        names = policy_names()
    messages = "\n".join(str(w.message) for w in caught)
    assert "'hp-malformed'" in messages and "entry_points.txt" in messages
    assert "'hp-escaping'" in messages and "path separator" in messages
    assert "'hp-shadow'" in messages and "built-in" in messages
    assert "hp-good" not in messages
    assert {"good-fifo", "boom-import", "boom-exit", "boom-build", "not-policy", "sia", "fifo"} <= set(names)
    assert not any("escaped" in n for n in names)
    assert type(make_policy("sia")).__name__ == "SiaPolicy"  # the built-in keeps its name
    assert make_policy("good-fifo").name == "fifo"  # PolicyBase's default name: the class name, lower-cased


@pytest.mark.parametrize(("policy", "dist", "what"), [
    ("boom-import", "hp-import-error", "failed to load: RuntimeError: cannot import me"),
    ("boom-exit", "hp-exit", "failed to load: SystemExit"),
    ("boom-build", "hp-ctor-error", "failed to build the policy: ZeroDivisionError"),
    ("not-policy", "hp-not-policy", "not a policy"),
])
def test_a_plugin_that_raises_is_an_input_error_naming_its_distribution(site: Path, policy: str, dist: str,
                                                                         what: str) -> None:
    _plugins(site)
    with pytest.warns(PluginWarning):
        POLICIES.refresh()
        policy_names()
    with pytest.raises(InputError, match=f"package '{dist}'.*{what}") as err:
        make_policy(policy)
    assert err.value.field == "policy" and err.value.value == policy
    assert make_policy("good-fifo").allocate is not None and make_policy("gavel").name == "gavel"


def test_every_command_keeps_working_beside_broken_plugins(site: Path, capsys) -> None:
    _plugins(site)
    with pytest.warns(PluginWarning):
        assert main(["simulate", "--jobs", "2", "--policy", "fifo", "--policy", "good-fifo", "--quiet"]) == 0
    assert capsys.readouterr().out.count("fifo") >= 2  # a row for each policy (the plugin's is named fifo)
    with pytest.warns(PluginWarning):
        POLICIES.refresh()
        assert main(["simulate", "--jobs", "2", "--policy", "boom-build", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "boom-build" in err and "hp-ctor-error" in err and "Traceback" not in err
