"""Test doubles and harnesses for the Kubernetes backend, used by the tests and by
`kai-ray bench k8s`: a real kube-apiserver and etcd started on loopback (`apiserver`)
and KubeRay's real operator (`kuberay`), each built once per machine from its Go module
by build-components.sh; a fake kubelet (no container runtime exists here) and a
stand-in for KubeRay's controller for the flows the real one cannot finish here without
a live Ray head (`fakes`).

Nothing in kai_ray's backends imports this package (an import-linter contract)."""
