"""``heteroplan clusters``: list the built-in clusters."""

from __future__ import annotations

import argparse
import json

from heteroplan.cluster import PRESETS, Cluster, preset


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("clusters", help="show the built-in clusters (or a cluster JSON file)")
    p.add_argument("name", nargs="?", help="preset name or path to a cluster JSON file")
    p.add_argument("--json", action="store_true", help="print the cluster as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else list(PRESETS)
    for name in names:
        cluster = preset(name) if name in PRESETS else Cluster.from_json(name)
        print(json.dumps(cluster.to_dict(), indent=2) if args.json else cluster.summary())
    return 0
