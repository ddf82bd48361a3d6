"""deploy/k8s: every manifest parses and validates offline, and the pieces agree with each other
and with the code (ports, settings, topic, consumer group, probes)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator, ValidationError

from pipeline.settings import MetricsSettings, QaSettings, describe_settings
from pipeline.topics import load_topic_specs
from tests.conftest import REPO
from tests.unit.deploy.k8s_schemas import DEPLOYMENT, SCHEMAS

K8S = REPO / "deploy" / "k8s"
MANIFESTS = sorted(K8S.rglob("*.yaml"))
CONSUMER_GROUP = "streamscribe-asr"
SETTING_ENVS = {row.env for row in describe_settings()}

Manifest = dict[str, Any]


def _documents(path: Path) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _base() -> dict[str, Manifest]:
    """The base's objects by ``Kind/name``, in the order kustomization.yaml lists them."""
    kustomization = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    objects = {}
    for resource in kustomization["resources"]:
        for doc in _documents(K8S / "base" / resource):
            objects[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return objects


def _container(deployment: Manifest) -> Manifest:
    container: Manifest = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _json_patch(document: Manifest, operations: list[Manifest]) -> Manifest:
    """RFC 6902 add / remove / replace on object members (all that our overlays use)."""
    patched = copy.deepcopy(document)
    for operation in operations:
        *parents, leaf = [
            part.replace("~1", "/").replace("~0", "~") for part in operation["path"][1:].split("/")
        ]
        node = patched
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if operation["op"] == "remove":
            del node[leaf]
        elif operation["op"] == "replace":
            assert leaf in node, f"replace of a missing path {operation['path']}"
            node[leaf] = operation["value"]
        else:
            node[leaf] = operation["value"]
    return patched


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: str(path.relative_to(K8S)))
def test_every_manifest_validates_against_its_kind(path: Path) -> None:
    documents = _documents(path)
    assert documents
    for document in documents:
        key = (document.get("apiVersion"), document.get("kind"))
        assert key in SCHEMAS, f"{path.name}: no schema for {key}"
        Draft202012Validator(SCHEMAS[key]).validate(document)


def test_the_schemas_refuse_a_misspelt_field() -> None:
    deployment = copy.deepcopy(_base()["Deployment/streamscribe-worker"])
    _container(deployment)["readinessProbes"] = _container(deployment).pop("readinessProbe")
    with pytest.raises(ValidationError, match="readinessProbes"):
        Draft202012Validator(DEPLOYMENT).validate(deployment)


def test_every_kustomization_lists_existing_files_and_no_file_is_left_out() -> None:
    for kustomization_path in K8S.rglob("kustomization.yaml"):
        folder = kustomization_path.parent
        listed = yaml.safe_load(kustomization_path.read_text())["resources"]
        for resource in listed:
            assert (folder / resource).exists(), f"{kustomization_path}: {resource}"
        files = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
        assert files <= set(listed), f"{folder} has manifests kustomize never applies"


