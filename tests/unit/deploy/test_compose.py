"""deploy/compose.yaml and deploy/Dockerfile: structure, references, settings (no Docker here)."""

from __future__ import annotations

import argparse
import re
import subprocess
import tomllib
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from pipeline.cli import build_parser
from pipeline.settings import DEVICE_PATTERN, IngressSettings, MetricsSettings, describe_settings
from tests.conftest import REPO

DEPLOY = REPO / "deploy"
# Subcommands the compose file runs that other issues are still adding to the CLI.
PLANNED_SUBCOMMANDS = {"worker"}

STRINGS = {"type": "array", "items": {"type": "string"}}
SERVICE_SCHEMA = {
    "type": "object",
    "anyOf": [{"required": ["image"]}, {"required": ["build"]}],
    "additionalProperties": False,
    "properties": {
        "image": {"type": "string", "pattern": r"^[a-z0-9./_-]+:[A-Za-z0-9._-]+$"},
        "build": {
            "type": "object",
            "required": ["context", "dockerfile"],
            "additionalProperties": False,
            "properties": {"context": {"type": "string"}, "dockerfile": {"type": "string"}},
        },
        "command": STRINGS,
        "environment": {"type": "object", "additionalProperties": {"type": "string"}},
        "depends_on": {
            "oneOf": [
                STRINGS,
                {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "required": ["condition"],
                        "properties": {
                            "condition": {
                                "enum": [
                                    "service_started",
                                    "service_healthy",
                                    "service_completed_successfully",
                                ]
                            }
                        },
                    },
                },
            ]
        },
        "healthcheck": {
            "type": "object",
            "required": ["test"],
            "additionalProperties": False,
            "properties": {
                "test": STRINGS,
                "interval": {"type": "string"},
                "timeout": {"type": "string"},
                "retries": {"type": "integer"},
                "start_period": {"type": "string"},
            },
        },
        "ports": {
            "type": "array",
            "items": {"type": "string", "pattern": r"^\d+(-\d+)?:\d+(-\d+)?(/udp)?$"},
        },
        "volumes": {"type": "array", "items": {"type": "string"}},
        "networks": {"type": "object"},
        "deploy": {"type": "object"},
        "profiles": STRINGS,
        "restart": {"enum": ["no", "always", "on-failure", "unless-stopped"]},
        "stop_grace_period": {"type": "string"},
    },
}
COMPOSE_SCHEMA = {
    "type": "object",
    "required": ["name", "services"],
    "propertyNames": {"pattern": r"^(name|services|volumes|x-.+)$"},
    "properties": {
        "name": {"type": "string"},
        "services": {"type": "object", "additionalProperties": SERVICE_SCHEMA},
        "volumes": {"type": "object"},
    },
}


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _compose()["services"]
    return services


