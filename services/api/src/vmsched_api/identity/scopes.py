"""Scopes a token holds, what each one grants, and the principal a request acts as."""

from __future__ import annotations

from dataclasses import dataclass

from vmsched_contract.scopes import Scope

# The scopes that grant each scope: itself, and those that include it.
GRANTED_BY: dict[Scope, frozenset[Scope]] = {
    Scope.VMS_READ: frozenset({Scope.VMS_READ, Scope.VMS_WRITE, Scope.ADMIN}),
    Scope.VMS_WRITE: frozenset({Scope.VMS_WRITE, Scope.ADMIN}),
    Scope.HOSTS_READ: frozenset({Scope.HOSTS_READ, Scope.HOSTS_ADMIN, Scope.ADMIN}),
    Scope.HOSTS_ADMIN: frozenset({Scope.HOSTS_ADMIN, Scope.ADMIN}),
    Scope.ADMIN: frozenset({Scope.ADMIN}),
}

BOOTSTRAP_TOKEN_ID = "bootstrap"


@dataclass(frozen=True, slots=True)
class Principal:
    """What a request acts as: a token of a project, with its scopes."""

    token_id: str  # the token's id (a UUID), or "bootstrap" for VMSCHED_BOOTSTRAP_TOKEN
    name: str
    project: str
    scopes: frozenset[Scope]

    def may(self, scope: Scope) -> bool:
        return not self.scopes.isdisjoint(GRANTED_BY[scope])

    @property
    def is_admin(self) -> bool:
        return Scope.ADMIN in self.scopes

    def project_filter(self, asked: str | None) -> str | None:
        """The project whose VMs a request may see: an admin's choice (None: every project), else
        the token's own whatever was asked."""
        return asked if self.is_admin else self.project

    def sees(self, project: str) -> bool:
        """Whether a thing of ``project`` exists for this principal (anything else is a 404)."""
        return self.is_admin or project == self.project
