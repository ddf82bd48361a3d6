"""The redaction stage: what stands between the engine and everything that publishes.

One ``Redactor`` per process (worker, ``transcribe``, replay), fed every engine output in the
order the engine produced it:

- ``final(final)`` → the finals to publish now, redacted under the final's tenant's policy.
  Usually ``[final]``; ``[]`` while the final is **held**; the held final(s) and this one
  together when this one completes a number the held one began.
- ``advance(call_id, channel, settled_ms)`` → finals whose hold ran out: call it whenever a
  channel's audio has advanced, with ``settled_ms`` = the position before which no new
  utterance of that channel can start any more (``Session.settled_ms``).
- ``flush(call_id, channel)`` → whatever the channel holds, redacted on its own: at the end of
  its stream, when its session is closed. ``drop(call_id, channel)`` forgets it unpublished,
  when the stream is given up to be replayed (a revoked partition, a rewind).
- ``partial(partial)``, ``text(text, tenant)`` → partials and free text (a suppressed
  hypothesis, an event detail) masked.

**The hold.** A caller pauses in the middle of a card number, so its digits arrive in two
finals. A final whose tenant's policy redacts a digit entity and whose words end in an
unfinished digit run (``detectors.unfinished_run``) is held. The channel's next final joins it
when it starts at most ``hold_ms`` of audio after the held one ends; both (or a chain of up to
``MAX_HELD_FINALS``) are then redacted together and released, in utterance order. A next final
that starts later, a ``settled_ms`` past the held final's end plus ``hold_ms``, or a flush
releases the held final(s) redacted on their own.

**Determinism.** Whether two finals are redacted together depends only on their words and
audio positions, never on wall time or batching, so a replay, or a new owner after a takeover
that resumes before the held final, publishes the same redacted finals. For that the caller's
low watermark must cover a held final like an open utterance: ``held`` names the held finals
(``held_start_ms`` where the first starts); a held final must not be published, checkpointed
as finished (``finals_through``) or logged (it still holds the value).

The stage never logs, counts or stores a redacted value: what leaves it is the tags and the
redactions' entity types and audio spans.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pipeline.contracts.messages import EndpointReason, Final, Partial
from pipeline.redaction.apply import mask_partial, mask_text, redact_finals
from pipeline.redaction.detectors import unfinished_run
from pipeline.redaction.phones import PhoneJudge
from pipeline.redaction.policy import (
    Policy,
    TenantPolicies,
    parse_policy,
    parse_tenant_policies,
)

if TYPE_CHECKING:
    from pipeline.settings import RedactionSettings

__all__ = ["MAX_HELD_FINALS", "ChannelKey", "Redactor", "RedactorConfig"]

MAX_HELD_FINALS = 4
"""Longest chain of finals held together (a card number read in four groups of four with a
pause after each); a longer one is released."""

ChannelKey = tuple[str, str]
"""``(call_id, channel)``."""


@dataclasses.dataclass(frozen=True, slots=True)
class RedactorConfig:
    """Policies per tenant, the hold bound in audio ms, the phone numbers' default region."""

    policies: TenantPolicies = dataclasses.field(default_factory=TenantPolicies)
    hold_ms: int = 3000
    phone_region: str = "US"

    @classmethod
    def from_settings(cls, settings: RedactionSettings) -> RedactorConfig:
        """Raises ``ConfigError`` for a policy or tenant list that does not parse (named by
        its environment variable)."""
        from pipeline.settings import RedactionSettings, env_variable

        return cls(
            policies=TenantPolicies(
                default=parse_policy(settings.policy, env_variable(RedactionSettings, "policy")),
                tenants=parse_tenant_policies(
                    settings.tenant_policies, env_variable(RedactionSettings, "tenant_policies")
                ),
            ),
            hold_ms=settings.hold_ms,
            phone_region=settings.phone_region,
        )


