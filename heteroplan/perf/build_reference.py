"""Regenerate ``heteroplan/data/sia/goodput_reference.json`` and ``grad_stats.json`` from Sia traces.

    python -m heteroplan.perf.build_reference /path/to/sia/traces [--out FILE]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from heteroplan.perf.sia_data import (
    GRAD_STATS_FILE,
    REFERENCE_FILE,
    build_grad_stats,
    build_reference,
)

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Fit every application and type, write the reference JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces_dir", help="directory with <app>/placements-<type>.csv etc.")
    parser.add_argument("--out", default=None, help="output path (default: the package's)")
    parser.add_argument("--grad-stats-out", default=None, help="gradient statistics output path "
                        "(default: the package's)")
    args = parser.parse_args(argv)
    default = Path(__file__).parent.parent / "data" / "sia" / REFERENCE_FILE
    out = Path(args.out) if args.out else default
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(build_reference(args.traces_dir), indent=1) + "\n")
    print(f"wrote {out}")
    gs_out = Path(args.grad_stats_out) if args.grad_stats_out else default.parent / GRAD_STATS_FILE
    gs_out.parent.mkdir(parents=True, exist_ok=True)
    gs_out.write_text(json.dumps(build_grad_stats(args.traces_dir)) + "\n")
    print(f"wrote {gs_out}")


if __name__ == "__main__":
    main()
