"""`kai-ray conformance generate|record|next`: make conformance states, record a
scheduler's decisions on them, and follow a cluster to its next session
(docs/conformance.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kai_ray.conformance.corpus import StateName, first_state, next_state, parse_name, record, write_state

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    top = subparsers.add_parser(
        "conformance",
        help="make cluster states to compare kai-ray with KAI-Scheduler",
        description="Conformance states: the format and how they are made in docs/conformance.md",
    )
    top.set_defaults(func=lambda _args: _usage(top))
    commands = top.add_subparsers(title="commands", metavar="COMMAND")
    gen = commands.add_parser(
        "generate", help="write the first session of seeded states (NAME.yaml, NAME.kai-snapshot.json)"
    )
    gen.add_argument(
        "set", help="a feature (topology, subgroups, ...), mix, or multi (followed over sessions)"
    )
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("--count", type=int, default=1)
    gen.add_argument("--start", type=int, default=0, help="the first index")
    gen.add_argument("--out", type=Path, required=True, help="the corpus folder")
    gen.set_defaults(func=_generate)
    rec = commands.add_parser(
        "record", help="write NAME.kai.json from a scheduler's pod statuses after one session"
    )
    rec.add_argument("folder", type=Path)
    rec.add_argument("name")
    rec.add_argument(
        "--pods", type=Path, required=True, help='JSON: {"pods": [{name, status, node, gpuGroup}, ...]}'
    )
    rec.set_defaults(func=_record)
    nxt = commands.add_parser(
        "next", help="write session K+1 of a followed state from session K and its NAME.kai.json"
    )
    nxt.add_argument("folder", type=Path)
    nxt.add_argument("name", help="multi-sSEED-INDEX-tK")
    nxt.set_defaults(func=_next)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _generate(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    for index in range(args.start, args.start + args.count):
        name = StateName(args.set, args.seed, index)
        written = write_state(args.out, first_state(name))
        print(written)
    return 0


def _record(args: argparse.Namespace) -> int:
    parse_name(args.name)
    pods = json.loads(args.pods.read_text())["pods"]
    record(args.folder, args.name, pods)
    return 0


def _next(args: argparse.Namespace) -> int:
    try:
        state = next_state(args.folder, args.name)
    except (ValueError, FileNotFoundError) as err:
        print(f"kai-ray conformance next: {err}", file=sys.stderr)
        return 2
    print(write_state(args.folder, state))
    return 0
