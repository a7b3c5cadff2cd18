#!/usr/bin/env bash
# Builds the real Kubernetes components the tests and `kai-ray bench k8s` run, from their
# Go modules through the Go module proxy, once per machine: a current kube-apiserver, the
# etcd it supports, kube-controller-manager (its garbage collector and Job controller run
# in the tests that need them), and KubeRay's operator (with its CRDs, from the same
# module). Cached under ~/.cache/kai-ray, keyed by version; prints one line per component:
#   kube-apiserver PATH / kube-controller-manager PATH / etcd PATH / kuberay-operator PATH /
#   kuberay-crds DIR
# Needs Go (1.24 or newer) on PATH. Cold on 2 cores: about 15 minutes, most of it the
# API server; warm: a second.
set -euo pipefail
KUBERNETES=${KAI_RAY_KUBERNETES_VERSION:-1.34.4}   # k8s.io/kubernetes v$KUBERNETES
ETCD=${KAI_RAY_ETCD_VERSION:-3.6.4}                # what Kubernetes $KUBERNETES's go.mod requires
KUBERAY=${KAI_RAY_KUBERAY_VERSION:-1.5.0}
CACHE=${KAI_RAY_CACHE:-$HOME/.cache/kai-ray}
mkdir -p "$CACHE"
exec 9>"$CACHE/components.lock"
flock 9
export GOPATH="$CACHE/go" GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOFLAGS=-mod=mod
export CGO_ENABLED=0 GOTOOLCHAIN=local
command -v go >/dev/null || { echo "build-components.sh: Go is not on PATH (install Go 1.24+)" >&2; exit 1; }

module() {  # module DIR NAME: a throwaway module to build in
  rm -rf "$1"; mkdir -p "$1"; (cd "$1" && go mod init "$2" >/dev/null 2>&1)
}

kubernetes() {  # kubernetes COMMAND: kube-apiserver or kube-controller-manager
  local cmd=$1 out="$CACHE/$1-v$KUBERNETES"
  if [ ! -x "$out" ]; then
    echo "building $cmd v$KUBERNETES (once per machine; the first of the two ~4 minutes on 2 cores) ..." >&2
    local dir="$CACHE/build-$cmd" minor="0.${KUBERNETES#1.}"
    module "$dir" kai-ray.local/$cmd
    cd "$dir"
    # k8s.io/kubernetes replaces its staging modules with local paths; here each is the
    # published module of the same release.
    local staging
    staging=$(go mod download -json "k8s.io/kubernetes@v$KUBERNETES" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p' \
      | xargs sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging.*#\1#p')
    for m in $staging; do go mod edit -replace "$m=$m@v$minor"; done
    go mod edit -require "k8s.io/kubernetes@v$KUBERNETES"
    printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/%s/app"\n\nfunc main() {}\n' "$cmd" > tools.go
    go mod tidy >&2
    local v="k8s.io/component-base/version"
    go build -trimpath -o "$out.tmp" -ldflags "-s -w -X $v.gitVersion=v$KUBERNETES -X $v.gitMajor=1 \
      -X $v.gitMinor=${KUBERNETES#1.} -X $v.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=v$KUBERNETES" \
      "k8s.io/kubernetes/cmd/$cmd" >&2
    mv "$out.tmp" "$out"
    cd - >/dev/null
    rm -rf "$dir"
  fi
  echo "$cmd $out"
}

etcd() {
  local out="$CACHE/etcd-v$ETCD"
  if [ ! -x "$out" ]; then
    echo "building etcd v$ETCD (once per machine) ..." >&2
    local dir="$CACHE/build-etcd"
    module "$dir" kai-ray.local/etcd
    cd "$dir"
    printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' > main.go
    go mod edit -require "go.etcd.io/etcd/server/v3@v$ETCD"
    go mod tidy >&2
    go build -trimpath -o "$out.tmp" -ldflags "-s -w" . >&2
    mv "$out.tmp" "$out"
    cd - >/dev/null
    rm -rf "$dir"
  fi
  echo "etcd $out"
}

kuberay() {
  local out="$CACHE/kuberay-operator-v$KUBERAY" crds="$CACHE/kuberay-crds-v$KUBERAY"
  if [ ! -x "$out" ]; then
    echo "building KubeRay's operator v$KUBERAY (once per machine) ..." >&2
    GOBIN="$CACHE/go/bin" go install -trimpath -ldflags "-s -w" \
      "github.com/ray-project/kuberay/ray-operator@v$KUBERAY" >&2
    mv "$CACHE/go/bin/ray-operator" "$out"
  fi
  if [ ! -d "$crds" ]; then
    local src
    src=$(go mod download -json "github.com/ray-project/kuberay/ray-operator@v$KUBERAY" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
    mkdir -p "$crds.tmp"
    cp "$src"/config/crd/bases/*.yaml "$crds.tmp/"
    mv "$crds.tmp" "$crds"
  fi
  echo "kuberay-operator $out"
  echo "kuberay-crds $crds"
}

case "${1:-all}" in
  apiserver) kubernetes kube-apiserver ;;
  controller-manager) kubernetes kube-controller-manager ;;
  etcd) etcd ;;
  kuberay) kuberay ;;
  all) etcd; kuberay; kubernetes kube-apiserver; kubernetes kube-controller-manager ;;
  *) echo "usage: build-components.sh [apiserver|controller-manager|etcd|kuberay|all]" >&2; exit 2 ;;
esac