def _merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """What Compose makes of ``base`` under an override file, for what ours use: mappings
    merge key by key, the override's other values replace the base's."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = _merged(base[key], value)
        else:
            merged[key] = value
    return merged


def _subcommands() -> set[str]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(action.choices)


def test_compose_file_matches_its_schema() -> None:
    Draft202012Validator(COMPOSE_SCHEMA).validate(_compose())


def test_compose_runs_the_whole_system() -> None:
    services = _services()
    assert {"kafka", "redis", "topics", "worker", "qa", "ingress", "prometheus", "grafana"} <= set(
        services
    )
    assert services["kafka"]["image"].startswith("apache/kafka:4.")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"


def test_dependencies_name_existing_services_and_volumes_exist() -> None:
    compose = _compose()
    services = compose["services"]
    named_volumes = set(compose.get("volumes", {}))
    for name, service in services.items():
        assert set(service.get("depends_on", [])) <= set(services), name
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source}"
            else:
                assert source in named_volumes, f"{name}: {source}"
        build = service.get("build")
        if build:
            assert (DEPLOY / build["context"] / build["dockerfile"]).is_file()


def test_streamscribe_services_use_known_settings_and_subcommands() -> None:
    known_envs = {row.env for row in describe_settings()}
    subcommands = _subcommands() | PLANNED_SUBCOMMANDS
    ours = {n: s for n, s in _services().items() if s["image"].startswith("streamscribe:")}
    assert {"topics", "worker", "qa", "ingress"} <= set(ours)
    for name, service in ours.items():
        assert service["command"][0] in subcommands, name
        for env in service["environment"]:
            assert env in known_envs or env.startswith("STREAMSCRIBE_LIBRDKAFKA_"), env
        assert service["environment"]["STREAMSCRIBE_KAFKA_BOOTSTRAP"] == "kafka:9092"


def test_workers_report_readiness_and_are_scraped() -> None:
    services = _services()
    port = services["worker"]["environment"]["STREAMSCRIBE_METRICS_PORT"]
    assert port == str(MetricsSettings().port)
    assert f"127.0.0.1:{port}/readyz" in " ".join(services["worker"]["healthcheck"]["test"])
    qa_port = services["qa"]["environment"]["STREAMSCRIBE_QA_WEB_PORT"]
    assert f"127.0.0.1:{qa_port}/readyz" in " ".join(services["qa"]["healthcheck"]["test"])
    aliases = services["worker"]["networks"]["default"]["aliases"]
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    (dns,) = jobs["streamscribe-worker"]["dns_sd_configs"]
    assert dns["names"] == aliases
    assert dns["port"] == int(port)
    qa_target = jobs["streamscribe-qa"]["static_configs"][0]["targets"][0]
    assert qa_target == f"qa:{services['qa']['environment']['STREAMSCRIBE_QA_WEB_PORT']}"


def test_one_service_makes_up_the_consumer_group_on_one_named_device() -> None:
    # CUDA decodes float16, the CPU float32: two worker services in one group would decode a
    # call at either precision, depending on who owns its partition, switching at a rebalance.
    services = _services()
    assert [name for name, s in services.items() if s.get("command") == ["worker"]] == ["worker"]
    device = services["worker"]["environment"]["STREAMSCRIBE_DEVICE"]
    assert device == "cpu"  # not auto: a container that happens to see a GPU would use it


def test_the_gpu_file_moves_every_worker_to_the_gpu() -> None:
    override = yaml.safe_load((DEPLOY / "compose.gpu.yaml").read_text())
    assert set(override) == {"services"}
    assert set(override["services"]) == {"worker"}, "it changes the workers and adds none"
    cpu = _services()["worker"]
    gpu = _merged(cpu, override["services"]["worker"])
    Draft202012Validator(SERVICE_SCHEMA).validate(gpu)
    assert gpu["environment"] == {
        **cpu["environment"],
        "STREAMSCRIBE_DEVICE": "cuda",
        "STREAMSCRIBE_LATENCY_OBJECTIVE_MS": "400",  # the CPU workers' 1500 is no GPU's
    }
    assert re.fullmatch(DEVICE_PATTERN, gpu["environment"]["STREAMSCRIBE_DEVICE"])
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["capabilities"] == ["gpu"]
    assert gpu["networks"] == cpu["networks"]  # still scraped


def test_monitoring_mounts_match_their_configs() -> None:
    services = _services()
    assert "./prometheus:/etc/prometheus:ro" in services["prometheus"]["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]
    grafana_mounts = services["grafana"]["volumes"]
    assert "./grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana_mounts
    assert "./grafana/provisioning:/etc/grafana/provisioning:ro" in grafana_mounts


def test_dockerfile_copies_what_exists_and_runs_streamscribe() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    for source in re.findall(r"^COPY (.+?) \S+$", dockerfile, re.MULTILINE):
        for path in source.split():
            assert (REPO / path).exists(), path
    assert 'ENTRYPOINT ["streamscribe"]' in dockerfile
    assert re.search(r"^USER \d+$", dockerfile, re.MULTILINE)
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    for path in ("pipeline", "topics", "schemas", "pyproject.toml", "constraints.txt"):
        assert any(line.lstrip("!").startswith(path) for line in ignore if line.startswith("!"))
    # The versions the tests passed with, as `make setup` installs them.
    install = re.search(r'^RUN pip install -c constraints\.txt -e ("[^"]+")', dockerfile, re.M)
    assert install


@pytest.mark.parametrize(("extras", "target"), [("", "."), ("denoise", ".[denoise]")])
def test_the_image_s_extras_build_argument_names_what_pip_installs(
    extras: str, target: str
) -> None:
    # The RUN line goes through /bin/sh: expand its argument there, as the build would.
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r'^ARG EXTRAS=""$', dockerfile, re.MULTILINE)
    install = re.search(r'^RUN pip install -c constraints\.txt -e ("[^"]+")', dockerfile, re.M)
    assert install
    shown = subprocess.run(
        ["sh", "-c", f"printf %s {install[1]}"],
        env={"EXTRAS": extras},
        capture_output=True,
        text=True,
        check=True,
    )
    assert shown.stdout == target
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert set(filter(None, extras.split(","))) <= set(declared["project"]["optional-dependencies"])


def test_the_ingress_publishes_its_rtp_range_is_ready_checked_and_scraped() -> None:
    ingress = _services()["ingress"]
    env = ingress["environment"]
    port = IngressSettings().port
    assert f"{port}:{port}" in ingress["ports"]
    sip = IngressSettings().sip_port
    assert {f"{sip}:{sip}", f"{sip}:{sip}/udp"} <= set(ingress["ports"])  # SIP on TCP and UDP
    low, high = (
        int(env["STREAMSCRIBE_INGRESS_RTP_PORT_MIN"]),
        int(env["STREAMSCRIBE_INGRESS_RTP_PORT_MAX"]),
    )
    assert f"{low}-{high}:{low}-{high}/udp" in ingress["ports"]
    # Two channels a call: the range bounds the calls, and the call limit says so first.
    assert int(env["STREAMSCRIBE_INGRESS_MAX_CALLS"]) * 2 <= high - low + 1
    assert f"127.0.0.1:{port}/readyz" in " ".join(ingress["healthcheck"]["test"])
    assert env["STREAMSCRIBE_INGRESS_AUTH_TOKEN"].startswith("${STREAMSCRIBE_INGRESS_AUTH_TOKEN")
    assert "STREAMSCRIBE_INGRESS_AUTH_DISABLED" not in env
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    assert jobs["streamscribe-ingress"]["static_configs"][0]["targets"] == [f"ingress:{port}"]
