"""Redaction policies: which kinds of protected values a tenant's transcripts lose.

A policy is written ``off``, ``pci``, ``pii`` or a ``+``-joined list of entity types
(``card_number+cvv+email``):

- ``off``: nothing is redacted (the default: transcripts are published as recognized);
- ``pci``: what PCI DSS protects: card numbers, security codes, expiry dates;
- ``pii``: ``pci`` plus US social security numbers, bank account and routing numbers, phone
  numbers, e-mail addresses and dates of birth.

``redaction.policy`` (``STREAMSCRIBE_REDACTION_POLICY``) is every tenant's default;
``redaction.tenant_policies`` (``tenant:policy,…``) overrides it per tenant, as
``asr.tenant_endpoints`` does for endpoint rules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pipeline.contracts.audio_chunk import LABEL_PATTERN, MAX_TENANT_BYTES
from pipeline.contracts.messages import EntityType
from pipeline.errors import ConfigError

__all__ = [
    "DIGIT_ENTITIES",
    "OFF",
    "PCI",
    "PII",
    "POLICY_PATTERN",
    "Policy",
    "TenantPolicies",
    "parse_policy",
    "parse_tenant_policies",
]

PCI_ENTITIES = frozenset({EntityType.CARD_NUMBER, EntityType.CVV, EntityType.EXPIRY})
PII_ENTITIES = frozenset(EntityType)
DIGIT_ENTITIES = frozenset(EntityType) - {EntityType.EMAIL}
"""Entity types spelled in digits (an unfinished digit run may be one of them)."""

_ENTITY_NAMES = "|".join(entity.value for entity in EntityType)
POLICY_PATTERN = rf"off|pci|pii|(?:{_ENTITY_NAMES})(?:\+(?:{_ENTITY_NAMES}))*"
"""What a policy may be written as (the settings check it)."""


@dataclass(frozen=True, slots=True)
class Policy:
    """The entity types a tenant's transcripts lose; ``name`` as it was written."""

    name: str
    entities: frozenset[EntityType] = field(default_factory=frozenset)

    @property
    def redacting(self) -> bool:
        """Whether anything is redacted (partials masked, DTMF digits withheld, …)."""
        return bool(self.entities)

    @property
    def digits(self) -> bool:
        """Whether any entity type spelled in digits is redacted (the hold applies)."""
        return bool(self.entities & DIGIT_ENTITIES)

    def __contains__(self, entity: object) -> bool:
        return entity in self.entities


OFF = Policy("off")
PCI = Policy("pci", PCI_ENTITIES)
PII = Policy("pii", PII_ENTITIES)
_NAMED = {policy.name: policy for policy in (OFF, PCI, PII)}


def parse_policy(text: str, where: str = "redaction policy") -> Policy:
    """``off``, ``pci``, ``pii`` or ``card_number+ssn+…`` as a ``Policy``.

    Raises:
        ConfigError: anything else (``where`` names the setting in the message).
    """
    name = text.strip().lower()
    if not re.fullmatch(POLICY_PATTERN, name):
        raise ConfigError(
            f"{where}: {text!r} is not off, pci, pii or entity types joined by + "
            f"({', '.join(entity.value for entity in EntityType)})"
        )
    if name in _NAMED:
        return _NAMED[name]
    return Policy(name, frozenset(EntityType(part) for part in name.split("+")))


def parse_tenant_policies(text: str, where: str = "redaction tenant policies") -> dict[str, Policy]:
    """``"acme:pci,globex:card_number+email"`` → ``{"acme": PCI, "globex": Policy(…)}``.

    Raises:
        ConfigError: an entry that is not ``tenant:policy`` with a valid tenant label and
            policy, or a tenant named twice.
    """
    policies: dict[str, Policy] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        tenant, colon, written = (part.strip() for part in entry.partition(":"))
        if not colon or len(tenant) > MAX_TENANT_BYTES or not LABEL_PATTERN.fullmatch(tenant):
            raise ConfigError(
                f"{where}: {entry!r} is not tenant:policy (a tenant label of [A-Za-z0-9._-])"
            )
        if tenant in policies:
            raise ConfigError(f"{where}: tenant {tenant!r} is named twice")
        policies[tenant] = parse_policy(written, f"{where}: tenant {tenant!r}")
    return policies


@dataclass(frozen=True, slots=True)
class TenantPolicies:
    """The default policy and the tenants that have their own."""

    default: Policy = OFF
    tenants: Mapping[str, Policy] = field(default_factory=dict)

    def for_tenant(self, tenant: str) -> Policy:
        return self.tenants.get(tenant, self.default)

    @property
    def any_redacting(self) -> bool:
        return self.default.redacting or any(p.redacting for p in self.tenants.values())
