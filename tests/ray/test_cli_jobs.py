"""The CLI against a live scheduler: queue apply/list, status, explain, bad input, and Ray
Jobs queued outside Ray, submitted when admitted, stopped and re-queued on preemption."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import kai_ray
from kai_ray.cli import main

from .conftest import Gate, groups_of, wait_until

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]

QUEUES_YAML = """\
- name: team-a
  resources:
    gpu: {quota: 8}
- name: team-b
  resources:
    gpu: {quota: 4, limit: 8}
"""


def run_cli(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def hold(gate: Any) -> str:
    while not ray.get(gate.is_open.remote("go")):
        import time

        time.sleep(0.05)
    return "ok"


def test_queue_commands_and_bad_input_leave_admitted_work_alone(
    start_scheduler: Any, tmp_path: Path, capsys: Any
) -> None:
    start_scheduler([{"name": "old", "resources": {"gpu": {"quota": -1}}}])
    good = tmp_path / "queues.yaml"
    good.write_text(QUEUES_YAML)
    code, out, _ = run_cli(capsys, "queue", "apply", "-f", str(good))
    assert code == 0 and out.strip() == "queues: added team-a, team-b; kept old"

    gate = Gate.remote()
    h = kai_ray.workload(queue="team-a", resources_per_worker={"GPU": 2})(hold).submit(gate)
    assert h.wait_admitted(30)["state"] == "Running"
    group = groups_of(h.id)[0]["name"]

    code, out, _ = run_cli(capsys, "queue", "list")
    assert code == 0
    header, *rows = out.strip().splitlines()
    assert header.split()[:2] == ["QUEUE", "PARENT"]
    row_a = next(r for r in rows if r.startswith("team-a"))
    assert row_a.split()[3:6] == ["8", "/", "0"]  # quota gpu / cpu
    assert "2 / 0               2 / 0" in row_a  # fair share, allocated
    code, out, _ = run_cli(capsys, "queue", "list", "--json")
    by_name = {q["name"]: q for q in json.loads(out)}
    assert by_name["team-b"]["limit"][0] == 8 and by_name["team-a"]["allocated"][0] == 2

    # A malformed file: one clear line, exit 2, and nothing changes.
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: team-a\n  resources:\n    gpu: {quota: 4, limit: 2}\n")
    code, _, err = run_cli(capsys, "queue", "apply", "-f", str(bad))
    assert code == 2 and "limit" in err and "quota" in err
    assert [q["name"] for q in json.loads(run_cli(capsys, "queue", "list", "--json")[1])] == [
        "old",
        "team-a",
        "team-b",
    ]
    # Unknown queue, and a worker no node can hold: refused with the fix in the message.
    with pytest.raises(kai_ray.SubmitError, match="queue 'nope' does not exist; use one of"):
        kai_ray.workload(queue="nope")(hold).submit(gate)
    with pytest.raises(kai_ray.SubmitError, match="largest node has GPU 4"):
        kai_ray.workload(queue="team-a", resources_per_worker={"GPU": 8})(hold).submit(gate)
    code, _, err = run_cli(capsys, "job", "submit", "--queue", "nope", "--", "true")
    assert code == 2 and "does not exist" in err
    code, _, err = run_cli(capsys, "explain", "no-such-workload")
    assert code == 2 and "no workload 'no-such-workload'" in err
    # The admitted workload never noticed.
    assert h.status() == "Running" and groups_of(h.id)[0]["name"] == group

    code, out, _ = run_cli(capsys, "status")
    assert code == 0 and "Running 1" in out and h.id in out
    code, out, _ = run_cli(capsys, "explain", h.id)
    assert code == 0 and "state Running" in out and "Queued     -> Admitting" not in out
    assert "-> Running" in out and group in out
    ray.get(gate.release.remote("go"))
    assert h.result(30) == "ok"


JOB = """\
import os, sys, time
import ray
import kai_ray
ray.init()
strategy = kai_ray.reservation_strategy()

@ray.remote(num_gpus=4, num_cpus=0.1)
def where():
    return ray.get_runtime_context().get_node_id()

print("NODES", sorted(ray.get([where.options(scheduling_strategy=strategy).remote()
                               for _ in range(int(sys.argv[1]))])), flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.1)
