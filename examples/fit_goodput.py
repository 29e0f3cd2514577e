"""Fit a goodput model from your own step-time measurements and use it to pick a configuration.

Input: a CSV of measured steps with columns ``placement,local_bsz,step_time,sync_time``
(``placement`` = GPUs per node as digits, e.g. ``22`` = 2 nodes x 2 GPUs; times in seconds),
here ``examples/data/my_measurements.csv`` (a third of the Sia cifar10 profile on T4 nodes).

Run: ``python examples/fit_goodput.py [--csv FILE] [--app cifar10] [--gpu-type aws]``
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from heteroplan.perf import GoodputModel, get_app, load_placements
from heteroplan.perf.evaluate import holdout_split, relative_errors
from heteroplan.perf.sia_data import true_model

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", default=str(HERE / "data" / "my_measurements.csv"))
    parser.add_argument("--app", default="cifar10", help="application (sets M0, max batch, noise scale)")
    parser.add_argument("--gpu-type", default="aws", help="GPU type the measurements were taken on")
    args = parser.parse_args()

    meas = load_placements(args.csv)
    train_mask, test_mask = holdout_split(meas, test_fraction=0.3, seed=0)  # hold out whole configurations
    train, test = meas.select(train_mask), meas.select(test_mask)
    phi = true_model(args.app).phi  # the app's gradient-noise-scale table
    model = GoodputModel.fit(get_app(args.app), {args.gpu_type: train}, phi)
    err = relative_errors(model.params[args.gpu_type], test)
    print(f"{len(train)} measurements fitted, {len(test)} held out: median step-time error {np.median(err):.1%}")
    print("fitted parameters:", model.params[args.gpu_type].to_dict())

    nodes = np.array([1, 1, 1, 2, 3, 4])
    gpus = np.array([1, 2, 4, 8, 12, 16])
    good, local, accum = model.optimize(args.gpu_type, nodes, gpus, progress=0.3)
    print(f"\n{'GPUs':>5} {'nodes':>5} {'goodput (samples/s)':>20} {'local batch':>11} {'accum':>5}")
    for n, k, g, m, s in zip(nodes, gpus, good, local, accum, strict=True):
        print(f"{k:>5} {n:>5} {g:>20.1f} {m:>11} {s:>5}")
    best = int(np.argmax(good / gpus))
    print(f"\nmost goodput per GPU: {gpus[best]} GPUs; median held-out error {np.median(err):.3f}")


if __name__ == "__main__":
    main()
