"""The chart's tests' API server in RBAC mode, shared (one fixture for both installs)."""

from tests.helm.test_install import rbac_cluster  # noqa: F401 - a fixture, found here by pytest
