"""`kai-ray operator`: schedule the pods of KubeRay (and any pod whose schedulerName is
ours) on a Kubernetes cluster, from a process of its own or inside a Ray cluster."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
from typing import Any

from kai_ray.api.dashboardcommands import TOKEN_ENV
from kai_ray.control.kubenodes import GPU_PRODUCT_LABEL
from kai_ray.core import SchedulerConfig
from kai_ray.dashboard.server import DEFAULT_PORT
from kai_ray.k8s import DEFAULT_SCHEDULER_NAMES

__all__ = ["add_commands", "operator_options"]

log = logging.getLogger(__name__)
STATUS_TIMEOUT_S = 10.0  # for the operator actor's status
STATUS_LOG_LINES = 20  # its recent log lines `--in-ray --status` prints


def add_commands(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "operator",
        help="schedule KubeRay's pods (and any pod with our schedulerName) on Kubernetes",
        description=(
            "Watch a Kubernetes cluster and schedule every pod whose spec.schedulerName is one of "
            "ours: gangs of RayClusters, RayJobs and RayServices, and plain pods, by queues, "
            "priority and fair share. Level-triggered: a restart rebuilds everything from the API "
            "server."
        ),
    )
    p.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, "
        "or the pod's service account in a cluster)",
    )
    p.add_argument("--context", help="kubeconfig context (default: its current-context)")
    p.add_argument(
        "--scheduler-name",
        action="append",
        dest="scheduler_names",
        metavar="NAME",
        help=f"a schedulerName to answer to; repeat for several (default: "
        f"{', '.join(DEFAULT_SCHEDULER_NAMES)})",
    )
    p.add_argument(
        "--default-queue",
        default="default-queue",
        help="queue of pods without a kai.scheduler/queue label (default: default-queue)",
    )
    p.add_argument("--config", help="scheduler settings file (actions, placement, topologies)")
    p.add_argument(
        "--cluster-can-grow",
        action="store_true",
        help="a cluster-autoscaler or Karpenter adds nodes for pending pods: with --preemption-delay, "
        "a gang that could start only by evicting running work waits for new nodes first",
    )
    p.add_argument(
        "--preemption-delay",
        metavar="DURATION",
        help="with --cluster-can-grow: how long such a gang waits for new nodes before it evicts "
        "(e.g. 2m; default 0, or the settings file's preemptionDelay)",
    )
    p.add_argument(
        "--reserve-after",
        metavar="DURATION",
        help="a gang that has waited this long holds the room it is expected to start on; other work "
        "of its priority or lower uses it only if expected to end first (e.g. 30m; default 0: off, "
        "or the --config file's reserveAfter)",
    )
    p.add_argument(
        "--gpu-type-label",
        default=GPU_PRODUCT_LABEL,
        metavar="LABEL",
        help=f"the node label whose value is the node's GPU type (default {GPU_PRODUCT_LABEL}); pods "
        "name the types they accept with a nodeSelector or required node affinity `In` on it",
    )
    p.add_argument(
        "--closed-queues",
        action="store_true",
        help="queues are closed to namespaces unless a queue's access.tenants or tenantSelector "
        "names them (docs/tenants.md); default: a queue without a rule is open to all, as in KAI",
    )
    p.add_argument(
        "--install-crds",
        action="store_true",
        help="create or update kai-ray's CRDs first, and KAI's default queues (default-queue under "
        "default-parent-queue) when the cluster has no Queue yet",
    )
    p.add_argument(
        "--gpu-sharing",
        metavar="IMAGE",
        help="share GPUs (gpu-fraction / gpu-memory pods): hold each shared device with a "
        "reservation pod running IMAGE (kai-ray's) in the namespace kai-ray-reservation",
    )
    p.add_argument(
        "--webhook",
        nargs=3,
        metavar=("PORT", "CERT", "KEY"),
        help="serve the GPU-sharing mutating webhook over HTTPS on PORT with this certificate and key",
    )
    p.add_argument(
        "--in-ray",
        action="store_true",
        help="run inside the Ray cluster (RAY_ADDRESS, or --address) as the detached actor "
        "kai-ray-operator: start it, or find the one running, and return",
    )
    p.add_argument("--address", help="with --in-ray: the Ray cluster's address (default: auto)")
    p.add_argument(
        "--status",
        action="store_true",
        help="with --in-ray: print what the operator actor is doing (listing, waiting for its lease "
        "and for whom, scheduling) and its recent log lines; start nothing",
    )
    p.add_argument(
        "--dashboard",
        metavar="[HOST:]PORT",
        default=f"127.0.0.1:{DEFAULT_PORT}",
        help=f"serve the dashboard there (default 127.0.0.1:{DEFAULT_PORT}; another host needs "
        "--dashboard-token); 'off' for none",
    )
    p.add_argument(
        "--dashboard-token", help=f"the token dashboard requests must carry (default ${TOKEN_ENV})"
    )
    _leader_flags(p)
    p.add_argument("-v", "--verbose", action="store_true", help="log every cycle")
    p.set_defaults(func=_operator)


def _leader_flags(p: Any) -> None:
    g = p.add_argument_group(
        "leader election",
        "Replicas take a coordination.k8s.io Lease; only its holder binds, evicts and writes "
        "status, the others watch as warm standbys (docs/kubernetes.md).",
    )
    g.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="hold the Lease before acting (default: on)",
    )
    g.add_argument(
        "--leader-elect-namespace",
        metavar="NS",
        help="the Lease's namespace (default: the kubeconfig context's namespace, else the pod's "
        "own in a cluster, else default)",
    )
    g.add_argument("--leader-elect-name", default="kai-ray", metavar="NAME", help="the Lease's name")
    for flag, default, what in (
        ("lease-duration", 15.0, "how long a standby waits, from the last renewal it saw, to take over"),
        ("renew-deadline", 10.0, "the leader stops (exits) when it has not renewed for this long"),
        ("retry-period", 2.0, "between renewals, and between a standby's tries"),
    ):
        g.add_argument(
            f"--leader-elect-{flag}",
            type=float,
            default=default,
            metavar="SECONDS",
            help=f"{what} ({default:g})",
        )


def leader_option(args: argparse.Namespace, config: Any) -> Any:
    """The Lease settings of the flags (None: --no-leader-elect); ConfigError naming the fix."""
    from kai_ray.config.errors import ConfigError
    from kai_ray.k8s.leader import LeaseOptions
    from kai_ray.k8s.login import default_namespace

    if not args.leader_elect:
        return None
    try:
        return LeaseOptions(
            namespace=args.leader_elect_namespace or default_namespace(config),
            name=args.leader_elect_name,
            lease_duration=args.leader_elect_lease_duration,
            renew_deadline=args.leader_elect_renew_deadline,
            retry_period=args.leader_elect_retry_period,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def dashboard_option(value: str, token: str | None) -> tuple[str, int, str | None] | None:
    """--dashboard [HOST:]PORT (or off) -> (host, port, token); ConfigError naming the fix."""
    from kai_ray.config.errors import ConfigError
    from kai_ray.dashboard import DashboardAccessError, access_for

    if value == "off":
        return None
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(
            f"--dashboard {value!r}: give [HOST:]PORT, e.g. 0.0.0.0:{DEFAULT_PORT}, or off"
        ) from None
    token = token or os.environ.get(TOKEN_ENV) or None
    try:
        access_for(host, token, flags=("--dashboard", "--dashboard-token"), on_ray=False)
    except DashboardAccessError as exc:
        raise ConfigError(str(exc)) from None
    return host, number, token


def operator_options(args: argparse.Namespace) -> Any:
    """The OperatorOptions the command line says (ConfigError naming a bad flag or file)."""
    from kai_ray.config.scheduler import load_scheduler_config, with_preemption_delay, with_reserve_after
    from kai_ray.k8s.devices import SharingOptions
    from kai_ray.k8s.operator import OperatorOptions

    names = tuple(args.scheduler_names or DEFAULT_SCHEDULER_NAMES)
    options = OperatorOptions(
        scheduler_names=names,
        default_queue=args.default_queue,
        sharing=SharingOptions(args.gpu_sharing, names[0]) if args.gpu_sharing else None,
        webhook=(int(args.webhook[0]), args.webhook[1], args.webhook[2]) if args.webhook else None,
        dashboard=dashboard_option(args.dashboard, args.dashboard_token),
        cluster_can_grow=args.cluster_can_grow,
        gpu_type_label=_gpu_type_label(args.gpu_type_label),
    )
    settings = load_scheduler_config(args.config) if args.config else None
    config = with_preemption_delay(settings, args.preemption_delay, "--preemption-delay")
    config = with_reserve_after(config, args.reserve_after, "--reserve-after")
    if args.closed_queues:
        config = dataclasses.replace(config or SchedulerConfig(), closed_queues=True)
    if config is not None:
        options.config = config
    return options


def _gpu_type_label(label: str) -> str:
    from kai_ray.config.errors import ConfigError

    if not label.strip():
        raise ConfigError(f"--gpu-type-label: give a node label such as {GPU_PRODUCT_LABEL}")
    return label.strip()


def _operator(args: argparse.Namespace) -> int:
    from kai_ray.k8s.client import Kube, load_kubeconfig, run_async
    from kai_ray.k8s.install import install_crds, install_default_queues
    from kai_ray.k8s.operator import Operator

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.status:  # reads the actor alone: no kubeconfig needed here
        return _actor_status(args)
    options = operator_options(args)
    config = load_kubeconfig(args.kubeconfig, args.context)
    options.leader = leader_option(args, config)
    if args.in_ray:
        return _in_ray(args, config, options)

    async def run() -> int:
        async with Kube(config) as kube:
            if args.install_crds:
                await install_crds(kube)
                await install_default_queues(kube, options.default_queue)
            operator = Operator(kube, options)
            log.info(
                "kai-ray operator on %s, answering to schedulerName %s",
                config.server,
                ", ".join(options.scheduler_names),
            )
            return await _until_signalled(operator)

    return run_async(run())


async def _until_signalled(operator: Any) -> int:
    """Run the operator until SIGTERM or SIGINT (a clean stop: it hands its lease back) or
    until it loses its lease (exit status 1: a process that may no longer act ends, and its
    Deployment starts it again as a standby)."""
    from kai_ray.k8s.leader import LeadershipLost

    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await operator.run()
    except LeadershipLost as exc:
        log.error("%s: stopping at once so that no two operators act; exiting", exc)
        return 1
    except asyncio.CancelledError:
        task.uncancel()
        log.info("stopped")
    return 0


def _in_ray(args: argparse.Namespace, config: Any, options: Any) -> int:
    from kai_ray.api.cliutil import connect_ray
    from kai_ray.api.operator_actor import OPERATOR_ACTOR, find_or_start_operator
    from kai_ray.k8s.install import install_crds, install_default_queues

    connect_ray(args.address)
    if args.install_crds:
        from kai_ray.k8s.client import Kube

        async def crds() -> None:
            async with Kube(config) as kube:
                await install_crds(kube)
                await install_default_queues(kube, options.default_queue)

        asyncio.run(crds())
    handle, started = find_or_start_operator(config, options)
    verb = "started" if started else "already runs"
    where = f"actor {OPERATOR_ACTOR} (namespace kai-ray)"
    print(f"kai-ray operator {verb} in this Ray cluster as {where}, on {config.server}")
    print(_describe(handle))
    return 0


def _describe(handle: Any) -> str:
    """The actor's status as lines for people (kai_ray.k8s.progress.describe)."""
    import ray

    from kai_ray.k8s.progress import describe

    try:
        return describe(ray.get(handle.status.remote(), timeout=STATUS_TIMEOUT_S))
    except Exception as exc:  # a busy or restarting actor: the command still did its part
        return f"status: no answer from the actor ({type(exc).__name__}: {exc})"


def _actor_status(args: argparse.Namespace) -> int:
    import ray

    from kai_ray.api.cliutil import CommandFailed, connect_ray
    from kai_ray.api.operator_actor import NAMESPACE, OPERATOR_ACTOR
    from kai_ray.config.errors import ConfigError

    if not args.in_ray:
        raise ConfigError("--status reads the operator actor: give --in-ray (and --address) with it")
    connect_ray(args.address)
    try:
        handle = ray.get_actor(OPERATOR_ACTOR, namespace=NAMESPACE)
    except ValueError:
        raise CommandFailed(
            f"no operator actor {OPERATOR_ACTOR} in this Ray cluster: start it with kai-ray operator --in-ray"
        ) from None
    print(_describe(handle))
    lines: list[str] = ray.get(handle.log_tail.remote(STATUS_LOG_LINES), timeout=STATUS_TIMEOUT_S)
    for line in lines:
        print(f"  {line}")
    return 0
