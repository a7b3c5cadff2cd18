"""The `kai-ray` command.

Each package contributes its subcommands through `add_commands(subparsers)`; a
subcommand sets `func` (via `set_defaults`) to a callable taking the parsed arguments
and returning the exit status. Mistakes a user makes (a bad file, a wrong path) are
raised as ConfigError (or CommandFailed: no scheduler runs, an unknown workload; or a
PermissionError: a token the scheduler's tenants do not allow) and printed as one line
on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from kai_ray import __version__
from kai_ray.api import commands as api_commands
from kai_ray.api import dashboardcommands as dashboard_commands
from kai_ray.api import operatorcommands as operator_commands
from kai_ray.api import snapshotcommands as snapshot_commands
from kai_ray.api import tenantcommands as tenant_commands
from kai_ray.api.cliutil import CommandFailed
from kai_ray.bench import commands as bench_commands
from kai_ray.config.errors import ConfigError
from kai_ray.conformance import commands as conformance_commands
from kai_ray.scenario import commands as scenario_commands
from kai_ray.sim import commands as sim_commands
from kai_ray.testing import democommands as demo_commands

__all__ = ["build_parser", "main"]

EXIT_USAGE = 2
_CONTRIBUTORS = (
    scenario_commands,
    bench_commands,
    sim_commands,
    api_commands,
    dashboard_commands,
    operator_commands,
    snapshot_commands,
    tenant_commands,
    demo_commands,
    conformance_commands,
)


class _Parser(argparse.ArgumentParser):
    """Usage mistakes as one line on stderr (subcommand parsers inherit this class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kai-ray",
        description="KAI Scheduler's policies (queues, fair share, gangs, preemption) for Ray.",
    )
    parser.add_argument("--version", action="version", version=f"kai-ray {__version__}")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module in _CONTRIBUTORS:
        module.add_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error argparse printed
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(func(args))
    except (ConfigError, CommandFailed, PermissionError) as e:
        print(f"kai-ray: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
