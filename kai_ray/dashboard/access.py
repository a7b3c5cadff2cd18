"""Who may read the dashboard: anyone on this machine by default (it listens on
127.0.0.1); listening wider needs a token, and then every request must carry it.

A token is taken from `Authorization: Bearer T` (or Ray's `X-Ray-Authorization`), from a
cookie (kai-ray's own, or Ray's dashboard cookie), or once from `?token=T` in a page's
URL, which the server answers by setting the cookie. Where Ray runs with token auth
(`RAY_AUTH_MODE=token`), Ray's token is accepted too: the Ray backend passes Ray's check
as `also`.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "COOKIE",
    "LOOPBACK",
    "Access",
    "DashboardAccessError",
    "access_for",
    "is_loopback",
    "token_of",
]

LOOPBACK = "127.0.0.1"
COOKIE = "kai-ray-dashboard-token"
RAY_COOKIE = "ray-authentication-token"


class DashboardAccessError(ValueError):
    """The dashboard cannot listen as asked (names the flag and the fix)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost: assume it is reachable from outside


@dataclass(slots=True)
class Access:
    token: str | None = None  # the dashboard's own token (--token); None: none set
    required: bool = False  # whether every request must carry an accepted token
    also: Callable[[str], bool] | None = None  # another accepted token (Ray's), checked by its owner
    # Accepted always: a token shared with trusted peers (Ray's dashboard plugin reads it
    # from the cluster's own key-value store to forward requests).
    internal: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    def allows(self, token: str | None) -> bool:
        if not self.required:
            return True
        if not token:
            return False
        if hmac.compare_digest(token, self.internal):
            return True
        if self.token is not None and hmac.compare_digest(token, self.token):
            return True
        return self.also is not None and self.also(token)


def access_for(
    host: str,
    token: str | None,
    also: Callable[[str], bool] | None = None,
    *,
    flags: tuple[str, str] = ("--host", "--token"),
    on_ray: bool = True,
) -> Access:
    """The access rule for listening on `host`: loopback needs no token unless one is
    given; any other address needs one (this dashboard's, or Ray's where Ray checks one).
    Raises DashboardAccessError for a wide listen without any, naming `flags` (the host's
    and the token's, as the command calls them) and, `on_ray`, Ray's token auth."""
    wide = not is_loopback(host)
    if wide and not token and also is None:
        host_flag, token_flag = flags
        ray = ", or run Ray with token auth (RAY_AUTH_MODE=token)" if on_ray else ""
        raise DashboardAccessError(
            f"dashboard: listening on {host} ({host_flag}) makes the dashboard reachable from other "
            f"machines, so it needs a token: pass {token_flag} T (or set KAI_RAY_DASHBOARD_TOKEN){ray}; "
            f"or keep the default host {LOOPBACK}"
        )
    return Access(token=token or None, required=wide or bool(token), also=also)


def token_of(headers: Mapping[str, str], cookies: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The token a request carries, from wherever a client may put it."""
    for name in ("Authorization", "X-Ray-Authorization"):
        value = headers.get(name, "")
        if value.lower().startswith("bearer "):
            return value[7:].strip()
    return cookies.get(COOKIE) or cookies.get(RAY_COOKIE) or query.get("token") or None
