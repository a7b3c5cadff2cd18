"""`kai-ray dashboard`: where the scheduler's dashboard listens (one line: its URL), or
move it (`--host`, `--port`, `--token`); `install-plugin` / `uninstall-plugin` for a
kai-ray page on Ray's own dashboard; `grafana` prints the Grafana dashboard."""

from __future__ import annotations

import argparse
import json
import os
import sys

from kai_ray.api.cliutil import CommandFailed, add_common, output, running_scheduler

__all__ = ["add_commands"]

TOKEN_ENV = "KAI_RAY_DASHBOARD_TOKEN"


def add_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dash = subparsers.add_parser(
        "dashboard",
        help="the scheduler's web dashboard: print its URL, or move it (--host/--port/--token)",
        description="Print the URL of the running scheduler's dashboard (read-only web UI and JSON API "
        "under /api/v1/). It listens on 127.0.0.1 unless told otherwise; another host needs a token "
        f"(--token or ${TOKEN_ENV}), or Ray's token auth.",
    )
    dash.add_argument("--host", help="listen on this address instead (e.g. 0.0.0.0; needs a token)")
    dash.add_argument("--port", type=int, help="listen on this port (0: any free port)")
    dash.add_argument("--token", help=f"the token requests must carry (default ${TOKEN_ENV})")
    add_common(dash)
    dash.set_defaults(func=_dashboard)
    sub = dash.add_subparsers(title="dashboard commands", metavar="COMMAND")
    install = sub.add_parser(
        "install-plugin", help="serve kai-ray's page under Ray's dashboard (/kai-ray/); restart the Ray head"
    )
    install.set_defaults(func=_install)
    uninstall = sub.add_parser("uninstall-plugin", help="remove the plugin from Ray's dashboard")
    uninstall.set_defaults(func=_uninstall)
    grafana = sub.add_parser("grafana", help="print the Grafana dashboard JSON of kai-ray's metrics")
    grafana.add_argument("--out", help="write it to this file instead")
    grafana.set_defaults(func=_grafana)


def _dashboard(args: argparse.Namespace) -> int:
    sched = running_scheduler(args.address)
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if args.host is not None or args.port is not None or args.token is not None:
        now = sched.dashboard()
        host = args.host if args.host is not None else now.get("host") or "127.0.0.1"
        port = args.port if args.port is not None else now.get("port") or 0
        try:
            info = sched.serve_dashboard(host, port, token)
        except ValueError as exc:
            raise CommandFailed(str(exc)) from None
    else:
        info = sched.dashboard()
    if not info.get("url"):
        raise CommandFailed("the scheduler's dashboard is not listening; see the scheduler's log")
    return output(args, info, info["url"])


def _install(args: argparse.Namespace) -> int:
    from kai_ray.ray.dashboard_plugin import install_plugin

    try:
        where = install_plugin()
    except (PermissionError, OSError) as exc:
        raise CommandFailed(str(exc)) from None
    print(
        f"installed {where}; restart the Ray head (ray stop; ray start --head ...), then open "
        "http://<head>:8265/kai-ray/"
    )
    return 0


def _uninstall(args: argparse.Namespace) -> int:
    from kai_ray.ray.dashboard_plugin import uninstall_plugin

    try:
        removed = uninstall_plugin()
    except FileExistsError as exc:
        raise CommandFailed(str(exc)) from None
    print(
        "removed the kai-ray plugin; restart the Ray head"
        if removed
        else "the kai-ray plugin was not installed"
    )
    return 0


def _grafana(args: argparse.Namespace) -> int:
    from kai_ray.dashboard.grafana import grafana_dashboard

    text = json.dumps(grafana_dashboard(), indent=2) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
