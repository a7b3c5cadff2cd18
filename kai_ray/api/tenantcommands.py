"""`kai-ray tenant ...`: tokens of one's own for the tenants of a Ray cluster (Ray's own
token auth is one secret shared by all). The file and what is checked: docs/ray.md,
"Tenants"; the check itself: kai_ray.control.tenants."""

from __future__ import annotations

import argparse
import sys

from kai_ray.api.cliutil import (
    CommandFailed,
    add_common,
    add_token,
    output,
    running_scheduler,
    usage,
    with_token,
)

__all__ = ["add_commands"]


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tenant = subparsers.add_parser("tenant", help="tenants of the scheduler and their tokens")
    sub = tenant.add_subparsers(title="tenant commands", metavar="COMMAND")
    token = sub.add_parser(
        "token", help="make a fresh token: give the token to its holder, write its hash in the tenants file"
    )
    token.add_argument("--json", action="store_true", help="print JSON instead of two lines")
    token.set_defaults(func=_token)
    apply = sub.add_parser("apply", help="replace the scheduler's tenants file (an admin's token)")
    apply.add_argument("file", nargs="?", metavar="FILE", help="tenants YAML")
    apply.add_argument(
        "-f", "--file", dest="file_option", metavar="FILE", help="the same, as queue apply takes it"
    )
    add_common(apply)
    add_token(apply)
    apply.set_defaults(func=_apply)
    clear = sub.add_parser(
        "clear", help="stop checking tokens: every caller trusted again (an admin's token)"
    )
    add_common(clear)
    add_token(clear)
    clear.set_defaults(func=_clear)
    listing = sub.add_parser("list", help="the tenants and admins configured (never their hashes)")
    add_common(listing)
    listing.set_defaults(func=_list)
    whoami = sub.add_parser("whoami", help="whom your token names")
    add_common(whoami)
    add_token(whoami)
    whoami.set_defaults(func=_whoami)
    tenant.set_defaults(func=lambda a: usage(tenant))


def _token(args: argparse.Namespace) -> int:
    from kai_ray.control.tenants import TOKEN_ENV, new_token

    token, digest = new_token()
    if args.json:
        return output(args, {"token": token, "tokenHash": digest}, "")
    print(f"{TOKEN_ENV}={token}")
    print(f"tokenHash: {digest}")
    print(
        "(the first line is for the token's holder only, shown once; the second goes in the tenants file)",
        file=sys.stderr,
    )
    return 0


def _apply(args: argparse.Namespace) -> int:
    from kai_ray.config.tenants import load_tenants

    path = args.file or args.file_option
    if not path:
        raise CommandFailed("tenant apply: name the tenants file, e.g. `kai-ray tenant apply tenants.yaml`")
    tenants = load_tenants(path)  # a bad file: ConfigError, exit 2, nothing changed
    answer = with_token(running_scheduler(args.address), args.token).apply_tenants(tenants)
    return output(args, answer, f"tenants: {answer['summary']}")


def _clear(args: argparse.Namespace) -> int:
    answer = with_token(running_scheduler(args.address), args.token).clear_tenants()
    return output(args, answer, f"tenants: {answer['summary']}")


def _list(args: argparse.Namespace) -> int:
    answer = running_scheduler(args.address).tenants()
    rows = answer.get("listing", [])
    lines = [answer["summary"]] + [
        f"  {r['name']:20} {'admin' if r['admin'] else 'tenant':6} "
        + ", ".join(f"{k}={v}" for k, v in sorted(r["labels"].items()))
        for r in rows
    ]
    return output(args, answer, "\n".join(lines))


def _whoami(args: argparse.Namespace) -> int:
    who = with_token(running_scheduler(args.address), args.token).whoami()
    if not who["configured"]:
        text = "this scheduler has no tenants: tokens are not checked"
    else:
        text = f"{'admin' if who['admin'] else 'tenant'} {who['name']}"
    return output(args, who, text)
