"""``heteroplan goodput`` subcommand (registered standalone; the lead wires it into cli.py)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from heteroplan.commands import goodput as goodput_cmd
from heteroplan.perf.sia_data import true_model


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    goodput_cmd.register(parser.add_subparsers())
    return parser.parse_args(argv)


def test_goodput_command_json_matches_model(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["goodput", "imagenet", "--gpus", "1,8,12", "--progress", "0.4", "--json"])
    assert args.func(args) == 0
    table = json.loads(capsys.readouterr().out)
    assert len(table) == 9  # 3 Sia types x 3 counts
    model = true_model("imagenet")
    per_node = {"aws": 4, "rtx": 8, "dgx-ext": 8}
    for row in table:
        nodes = int(np.ceil(row["num_gpus"] / per_node[row["gpu_type"]]))
        assert row["num_nodes"] == nodes
        good, local, accum = model.optimize(row["gpu_type"], nodes, row["num_gpus"], 0.4)
        assert row["goodput"] == pytest.approx(float(good))
        assert (row["local_bsz"], row["accum_steps"]) == (int(local), int(accum))
        assert row["batch_size"] <= 12800


def test_goodput_command_text_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["goodput", "bert", "--gpus", "2"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "bert" in out and len(out.strip().splitlines()) == 2 + 3
    for bad in ("two", "0"):  # refused by the flag's type, at parse time (exit 2)
        with pytest.raises(SystemExit) as info:
            _parse(["goodput", "bert", "--gpus", bad])
        assert info.value.code == 2 and "--gpus" in capsys.readouterr().err