"""


def submit_job(capsys: Any, script: Path, flag: Path, workers: int, priority: str) -> str:
    code, out, err = run_cli(
        capsys,
        "job",
        "submit",
        "--queue",
        "a",
        "--priority",
        priority,
        "--gpus",
        "4",
        "--cpus",
        "0.1",
        "--workers",
        str(workers),
        "--grace-period",
        "0",
        "--json",
        "--",
        sys.executable,
        str(script),
        str(workers),
        str(flag),
    )
    assert code == 0, err
    return str(json.loads(out)["id"])


def test_ray_jobs_are_queued_outside_ray_and_requeued_on_preemption(
    start_scheduler: Any, tmp_path: Path, capsys: Any
) -> None:
    from ray.job_submission import JobSubmissionClient

    start_scheduler([{"name": "a", "resources": {"gpu": {"quota": 12}, "cpu": {"quota": -1}}}])
    jobs = JobSubmissionClient(ray.get_runtime_context().gcs_address)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    sched = kai_ray.get_scheduler()

    big = submit_job(capsys, script, tmp_path / "big-done", 2, "train")  # 8 of 12 GPUs
    wait_until(lambda: sched.info(big)["state"] == "Running", timeout=30)
    waiting = submit_job(capsys, script, tmp_path / "w-done", 2, "train")  # 8 more: waits
    wait_until(lambda: sched.info(waiting)["position"] == 1, timeout=10)
    sub_big = sched.info(big)["submission_id"]
    assert sub_big == f"{big}-1"
    # The waiting job exists only in kai-ray: Ray has not seen it (no 900 s timeout there).
    assert all(not (j.submission_id or "").startswith(waiting) for j in jobs.list_jobs())
    # The running job's tasks ran in its reservation.
    logs = wait_until(
        lambda: "NODES" in jobs.get_job_logs(sub_big) and jobs.get_job_logs(sub_big),
        timeout=60,
        what="job output",
    )
    assert str(sorted(sched.info(big)["nodes"])) in logs

    # Inference preempts the training job: Ray job stopped, kai-ray workload re-queued.
    urgent = submit_job(capsys, script, tmp_path / "u-done", 3, "inference")  # all 12 GPUs
    wait_until(
        lambda: sched.info(urgent)["state"] == "Running",
        timeout=30,
        what=lambda: f"{sched.info(urgent)} {sched.info(big)}",
    )
    assert sched.info(big)["state"] == "Queued" and sched.info(big)["preemptions"] == 1
    wait_until(lambda: jobs.get_job_status(sub_big).value == "STOPPED", timeout=30)
    code, out, _ = run_cli(capsys, "job", "list")
    assert code == 0 and big in out and urgent in out

    (tmp_path / "u-done").write_text("")
    wait_until(lambda: sched.info(urgent)["state"] == "Succeeded", timeout=60)
    # Re-admitted and submitted to Ray again, as a new Ray job of the same workload.
    wait_until(lambda: sched.info(big)["state"] == "Running", timeout=30)
    assert sched.info(big)["submission_id"] == f"{big}-2"
    (tmp_path / "big-done").write_text("")
    (tmp_path / "w-done").write_text("")
    wait_until(lambda: sched.info(big)["state"] == "Succeeded", timeout=60)
    wait_until(lambda: sched.info(waiting)["state"] == "Succeeded", timeout=90)


HANDOFF_JOB = """\
import os, sys, time
import ray
from ray.util.placement_group import placement_group
import kai_ray
ray.init()
placement = kai_ray.reservation_placement()
# A library's own group, on the nodes kai-ray admitted the job to (what Ray Train does
# with kai_ray.train_scaling_config()).
pg = placement_group([{"GPU": 4}] * len(placement["nodes"]), name="library-group",
                     bundle_label_selector=[{"ray.io/node-id": n} for n in placement["nodes"]])
ray.get(pg.ready(), timeout=60)
print("OWN GROUP READY", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.1)
"""


def test_handoff_job_places_its_own_work_and_is_cleaned_up_on_preemption(
    start_scheduler: Any, tmp_path: Path, capsys: Any
) -> None:
    from ray.job_submission import JobSubmissionClient
    from ray.util.placement_group import placement_group_table

    start_scheduler([{"name": "a", "resources": {"gpu": {"quota": 12}, "cpu": {"quota": -1}}}])
    jobs = JobSubmissionClient(ray.get_runtime_context().gcs_address)
    script = tmp_path / "handoff.py"
    script.write_text(HANDOFF_JOB)
    sched = kai_ray.get_scheduler()
    code, out, err = run_cli(
        capsys,
        "job",
        "submit",
        "--queue",
        "a",
        "--gpus",
        "4",
        "--cpus",
        "0",
        "--workers",
        "2",
        "--grace-period",
        "0",
        "--handoff",
        "--json",
        "--",
        sys.executable,
        str(script),
        str(tmp_path / "never"),
    )
    assert code == 0, err
    wid = json.loads(out)["id"]
    wait_until(lambda: sched.info(wid)["state"] == "Running", timeout=30)
    info = sched.info(wid)

    def library_groups() -> list[dict[str, Any]]:
        return [
            g
            for g in placement_group_table().values()
            if g["name"] == "library-group" and g["state"] != "REMOVED"
        ]

    # kai-ray's own group went to the job, which reserved the same on the same nodes.
    assert groups_of(wid) == [] and info["workers"] == 2
    wait_until(
        lambda: "OWN GROUP READY" in jobs.get_job_logs(info["submission_id"]),
        timeout=60,
        what=lambda: jobs.get_job_logs(info["submission_id"]),
    )
    (own,) = library_groups()
    assert sorted(own["bundles_to_node_id"].values()) == sorted(info["nodes"])
    assert {q["name"]: q for q in sched.queues()}["a"]["allocated"][0] == 8  # still counted

    # Preempted: the Ray job is stopped and Ray removes what it created.
    code, out, err = run_cli(
        capsys,
        "job",
        "submit",
        "--queue",
        "a",
        "--priority",
        "inference",
        "--gpus",
        "4",
        "--cpus",
        "0",
        "--workers",
        "3",
        "--json",
        "--",
        sys.executable,
        "-c",
        "print('hi')",
    )
    assert code == 0, err
    urgent = json.loads(out)["id"]
    wait_until(
        lambda: sched.info(urgent)["state"] in ("Running", "Succeeded"),
        timeout=60,
        what=lambda: sched.info(urgent),
    )
    assert sched.info(wid)["state"] == "Queued" and sched.info(wid)["preemptions"] == 1
    wait_until(lambda: jobs.get_job_status(info["submission_id"]).value == "STOPPED", timeout=30)
    wait_until(lambda: library_groups() == [], timeout=30, what="library group removed")
    sched.cancel(wid)
