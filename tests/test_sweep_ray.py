"""A sweep on a local Ray instance gives the same results as in-process (Ray required in CI)."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="Ray is optional: pip install 'heteroplan[ray]'")

from test_sweep import TINY, deterministic  # noqa: E402

from heteroplan.sim.sweep import run_sweep  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, logging_level="WARNING")
    yield
    ray.shutdown()


def test_ray_gives_the_same_table_as_inprocess(local_ray, tmp_path):
    sweep = TINY | {"policies": TINY["policies"] + [{"name": "tiresias", "label": "tiresias-short",
                                                      "options": {"thresholds": [600.0, 6000.0]}}]}
    on_ray = run_sweep(sweep, tmp_path / "ray", ray_address="auto")
    assert (on_ray.computed, on_ray.failed) == (8, 0)
    assert ray.is_initialized()  # a session we did not start is left running
    local = run_sweep(sweep, tmp_path / "local", executor="inprocess")
    assert deterministic(on_ray.table()).equals(deterministic(local.table()))
    assert {r["key"]: r["jcts"] for r in on_ray.records()} == {r["key"]: r["jcts"] for r in local.records()}
    assert run_sweep(sweep, tmp_path / "ray", ray_address="auto").computed == 0  # resumes on Ray too
