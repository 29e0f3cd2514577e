"""``heteroplan clusters``: list the built-in clusters."""

from __future__ import annotations

import argparse

from heteroplan.argtypes import nonempty
from heteroplan.cluster import PRESETS, Cluster, preset
from heteroplan.commands.jsonout import print_json
from heteroplan.names import printable


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("clusters", help="show the built-in clusters (or a cluster JSON file)")
    p.add_argument("name", nargs="?", type=nonempty("a preset name or a path"), help="preset name or path to a cluster JSON file")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document: the named cluster, or {preset name: cluster} for all presets")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else list(PRESETS)
    clusters = {name: preset(name) if name in PRESETS else Cluster.from_json(name) for name in names}
    if args.json:
        print_json(clusters[args.name].to_dict() if args.name else {n: c.to_dict() for n, c in clusters.items()})
        return 0
    for cluster in clusters.values():
        print(printable(cluster.summary(), keep="\n"))
    return 0
