"""Tenants by token, for a backend whose callers have no identity of their own (Ray: its
token auth is one secret shared by all). Each tenant and admin holds a token of its own;
the scheduler keeps only their sha256 hashes (kai_ray.config.tenants reads the file).

TenantGate is what a scheduler asks on each call that submits, cancels or changes
something: who the token names (a tenant, an admin, or nobody to check when no tenants
are configured), the spec stamped with its tenant (a caller never chooses its own), and
whether it may cancel a workload (its own only, unless an admin) or change queues and
tenants (admins only). The gate keeps the tenants in the scheduler's records, so they
survive a restart of the scheduler.

Cheap by design: one sha256 of the token and one dict lookup per call, whatever the
number of tenants or workloads in the call.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_ray.config.tenants import HASH_PREFIX, TenantsFile, parse_tenants
from kai_ray.control.store import Records
from kai_ray.control.workload import Workload, WorkloadSpec

__all__ = [
    "TENANTS_KEY",
    "TOKEN_ENV",
    "Principal",
    "TenantGate",
    "Tenants",
    "TokenRefused",
    "new_token",
    "token_hash",
]

TOKEN_ENV = "KAI_RAY_TOKEN"
TENANTS_KEY = "tenants"  # the scheduler's record: {"document": a tenants document, or None}

_HOW_TO_PRESENT = (
    f"set the environment variable {TOKEN_ENV} to your token, or pass kai_ray.init(token=...) "
    "(--token on the command line)"
)


class TokenRefused(PermissionError):
    """A call the tenants' tokens do not allow; the message says what was missing and how
    to fix it. `code`: token-missing, token-unknown, admin-required or not-owner."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent from the scheduler to its caller: keep the code across pickling.
        return (type(self), (str(self), self.code))


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a token names: a tenant (its name and labels) or an admin."""

    name: str
    admin: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        return f"{'admin' if self.admin else 'tenant'} {self.name!r}"


def token_hash(token: str) -> str:
    """`sha256:<hex>`, the form a tenants file holds."""
    return HASH_PREFIX + hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh random token and its hash (`kai-ray tenant token`). Never one that begins
    with "-": a command line would read `--token -x...` as an option (one in 64 would)."""
    token = secrets.token_urlsafe(32)
    while token.startswith("-"):
        token = secrets.token_urlsafe(32)
    return token, token_hash(token)


class Tenants:
    """The tenants and admins of one tenants file, looked up by the hash of a token."""

    def __init__(self, parsed: TenantsFile) -> None:
        self.file = parsed
        # hash -> (the hash as the file holds it, who it names)
        self._by_hash: dict[str, tuple[str, Principal]] = {}
        for collection, entry in parsed.entries():
            labels = dict(getattr(entry, "labels", {}))
            who = Principal(entry.name, collection == "admins", labels)
            self._by_hash[entry.token_hash] = (entry.token_hash, who)

    def who(self, token: str | None) -> Principal:
        """The tenant or admin the token names; TokenRefused when none or no token."""
        if not token:
            raise TokenRefused(
                f"this kai-ray scheduler checks tenants' tokens, and the call carried none; "
                f"{_HOW_TO_PRESENT}",
                "token-missing",
            )
        digest = token_hash(token)
        found = self._by_hash.get(digest)
        # The lookup is by the hash (a token's hash tells nothing of another token); the
        # constant-time compare is there so that no later change makes it a prefix match.
        if found is None or not hmac.compare_digest(digest, found[0]):
            raise TokenRefused(
                "the token presented is no tenant's or admin's of this scheduler (its sha256 hash is "
                f"not in the tenants file); check it, then {_HOW_TO_PRESENT}; an admin makes a "
                "token with `kai-ray tenant token`",
                "token-unknown",
            )
        return found[1]

    def listing(self) -> list[dict[str, Any]]:
        """Names, roles and labels (never the hashes)."""
        return [
            {"name": p.name, "admin": p.admin, "labels": dict(p.labels)}
            for p in sorted((p for _, p in self._by_hash.values()), key=lambda p: (p.admin, p.name))
        ]


