"""The QA app's Kafka connection from the shared settings: broker URLs and credentials for faust.

The ASR workers pass ``kafka.client`` to librdkafka as it is; the QA app's client (aiokafka,
through faust) understands only the security keys below.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

import faust

from pipeline.errors import ConfigError
from pipeline.settings import KafkaSettings

__all__ = ["CREDENTIAL_KEYS", "broker_urls", "faust_credentials"]

_SASL_MECHANISMS = {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
CREDENTIAL_KEYS = {
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "ssl.ca.location",
}


def faust_credentials(client: Mapping[str, str]) -> faust.types.auth.CredentialsT | None:
    """faust credentials from the librdkafka pass-through settings (``kafka.client``).

    Understood: ``security.protocol`` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL),
    ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256/512), ``sasl.username``, ``sasl.password``,
    ``ssl.ca.location``. Other librdkafka keys tune the ASR workers' clients and are ignored here.

    Raises:
        ConfigError: a protocol or mechanism the QA app's Kafka client cannot use.
    """
    protocol = client.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}:
        raise ConfigError(f"kafka.client security.protocol {protocol!r} is not supported")
    context = None
    if protocol in {"SSL", "SASL_SSL"}:
        cafile = client.get("ssl.ca.location") or None
        try:
            context = ssl.create_default_context(cafile=cafile)
        except (OSError, ssl.SSLError) as error:
            raise ConfigError(f"kafka.client ssl.ca.location {cafile!r}: {error}") from None
    if protocol == "SSL":
        return faust.SSLCredentials(context)
    if protocol == "PLAINTEXT":
        return None
    mechanism = client.get("sasl.mechanism", client.get("sasl.mechanisms", "PLAIN")).upper()
    if mechanism not in _SASL_MECHANISMS:
        raise ConfigError(f"kafka.client sasl.mechanism {mechanism!r} is not supported")
    return faust.SASLCredentials(
        username=client.get("sasl.username"),
        password=client.get("sasl.password"),
        mechanism=mechanism,
        ssl_context=context,
    )


def broker_urls(kafka: KafkaSettings) -> list[str]:
    return [f"kafka://{server.strip()}" for server in kafka.bootstrap_servers.split(",")]
