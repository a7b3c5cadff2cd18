#!/usr/bin/env bash
# The two commands a newcomer needs, each doing all of its own set-up:
#   ./dev.sh demo   install kai-ray and run the demo (a local Ray cluster, queues, preemption)
#   ./dev.sh demo --kubernetes   the KubeRay story on a local Kubernetes API server
#   ./dev.sh test   install kai-ray with its test tools and run every check and test
# Both work on a fresh Debian machine with Python 3.11; the virtual environment lives in .venv.
set -euo pipefail
cd "$(dirname "$0")"

PY=${PYTHON:-python3}
VENV=.venv

ensure_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PY" -m venv "$VENV" 2>/dev/null; then
      # Debian ships venv separately; install it when we may.
      if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
        rm -rf "$VENV"
        "$PY" -m venv "$VENV"
      else
        echo "dev.sh: '$PY -m venv' failed; install python3-venv (apt-get install python3-venv)" >&2
        exit 1
      fi
    fi
  fi
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
}

# A Debian package a command needs, installed once when its program is missing:
# ensure_debian PROGRAM PACKAGE WHAT-FOR.
ensure_debian() {
  command -v "$1" >/dev/null && return 0
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1 ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }
  else
    echo "dev.sh: install Debian's $2 (apt-get install $2) for $3" >&2
    exit 1
  fi
}

case "${1:-}" in
  demo)
    ensure_venv
    shift
    case " $* " in
      *" --kubernetes "*)  # live Ray in the pods: Ray itself, and ip (iproute2)
        "$VENV/bin/pip" install -q -e '.[kubernetes,ray]'
        ensure_debian ip iproute2 "live Ray in the demo's pods" ;;
      *) "$VENV/bin/pip" install -q -e '.[ray]' ;;
    esac
    exec "$VENV/bin/kai-ray" demo "$@"
    ;;
  test)
    shift
    # The Kubernetes tests run a real kube-apiserver, etcd and KubeRay's operator: built
    # from their Go modules once per machine (about 10 minutes on 2 cores), then cached
    # under ~/.cache/kai-ray. The build starts first and runs beside the pip install
    # (mostly downloads), so a cold machine waits for the longer of the two, not both.
    components_log=$(mktemp)
    bash kai_ray/testing/build-components.sh >"$components_log" 2>&1 &
    components=$!
    ensure_venv
    "$VENV/bin/pip" install -q -e '.[test]'
    echo "== ruff";          "$VENV/bin/ruff" check kai_ray tests
    echo "== ruff format";   "$VENV/bin/ruff" format --check -q kai_ray tests
    echo "== mypy (strict on kai_ray/core, control, k8s, testing, dashboard, sim, conformance)"
    "$VENV/bin/mypy" kai_ray/core kai_ray/control kai_ray/k8s kai_ray/testing kai_ray/dashboard kai_ray/sim kai_ray/conformance
    echo "== import contracts"; "$VENV/bin/lint-imports"
    echo "== Kubernetes components"
    if ! wait "$components"; then cat "$components_log" >&2; exit 1; fi
    grep -v '^building\|^go: ' "$components_log" | grep -E '^(kube|etcd)' || true
    rm -f "$components_log"
    # The web UI tests drive a real headless Chromium: Debian's package (Playwright's own
    # browser download does not work on these machines). The Kubernetes tests run live
    # Ray in network namespaces of their own (iproute2's ip).
    echo "== Debian packages"
    ensure_debian chromium chromium "the web UI tests"
    ensure_debian ip iproute2 "the Kubernetes tests' live Ray"
    ensure_debian redis-server redis-server "the Ray head-restart test (GCS fault tolerance)"
    echo "== pytest"
    exec "$VENV/bin/pytest" "$@"
    ;;
  *)
    echo "usage: ./dev.sh demo | ./dev.sh test [pytest args]" >&2
    exit 2
    ;;
esac