class Redactor:
    """The redaction stage of one process (see the module docstring). Not thread-safe: one
    caller, the engine's outputs in order."""

    def __init__(self, config: RedactorConfig | None = None) -> None:
        self._config = config or RedactorConfig()
        self._phones = PhoneJudge(self._config.phone_region)
        self._held: dict[ChannelKey, tuple[Final, ...]] = {}

    @property
    def config(self) -> RedactorConfig:
        return self._config

    def policy_for(self, tenant: str) -> Policy:
        return self._config.policies.for_tenant(tenant)

    # -- finals ----------------------------------------------------------------------------

    def final(self, final: Final) -> list[Final]:
        """The finals to publish now, in utterance order (see the module docstring)."""
        policy = self.policy_for(final.tenant)
        key = (final.call_id, final.channel)
        released: list[Final] = []
        held = self._held.pop(key, ())
        if held and (
            final.start_ms - held[-1].end_ms > self._config.hold_ms or not policy.redacting
        ):
            released += redact_finals(held, self.policy_for(held[0].tenant), self._phones)
            held = ()
        chain = (*held, final)
        if policy.redacting and self._holds(chain, policy):
            self._held[key] = chain
            return released
        return [*released, *redact_finals(chain, policy, self._phones)]

    def _holds(self, chain: tuple[Final, ...], policy: Policy) -> bool:
        if self._config.hold_ms <= 0 or not policy.digits or len(chain) >= MAX_HELD_FINALS:
            return False
        if chain[-1].endpoint_reason is EndpointReason.END_OF_STREAM:
            return False  # nothing follows on this channel
        return unfinished_run([word.word for final in chain for word in final.words], self._phones)

    def advance(self, call_id: str, channel: str, settled_ms: int) -> list[Final]:
        """The channel's held finals, redacted on their own, once ``settled_ms`` (no utterance
        of the channel can start before it any more) is past the hold: the next final could
        no longer join them. Else ``[]``."""
        key = (call_id, channel)
        held = self._held.get(key)
        if held is None or settled_ms - held[-1].end_ms <= self._config.hold_ms:
            return []
        return self.flush(call_id, channel)

    def flush(self, call_id: str, channel: str) -> list[Final]:
        """Whatever the channel holds, redacted on its own (end of stream, session closed)."""
        held = self._held.pop((call_id, channel), ())
        if not held:
            return []
        return redact_finals(held, self.policy_for(held[0].tenant), self._phones)

    def drop(self, call_id: str, channel: str) -> None:
        """Forget what the channel holds, unpublished: its stream is given up (a partition
        revoked or lost, a rewind), and whoever replays it decodes the held finals again."""
        self._held.pop((call_id, channel), None)

    def flush_all(self) -> list[Final]:
        """Every channel's held finals (a shutdown), channel by channel."""
        released: list[Final] = []
        for call_id, channel in sorted(self._held):
            released += self.flush(call_id, channel)
        return released

    def held(self, call_id: str, channel: str) -> tuple[Final, ...]:
        """The channel's held finals, unredacted (never publish, log or store them)."""
        return self._held.get((call_id, channel), ())

    def held_start_ms(self, call_id: str, channel: str) -> int | None:
        """Where the channel's first held final starts (the low watermark must cover it), or
        None when nothing is held."""
        held = self._held.get((call_id, channel))
        return held[0].start_ms if held else None

    @property
    def holding(self) -> Mapping[ChannelKey, tuple[Final, ...]]:
        """Every channel holding finals (read-only use)."""
        return self._held

    # -- partials and free text ------------------------------------------------------------

    def partial(self, partial: Partial) -> Partial:
        """``partial`` masked under its tenant's policy (``apply.mask_partial``)."""
        return mask_partial(partial, self.policy_for(partial.tenant), self._phones)

    def text(self, text: str, tenant: str) -> str:
        """Free text masked under ``tenant``'s policy (``apply.mask_text``)."""
        return mask_text(text, self.policy_for(tenant), self._phones)
