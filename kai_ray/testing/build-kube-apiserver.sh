#!/usr/bin/env bash
# Builds a real kube-apiserver (Debian's Kubernetes 1.20 source) and installs etcd, once per
# machine, for the Kubernetes tests. Prints the binary's path. The binary is cached under
# ~/.cache/kai-ray, keyed by the Debian source version, so only a fresh machine pays the
# build (about 13 minutes on 2 cores). Needs root for apt-get (as on CI and these machines).
set -euo pipefail
CACHE=${KAI_RAY_CACHE:-$HOME/.cache/kai-ray}
mkdir -p "$CACHE"
exec 9>"$CACHE/kube-apiserver.lock"
flock 9

have_debsrc() { grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ ; }
apt_quiet() { DEBIAN_FRONTEND=noninteractive apt-get "$@" -qq >/dev/null; }

if ! have_debsrc; then
  cat > /etc/apt/sources.list.d/kai-ray-src.sources <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt_quiet update
fi
if ! command -v etcd >/dev/null || ! command -v openssl >/dev/null; then
  apt_quiet install -y etcd-server etcd-client openssl
fi
VERSION=$(apt-cache showsrc kubernetes 2>/dev/null | awk '/^Version:/ {print $2; exit}')
if [ -z "$VERSION" ]; then apt_quiet update; VERSION=$(apt-cache showsrc kubernetes | awk '/^Version:/ {print $2; exit}'); fi
OUT="$CACHE/kube-apiserver-$VERSION"
if [ -x "$OUT" ]; then echo "$OUT"; exit 0; fi

echo "building kube-apiserver $VERSION (once per machine, about 13 minutes) ..." >&2
apt_quiet install -y golang-1.19-go rsync golang-github-modern-go-reflect2-dev make
WORK=$(mktemp -d "$CACHE/build.XXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
apt-get source --download-only kubernetes >/dev/null 2>&1
tar xzf kubernetes_*.orig.tar.gz
SRC=$(find . -maxdepth 1 -mindepth 1 -type d | head -1)
cd "$SRC"
# The vendored reflect2 1.0.1 crashes the server under Go >= 1.18; Debian's 1.0.2 does not.
rm -f vendor/github.com/modern-go/reflect2/*.go vendor/github.com/modern-go/reflect2/*.s
cp /usr/share/gocode/src/github.com/modern-go/reflect2/*.go /usr/share/gocode/src/github.com/modern-go/reflect2/*.s \
   vendor/github.com/modern-go/reflect2/
mkdir -p .go/src/k8s.io && ln -s ../../.. .go/src/k8s.io/kubernetes
GOPATH=$PWD/.go PATH=/usr/lib/go-1.19/bin:$PATH CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=vendor \
  GOCACHE="$CACHE/go-build" \
  KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20 KUBE_GIT_TREE_STATE=clean \
  make WHAT=cmd/kube-apiserver >&2
install -m 0755 _output/bin/kube-apiserver "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "$OUT"
