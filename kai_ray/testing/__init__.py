"""Test doubles and harnesses for the Kubernetes backend, used by the tests and by
`kai-ray bench k8s`: a real kube-apiserver and etcd started on loopback (`apiserver`)
and KubeRay's real operator (`kuberay`), each built once per machine from its Go module
by build-components.sh; a fake kubelet (no container runtime exists here: `fakes`) that
runs real Ray for a RayCluster's pods, each in a network namespace of its own
(`liveray`), so that KubeRay's operator finds live Ray heads; `kai-ray demo
--kubernetes` (`kubedemo`).

Nothing in kai_ray's backends imports this package (an import-linter contract)."""
