"""Execute a heterogeneous plan for real and check it against single-process training.

Two pipeline stages, two data-parallel replicas: the "fast" replica takes 3 microbatches per
iteration, the "slow" one 1 (as the Sailor planner does for mixed GPU types). Then the run is
rescaled from 4 processes to 2 through its checkpoint. Runs on CPU with gloo in ~30 s.

    python examples/train_plan.py --steps 6
"""

from __future__ import annotations

import argparse
import tempfile

from heteroplan.planner.plan import Plan, ReplicaGroup, Stage
from heteroplan.runtime import RunConfig, TinyGPTTask, run_plan, train_reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="iterations in total (half before the rescale)")
    args = parser.parse_args()

    task = TinyGPTTask(n_layers=2, dtype="float64")  # 4 plan layers: embedding, 2 blocks, head
    fast, slow = ReplicaGroup("A100-40", "us-central1-a"), ReplicaGroup("V100-16", "us-central1-a")
    plan = Plan("tiny-gpt", global_batch_size=16, microbatch_size=4,
                stages=(Stage(0, 2, (fast, slow)), Stage(2, 4, (fast, slow))), microbatches_per_replica=(3, 1))
    print(plan.describe())
    half = args.steps // 2
    with tempfile.TemporaryDirectory() as ckpt:
        config = RunConfig(steps=args.steps, optimizer="adam", lr=0.01, checkpoint_dir=ckpt)
        first = run_plan(plan, task, RunConfig(**{**config.__dict__, "steps": half}))
        # rescale: the same job continues on 2 processes (one stage, two replicas, even split)
        smaller = Plan("tiny-gpt", 16, 8, (Stage(0, 4, (fast, slow)),))
        second = run_plan(smaller, task, config)
        model, reference = train_reference(task, 16, config)
        state = second.checkpoint.model_state()
        diff = max(float((state[k] - v).abs().max()) for k, v in model.state_dict().items())

    print(f"\n{'iter':>4} {'processes':>9} {'loss':>10} {'single-process loss':>20}")
    for m, procs in [(m, first.world_size) for m in first.steps] + [(m, second.world_size) for m in second.steps]:
        print(f"{m.step:4d} {procs:9d} {m.loss:10.6f} {reference[m.step - 1]:20.6f}")
    print(f"resumed at iteration {second.start_step}; max |parameter difference| vs single process: {diff:.2e}")


if __name__ == "__main__":
    main()
