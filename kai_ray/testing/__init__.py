"""Test doubles and harnesses for the Kubernetes backend, used by the tests and by
`kai-ray bench k8s`: a real kube-apiserver and etcd started on loopback (`apiserver`,
built once per machine by build-kube-apiserver.sh), a fake kubelet (no container runtime
exists here) and a stand-in for KubeRay's controller (`fakes`).

Nothing in kai_ray's backends imports this package (an import-linter contract)."""