class TenantGate:
    """The checks a scheduler makes on the calls that submit, cancel or change things.
    With no tenants configured every call passes as it always did (and a spec's tenant
    is cleared: a caller never names its own)."""

    def __init__(self, records: Records, initial: Mapping[str, Any] | None = None) -> None:
        """The tenants stored by this scheduler before (it restarted), else `initial`
        (the document it was started with), kept so that a restart finds them."""
        self.records = records
        stored = records.get(TENANTS_KEY)
        if stored is not None:
            document = stored.get("document")
        else:
            document = initial
            if initial is not None:
                self._save(initial)
        self.tenants = None if document is None else Tenants(parse_tenants(document))

    # ------------------------------------------------------------ who calls

    def caller(self, token: str | None) -> Principal | None:
        """The caller the token names; None when no tenants are configured (nothing to
        check). TokenRefused for a missing or unknown token."""
        return None if self.tenants is None else self.tenants.who(token)

    def stamp(self, who: Principal | None, spec: WorkloadSpec) -> WorkloadSpec:
        """The spec as its caller's: a tenant's name and labels; none for an admin or when
        no tenants are configured (no tenant rule binds it). Whatever the client sent is
        overwritten."""
        if who is None or who.admin:
            spec.tenant, spec.tenant_labels = None, {}
        else:
            spec.tenant, spec.tenant_labels = who.name, dict(who.labels)
        return spec

    def require_admin(self, token: str | None, what: str) -> Principal | None:
        who = self.caller(token)
        if who is not None and not who.admin:
            raise TokenRefused(
                f"{what} needs an admin's token, and {who.describe()} presented its own; "
                "ask an admin of this scheduler (the admins of its tenants file)",
                "admin-required",
            )
        return who

    def check_owner(self, who: Principal | None, workloads: Iterable[Workload], what: str) -> None:
        """A tenant may act on its own workloads only; an admin on any."""
        if who is None or who.admin:
            return
        for w in workloads:
            if w.spec.tenant != who.name:
                owner = f"tenant {w.spec.tenant!r}" if w.spec.tenant else "an admin (or no tenant)"
                raise TokenRefused(
                    f"workload {w.id!r} belongs to {owner}: {who.describe()} may {what} only its own "
                    "workloads; an admin may do it for any",
                    "not-owner",
                )

    def owned(self, who: Principal | None, workloads: Iterable[Workload]) -> list[Workload]:
        """The workloads the caller may act on (all of them for an admin)."""
        if who is None or who.admin:
            return list(workloads)
        return [w for w in workloads if w.spec.tenant == who.name]

    # ------------------------------------------------------------ changing them

    def apply(self, document: Mapping[str, Any] | None, token: str | None) -> dict[str, Any]:
        """Replace the tenants (None: stop checking tokens); an admin's call once tenants
        are configured. ConfigError for a bad document, nothing changed."""
        self.require_admin(token, "changing the tenants")
        parsed = None if document is None else parse_tenants(document)
        self._save(None if parsed is None else parsed.document())
        self.tenants = None if parsed is None else Tenants(parsed)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        if self.tenants is None:
            return {
                "configured": False,
                "tenants": [],
                "admins": [],
                "summary": "no tenants: tokens unchecked",
            }
        rows = self.tenants.listing()
        tenants = [r["name"] for r in rows if not r["admin"]]
        admins = [r["name"] for r in rows if r["admin"]]
        return {
            "configured": True,
            "tenants": tenants,
            "admins": admins,
            "listing": rows,
            "summary": f"{len(tenants)} tenant(s) ({', '.join(tenants) or 'none'}), "
            f"{len(admins)} admin(s) ({', '.join(admins)})",
        }

    def _save(self, document: Mapping[str, Any] | None) -> None:
        self.records.save(TENANTS_KEY, {"document": None if document is None else dict(document)})
