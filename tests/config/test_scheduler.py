"""Scheduler options -> the core's SchedulerConfig."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kai_ray.config import ConfigError, load_scheduler_config, parse_scheduler_config
from kai_ray.core.model.snapshot import DEFAULT_ACTIONS, SchedulerConfig, Topology


def test_no_options_gives_every_default() -> None:
    assert parse_scheduler_config(None) == SchedulerConfig()
    assert parse_scheduler_config({}) == SchedulerConfig()


def test_every_option_maps_to_the_core() -> None:
    config = parse_scheduler_config(
        {
            "placement": {"gpu": "spread", "cpu": "spread"},
            "gpuDeviceOrder": "spread",
            "kValue": 0,
            "staleGangGracePeriod": "2m",
            "preemptionDelay": "90s",
            "maxConsolidationPreemptees": 4,
            "fullHierarchyFairness": False,
            "actions": ["allocate", "reclaim"],
            "topologies": {"dc": {"levels": ["zone", "rack"]}},
        }
    )
    assert config == SchedulerConfig(
        actions=("allocate", "reclaim"),
        gpu_placement="spread",
        cpu_placement="spread",
        gpu_device_order="spread",
        k_value=0.0,
        stale_gang_grace_period=120.0,
        preemption_delay_s=90.0,
        max_consolidation_preemptees=4,
        full_hierarchy_fairness=False,
        topologies={"dc": Topology("dc", ("zone", "rack"))},
    )


def test_negative_grace_period_means_never() -> None:
    assert parse_scheduler_config({"staleGangGracePeriod": -1}).stale_gang_grace_period == -1.0


def test_usage_history_options_take_durations() -> None:
    config = parse_scheduler_config(
        {"usageWindow": "7d", "usageHalfLife": "1h", "usageWindowType": "tumbling"}
    )
    assert (config.usage_window_s, config.usage_half_life_s) == (7 * 86400.0, 3600.0)
    assert config.usage_window_type == "tumbling"
    assert SchedulerConfig().usage_window_s == 0.0  # off unless asked for


def test_reservations_take_a_duration_and_are_off_by_default() -> None:
    config = parse_scheduler_config({"reserveAfter": "30m", "maxReservations": 2})
    assert (config.reserve_after_s, config.max_reservations) == (1800.0, 2)
    assert parse_scheduler_config({}).reserve_after_s == 0.0


def test_default_actions_in_kai_order() -> None:
    assert parse_scheduler_config({}).actions == DEFAULT_ACTIONS


INVALID: list[tuple[str, dict[str, Any], list[str]]] = [
    ("bad placement", {"placement": {"gpu": "pack"}}, ["placement.gpu", "'binpack' or 'spread'"]),
    ("unknown key", {"kvalue": 1}, ["unknown key 'kvalue'", "did you mean 'kValue'"]),
    ("negative kValue", {"kValue": -1}, ["kValue", "greater than or equal to 0"]),
    ("bad duration", {"staleGangGracePeriod": "soon"}, ["staleGangGracePeriod", "not a duration"]),
    ("negative window", {"usageWindow": "-1h"}, ["usageWindow: -3600s is negative; use 0 (time-based"]),
    ("negative half-life", {"usageHalfLife": -5}, ["usageHalfLife: -5s is negative; use 0 (no decay)"]),
    (
        "negative preemption delay",
        {"preemptionDelay": "-2m"},
        ["preemptionDelay: -120s is negative; use 0 (no wait for new nodes) or a duration such as 2m"],
    ),
    (
        "negative reservation wait",
        {"reserveAfter": "-30m"},
        ["reserveAfter: -1800s is negative; use 0 (no reservations) or a duration such as 30m"],
    ),
    ("no reservations at all", {"maxReservations": 0}, ["maxReservations", "greater than or equal to 1"]),
    ("unknown window type", {"usageWindowType": "hopping"}, ["usageWindowType", "'sliding' or 'tumbling'"]),
    ("unknown action", {"actions": ["allocate", "shuffle"]}, ["actions", "'shuffle' is not an"]),
    ("action twice", {"actions": ["allocate", "allocate"]}, ["'allocate' is listed twice"]),
    ("topology without levels", {"topologies": {"dc": {"levels": []}}}, ["topology 'dc'"]),
    (
        "topology level twice",
        {"topologies": {"dc": {"levels": ["rack", "rack"]}}},
        ["topology 'dc': levels", "'rack' is listed twice"],
    ),
]


@pytest.mark.parametrize(("data", "fragments"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_options(data: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_scheduler_config(data, path="scheduler.yaml")
    message = str(caught.value)
    assert message.startswith("scheduler.yaml: ")
    for fragment in fragments:
        assert fragment in message


def test_load_from_file(tmp_path: Path) -> None:
    path = tmp_path / "scheduler.yaml"
    path.write_text("placement: {gpu: spread}\nkValue: 2\n")
    config = load_scheduler_config(path)
    assert (config.gpu_placement, config.k_value) == ("spread", 2.0)


def test_a_file_that_is_not_a_map() -> None:
    with pytest.raises(ConfigError, match="must be a map of scheduler options"):
        parse_scheduler_config(["allocate"])


def test_a_command_lines_preemption_delay_replaces_the_files() -> None:
    from kai_ray.config import with_preemption_delay

    from_file = parse_scheduler_config({"preemptionDelay": "5m", "kValue": 0})
    assert with_preemption_delay(from_file, None, "--preemption-delay") is from_file
    assert with_preemption_delay(None, None, "--preemption-delay") is None
    config = with_preemption_delay(from_file, "2m", "--preemption-delay")
    assert config is not None and (config.preemption_delay_s, config.k_value) == (120.0, 0.0)
    alone = with_preemption_delay(None, "90", "--preemption-delay")
    assert alone == SchedulerConfig(preemption_delay_s=90.0)
    for bad in ("soon", "-1m", "inf"):
        with pytest.raises(ConfigError, match=r"--preemption-delay.*not a duration of 0 or more"):
            with_preemption_delay(None, bad, "--preemption-delay")


def test_both_backends_commands_take_the_preemption_delay() -> None:
    from kai_ray.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["start", "--preemption-delay", "2m"]).preemption_delay == "2m"
    operator = parser.parse_args(["operator", "--cluster-can-grow", "--preemption-delay", "90s"])
    assert operator.cluster_can_grow and operator.preemption_delay == "90s"
    assert not parser.parse_args(["operator"]).cluster_can_grow


def test_a_command_lines_reservation_wait_replaces_the_files() -> None:
    from kai_ray.cli import build_parser
    from kai_ray.config import with_reserve_after

    from_file = parse_scheduler_config({"reserveAfter": "1h", "maxReservations": 2})
    assert with_reserve_after(from_file, None, "--reserve-after") is from_file
    config = with_reserve_after(from_file, "30m", "--reserve-after")
    assert config is not None and (config.reserve_after_s, config.max_reservations) == (1800.0, 2)
    with pytest.raises(
        ConfigError, match=r"--reserve-after.*not a duration of 0 or more; .*0 \(no reservations\)"
    ):
        with_reserve_after(None, "later", "--reserve-after")
    parser = build_parser()
    assert parser.parse_args(["start", "--reserve-after", "30m"]).reserve_after == "30m"
    assert parser.parse_args(["operator", "--reserve-after", "2h"]).reserve_after == "2h"
