"""Subcommands of `kai-ray` contributed by this package."""

from __future__ import annotations

import argparse

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register this package's subcommands (none yet)."""