def test_worker_requests_a_gpu_and_probes_healthz_and_readyz_on_the_metrics_port() -> None:
    worker = _base()["Deployment/streamscribe-worker"]
    container = _container(worker)
    assert container["args"] == ["worker"]
    (port,) = container["ports"]
    assert port == {"name": "metrics", "containerPort": MetricsSettings().port, "protocol": "TCP"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["resources"]["requests"]["nvidia.com/gpu"] == 1
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 30
    # Holding a GPU, it must fail at start without CUDA rather than fall back to the CPU.
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["STREAMSCRIBE_DEVICE"] == "cuda"


def test_the_topics_are_created_by_a_job_with_the_workers_settings() -> None:
    # Without it a fresh cluster has no audio.chunks: workers never get ready and the QA app
    # exits at start.
    job = _base()["Job/streamscribe-topics"]
    container = _container(job)
    assert container["args"] == ["topics", "apply"]
    spec = job["spec"]
    assert spec["template"]["spec"]["restartPolicy"] == "OnFailure"  # until the brokers answer
    assert spec["backoffLimit"] >= 3
    assert spec["ttlSecondsAfterFinished"] > 0  # immutable: gone before the next apply


def test_mig_overlay_swaps_the_whole_gpu_for_a_slice() -> None:
    overlay = yaml.safe_load((K8S / "overlays/mig-1g.10gb/kustomization.yaml").read_text())
    assert overlay["resources"] == ["../../base"]
    (patch,) = overlay["patches"]
    assert patch["target"]["kind"] == "Deployment"
    worker = _base()[f"Deployment/{patch['target']['name']}"]
    patched = _json_patch(worker, yaml.safe_load(patch["patch"]))
    Draft202012Validator(DEPLOYMENT).validate(patched)
    resources = _container(patched)["resources"]
    for side in ("requests", "limits"):
        assert "nvidia.com/gpu" not in resources[side]
        assert resources[side]["nvidia.com/mig-1g.10gb"] == 1


def test_pdb_and_scaledobject_target_the_worker() -> None:
    objects = _base()
    worker = objects["Deployment/streamscribe-worker"]
    pod_labels = worker["spec"]["template"]["metadata"]["labels"]
    pdb = objects["PodDisruptionBudget/streamscribe-worker"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert worker["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()

    scaled = objects["ScaledObject/streamscribe-worker"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == "streamscribe-worker"
    (trigger,) = scaled["triggers"]
    assert trigger["metadata"]["consumerGroup"] == CONSUMER_GROUP
    assert trigger["metadata"]["topic"] == "audio.chunks"
    settings = objects["ConfigMap/streamscribe-settings"]["data"]
    assert trigger["metadata"]["bootstrapServers"] == settings["STREAMSCRIBE_KAFKA_BOOTSTRAP"]
    partitions = {spec.name: spec.partitions for spec in load_topic_specs()}["audio.chunks"]
    assert scaled["minReplicaCount"] >= 1
    assert scaled["maxReplicaCount"] <= partitions, "workers beyond the partitions sit idle"
    auth = objects[f"TriggerAuthentication/{trigger['authenticationRef']['name']}"]
    secret = objects["Secret/streamscribe-kafka"]["stringData"]
    for ref in auth["spec"]["secretTargetRef"]:
        assert ref["name"] == "streamscribe-kafka"
        assert ref["key"] in secret


def test_settings_are_known_variables_and_credentials_stay_in_the_secret() -> None:
    objects = _base()
    config = objects["ConfigMap/streamscribe-settings"]["data"]
    secret = objects["Secret/streamscribe-kafka"]["stringData"]
    for name in [*config, *(key for key in secret if key.startswith("STREAMSCRIBE_"))]:
        assert name in SETTING_ENVS or name.startswith("STREAMSCRIBE_LIBRDKAFKA_"), name
    assert not [name for name in config if "PASSWORD" in name or "USERNAME" in name]
    assert config["STREAMSCRIBE_METRICS_PORT"] == str(MetricsSettings().port)
    assert config["STREAMSCRIBE_QA_WEB_PORT"] == str(QaSettings().web_port)
    for deployment in (
        objects["Deployment/streamscribe-worker"],
        objects["Deployment/streamscribe-qa"],
        objects["Job/streamscribe-topics"],
    ):
        container = _container(deployment)
        assert container["envFrom"] == [{"configMapRef": {"name": "streamscribe-settings"}}]
        refs = [e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e]
        assert {ref["key"] for ref in refs} == {
            "STREAMSCRIBE_LIBRDKAFKA_SASL_USERNAME",
            "STREAMSCRIBE_LIBRDKAFKA_SASL_PASSWORD",
        }
        assert all(ref["name"] == "streamscribe-kafka" and ref["key"] in secret for ref in refs)


def test_qa_service_reaches_the_qa_pods() -> None:
    objects = _base()
    qa = objects["Deployment/streamscribe-qa"]
    service = objects["Service/streamscribe-qa"]["spec"]
    assert service["selector"].items() <= qa["spec"]["template"]["metadata"]["labels"].items()
    container = _container(qa)
    assert container["args"] == ["qa"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    port_names = {port["name"]: port["containerPort"] for port in container["ports"]}
    (port,) = service["ports"]
    assert port["targetPort"] in port_names
    assert port_names[port["targetPort"]] == QaSettings().web_port


def test_pod_monitors_give_the_job_names_the_alerts_select() -> None:
    monitors = _documents(K8S / "monitoring" / "podmonitors.yaml")
    base = _base()
    for monitor in monitors:
        app = monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
        pod = base[f"Deployment/{app}"]["spec"]["template"]
        assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == app
        ports = {port["name"] for port in pod["spec"]["containers"][0]["ports"]}
        assert {endpoint["port"] for endpoint in monitor["spec"]["podMetricsEndpoints"]} <= ports
    alerts = (REPO / "deploy/prometheus/rules/streamscribe-alerts.yml").read_text()
    for job in ("streamscribe-worker", "streamscribe-qa"):
        assert f'job="{job}"' in alerts


def test_built_in_kinds_validate_against_the_upstream_kubernetes_schemas() -> None:
    import kubernetes_validate

    checked = 0
    for path in MANIFESTS:
        for document in _documents(path):
            if "." in document["apiVersion"].split("/")[0]:
                continue  # CRDs (KEDA, Prometheus Operator) and kustomize: not in upstream
            kubernetes_validate.validate(document, "1.30.0", strict=True)
            checked += 1
    assert checked >= 7
