"""Sia planning a job with the batch its workload requested (the Sia artifact's speed-up function)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from heteroplan.cluster import preset
from heteroplan.errors import InputError
from heteroplan.perf.goodput import GoodputModel
from heteroplan.perf.sia_data import bootstrap_model
from heteroplan.policies.base import JobState
from heteroplan.policies.common import choosable_columns
from heteroplan.policies.requested_batch import RequestedBatchModel
from heteroplan.policies.sia import BatchLimit, SiaPolicy

TYPES = np.array(["aws", "aws", "aws", "rtx", "rtx", "dgx-ext", "dgx-ext", "dgx-ext"])
NODES = np.array([1, 1, 2, 1, 2, 1, 1, 2])
GPUS = np.array([1, 4, 8, 4, 16, 2, 8, 16])


def _with_limit(model: GoodputModel, batch: int) -> GoodputModel:
    """The oracle: a model built from scratch with ``batch`` as its application's largest."""
    app = dataclasses.replace(model.app, max_batch_size=batch)
    out = GoodputModel(app, model.params, model.phi, batch_grid=model.batch_grid)
    out.set_measured_phi(model.measured_phi)
    return out


@pytest.mark.parametrize(("app", "batch"), [("yolov3", 64), ("imagenet", 1600), ("cifar10", 2048)])
def test_view_is_the_model_with_the_requested_batch_as_its_limit(app, batch):
    model = bootstrap_model(app)
    view = RequestedBatchModel(model, batch)
    for progress in (0.0, 0.3, 0.9):
        expected = _with_limit(model, batch).goodput(TYPES, NODES, GPUS, progress)
        np.testing.assert_allclose(view.goodput(TYPES, NODES, GPUS, progress), expected, rtol=1e-12)
    full = model.goodput(TYPES, NODES, GPUS, 0.9)
    capped = view.goodput(TYPES, NODES, GPUS, 0.9)
    assert np.all(capped <= full * (1 + 1e-12)) and np.any(capped < 0.9 * full)  # the limit binds on many GPUs


def test_view_follows_refits_and_the_measured_noise_scale():
    model = bootstrap_model("yolov3")
    view = RequestedBatchModel(model, 64)
    view.goodput(TYPES, NODES, GPUS, 0.5)
    model.set_measured_phi(3000.0)
    params = model.params["rtx"]
    model.set_params("aws", params)  # a refit: version moves
    assert view.version == model.version
    assert view.noise_scale(0.5) == 3000.0
    np.testing.assert_allclose(view.goodput(TYPES, NODES, GPUS, 0.5),
                               _with_limit(model, 64).goodput(TYPES, NODES, GPUS, 0.5), rtol=1e-12)


def test_requested_batch_is_clipped_to_the_applications_range():
    model = bootstrap_model("yolov3")  # init batch 8, max 512
    assert RequestedBatchModel(model, 4).max_batch == 8
    assert RequestedBatchModel(model, 100_000).max_batch == 512


@pytest.mark.parametrize("limit", ["application", "requested"])
def test_a_lone_job_gets_the_configuration_its_planned_goodput_ranks_best(limit):
    # One young job, nothing else: Sia's utility (N)^p, p < 0, is smallest at the largest goodput,
    # so the chosen configuration is the argmax of the goodput the policy plans with.
    cluster = preset("sia-64")
    est = bootstrap_model("yolov3")
    job = JobState("y", "yolov3", 0.0, requested_gpus=4, max_gpus=512, progress=0.6, estimator=est,
                   max_gpus_run=8, requested_batch=64)
    policy = SiaPolicy(batch_limit=limit, mode="milp", mip_gap=0.0)
    alloc = policy.allocate(cluster, [job], now=10.0)["y"]
    configs = policy.configs(cluster)
    cols = choosable_columns(job, configs, policy.scale_up)
    planned = est if limit == "application" else _with_limit(est, 64)
    good = planned.goodput(configs.type_names[cols], configs.num_nodes[cols], configs.num_gpus[cols], 0.6)
    best = cols[int(np.argmax(good))]
    assert (alloc.gpu_type, alloc.num_gpus) == (configs.type_names[best], int(configs.num_gpus[best]))


def test_the_requested_batch_changes_the_choice_for_a_small_request():
    cluster = preset("sia-64")
    job = JobState("y", "yolov3", 0.0, requested_gpus=4, max_gpus=512, progress=0.6,
                   estimator=bootstrap_model("yolov3"), max_gpus_run=8, requested_batch=8)
    wide = SiaPolicy(batch_limit="application").allocate(cluster, [job], now=10.0)["y"]
    narrow = SiaPolicy().allocate(cluster, [job], now=10.0)["y"]  # the default plans with the request
    assert SiaPolicy().batch_limit is BatchLimit.REQUESTED
    assert narrow.num_gpus < wide.num_gpus


def test_bad_batch_limit_names_the_field():
    with pytest.raises(InputError, match="batch_limit"):
        SiaPolicy(batch_limit="workload")
