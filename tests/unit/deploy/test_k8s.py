"""deploy/k8s: every manifest parses and validates offline, and the pieces agree with each other
and with the code (ports, settings, topic, consumer group, probes)."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator, ValidationError

from pipeline.settings import (
    IngressSettings,
    MetricsSettings,
    QaSettings,
    describe_settings,
    load_settings,
)
from pipeline.topics import load_topic_specs
from tests.conftest import REPO
from tests.unit.deploy.k8s_schemas import DEPLOYMENT, SCHEMAS
from tests.unit.deploy.kustomize import documents, kustomization, patch_files, render

K8S = REPO / "deploy" / "k8s"
PATCH_FILES = patch_files(K8S)
MANIFESTS = sorted(path for path in K8S.rglob("*.yaml") if path.resolve() not in PATCH_FILES)
KUSTOMIZATIONS = sorted(path.parent for path in K8S.rglob("kustomization.yaml"))
KAFKA_TLS = K8S / "components" / "kafka-tls"
CONSUMER_GROUP = "streamscribe-asr"
SETTING_ENVS = {row.env for row in describe_settings()}

Manifest = dict[str, Any]


def _base() -> dict[str, Manifest]:
    """The base's objects by ``Kind/name``, in the order kustomization.yaml lists them."""
    return render(K8S / "base")


def _with_components(folder: Path, resource: Path, *components: Path) -> dict[str, Manifest]:
    """What an overlay of ``resource`` listing ``components`` renders, written in ``folder``
    as an operator would write it."""
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(resource, folder)],
        "components": [os.path.relpath(component, folder) for component in components],
    }
    Draft202012Validator(SCHEMAS[(overlay["apiVersion"], overlay["kind"])]).validate(overlay)
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    return render(folder)


def _container(deployment: Manifest) -> Manifest:
    container: Manifest = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def _validate(document: Manifest) -> None:
    key = (document.get("apiVersion"), document.get("kind"))
    assert key in SCHEMAS, f"no schema for {key}"
    Draft202012Validator(SCHEMAS[key]).validate(document)


def _kafka_clients(objects: dict[str, Manifest]) -> set[str]:
    """The workloads that reach Kafka: those reading the settings ConfigMap."""
    settings = {"configMapRef": {"name": "streamscribe-settings"}}
    return {
        key
        for key, document in objects.items()
        if document["kind"] in ("Deployment", "Job")
        and settings in _container(document).get("envFrom", [])
    }


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: str(path.relative_to(K8S)))
def test_every_manifest_validates_against_its_kind(path: Path) -> None:
    found = documents(path)
    assert found
    for document in found:
        _validate(document)


@pytest.mark.parametrize("folder", KUSTOMIZATIONS, ids=lambda path: str(path.relative_to(K8S)))
def test_every_kustomization_renders_and_what_it_makes_validates(
    folder: Path, tmp_path: Path
) -> None:
    # Rendering checks every patch: JSON patch operations on places that exist, on a target
    # that exists. A component renders in an overlay of the base, as it is meant to be used.
    import kubernetes_validate

    if kustomization(folder)["kind"] == "Component":
        objects = _with_components(tmp_path, K8S / "base", folder)
    else:
        objects = render(folder)
    assert objects
    for document in objects.values():
        _validate(document)
        if "." not in document["apiVersion"].split("/")[0]:  # built-in kinds
            kubernetes_validate.validate(document, "1.30.0", strict=True)


def test_the_schemas_refuse_a_misspelt_field() -> None:
    deployment = copy.deepcopy(_base()["Deployment/streamscribe-worker"])
    _container(deployment)["readinessProbes"] = _container(deployment).pop("readinessProbe")
    with pytest.raises(ValidationError, match="readinessProbes"):
        Draft202012Validator(DEPLOYMENT).validate(deployment)


def test_every_kustomization_lists_existing_files_and_no_file_is_left_out() -> None:
    for folder in KUSTOMIZATIONS:
        spec = kustomization(folder)
        listed = [
            *spec.get("resources", []),
            *spec.get("components", []),
            *(patch["path"] for patch in spec.get("patches", []) if "path" in patch),
        ]
        for entry in listed:
            assert (folder / entry).exists(), f"{folder}: {entry}"
        files = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
        assert files <= set(listed), f"{folder} has files kustomize never reads"


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
    overlay = kustomization(K8S / "overlays/mig-1g.10gb")
    assert overlay["resources"] == ["../../base"]
    patched = render(K8S / "overlays/mig-1g.10gb")["Deployment/streamscribe-worker"]
    container = _container(patched)
    for side in ("requests", "limits"):
        assert "nvidia.com/gpu" not in container["resources"][side]
        assert container["resources"][side]["nvidia.com/mig-1g.10gb"] == 1
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["STREAMSCRIBE_TORCH_THREADS"] == container["resources"]["requests"]["cpu"]


def test_kafka_tls_gives_every_kafka_client_and_keda_the_same_ca(tmp_path: Path) -> None:
    base = _base()
    objects = _with_components(tmp_path, K8S / "base", KAFKA_TLS)
    clients = _kafka_clients(objects)
    assert clients == {
        "Deployment/streamscribe-worker",
        "Deployment/streamscribe-qa",
        "Deployment/streamscribe-ingress",
        "Job/streamscribe-topics",
    }
    scaled = objects["ScaledObject/streamscribe-worker"]["spec"]
    (trigger,) = scaled["triggers"]
    auth_key = f"TriggerAuthentication/{trigger['authenticationRef']['name']}"
    changed = {key for key, document in objects.items() if document != base.get(key)}
    assert changed == clients | {auth_key}, "the component touches only what reaches Kafka"

    refs = {ref["parameter"]: ref for ref in objects[auth_key]["spec"]["secretTargetRef"]}
    secret = objects["Secret/streamscribe-kafka"]["stringData"]
    assert secret[refs["tls"]["key"]] == "enable"
    ca_secret, ca_key = refs["ca"]["name"], refs["ca"]["key"]
    assert ca_secret != "streamscribe-kafka", "the CA is not a credential: a Secret of its own"
    settings = objects["ConfigMap/streamscribe-settings"]["data"]
    for key in sorted(clients):
        pod = objects[key]["spec"]["template"]["spec"]
        container = _container(objects[key])
        (volume,) = [
            v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == ca_secret
        ]
        (item,) = volume["secret"]["items"]
        assert item["key"] == ca_key, key
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
        assert mount["readOnly"] is True
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        client = load_settings(path="", env={**settings, **env}).kafka.client
        assert client["ssl.ca.location"] == f"{mount['mountPath']}/{item['path']}", key
        assert client["security.protocol"] in ("SSL", "SASL_SSL"), key


def test_kafka_tls_composes_with_the_mig_overlay(tmp_path: Path) -> None:
    # The MIG patch addresses the worker's env by index; the component appends after it.
    mig = render(K8S / "overlays/mig-1g.10gb")["Deployment/streamscribe-worker"]
    objects = _with_components(tmp_path, K8S / "overlays/mig-1g.10gb", KAFKA_TLS)
    env = _container(objects["Deployment/streamscribe-worker"])["env"]
    assert env[: len(_container(mig)["env"])] == _container(mig)["env"]
    assert env[-1]["name"] == "STREAMSCRIBE_LIBRDKAFKA_SSL_CA_LOCATION"


def test_the_kafka_tls_docs_create_the_secret_the_component_reads(tmp_path: Path) -> None:
    objects = _with_components(tmp_path, K8S / "base", KAFKA_TLS)
    refs = objects["TriggerAuthentication/streamscribe-kafka"]["spec"]["secretTargetRef"]
    (ca,) = [ref for ref in refs if ref["parameter"] == "ca"]
    command = f"create secret generic {ca['name']} --from-file={ca['key']}="
    assert command in (REPO / "docs" / "operations.md").read_text()
    assert command in (KAFKA_TLS / "kustomization.yaml").read_text()


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
    # Review finding: with one replica, a drain (PDB maxUnavailable 1) or a rollout (maxSurge 0)
    # stopped all transcription until a new pod had loaded the model.
    assert scaled["minReplicaCount"] > pdb["spec"]["maxUnavailable"]
    strategy = worker["spec"]["strategy"]["rollingUpdate"]
    assert scaled["minReplicaCount"] > strategy["maxUnavailable"] - strategy["maxSurge"]
    # Unready workers (all of them while Kafka is down) must not block every drain.
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert scaled["maxReplicaCount"] <= partitions, "workers beyond the partitions sit idle"
    # Review finding: one never-snapshotted session (hold music, denoise) pins its partition's
    # committed offset, and its lag alone scaled the workers to the maximum for the whole call.
    assert trigger["metadata"]["excludePersistentLag"] == "true"
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
    monitors = documents(K8S / "monitoring" / "podmonitors.yaml")
    base = _base()
    for monitor in monitors:
        app = monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
        pod = base[f"Deployment/{app}"]["spec"]["template"]
        assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == app
        ports = {port["name"] for port in pod["spec"]["containers"][0]["ports"]}
        assert {endpoint["port"] for endpoint in monitor["spec"]["podMetricsEndpoints"]} <= ports
    alerts = (REPO / "deploy/prometheus/rules/streamscribe-alerts.yml").read_text()
    for job in ("streamscribe-worker", "streamscribe-qa", "streamscribe-ingress"):
        assert f'job="{job}"' in alerts


def _env(container: Manifest) -> dict[str, Manifest]:
    return {e["name"]: e for e in container["env"]}


def test_ingress_serves_probes_on_its_port_and_takes_its_token_from_a_secret() -> None:
    objects = _base()
    ingress = objects["Deployment/streamscribe-ingress"]
    container = _container(ingress)
    assert container["args"] == ["ingress"]
    http, sip_udp, sip_tcp = container["ports"]
    assert http == {"name": "http", "containerPort": IngressSettings().port, "protocol": "TCP"}
    for port, protocol in ((sip_udp, "UDP"), (sip_tcp, "TCP")):
        assert port["containerPort"] == IngressSettings().sip_port
        assert port["protocol"] == protocol
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["envFrom"] == [{"configMapRef": {"name": "streamscribe-settings"}}]
    env = _env(container)
    token = env["STREAMSCRIBE_INGRESS_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
    secret = objects[f"Secret/{token['name']}"]["stringData"]
    assert token["name"] != "streamscribe-kafka", "not a Kafka credential: a Secret of its own"
    assert token["key"] in secret
    settings = objects["ConfigMap/streamscribe-settings"]["data"]
    assert "STREAMSCRIBE_INGRESS_AUTH_TOKEN" not in settings
    assert "STREAMSCRIBE_INGRESS_AUTH_DISABLED" not in settings
    # The code's default (loopback) would refuse every packet from a media server.
    assert settings["STREAMSCRIBE_INGRESS_ALLOWED_NETWORKS"] != IngressSettings().allowed_networks
    advertised = env["STREAMSCRIBE_INGRESS_ADVERTISED_HOST"]["valueFrom"]["fieldRef"]
    assert advertised == {"fieldPath": "status.podIP"}
    # One event loop: a whole core, as the benchmark measured it.
    assert container["resources"]["requests"]["cpu"] == "1"
    assert "cpu" not in container["resources"]["limits"]  # no throttling of a real-time loop
    # SIGTERM ends every call and waits for the deliveries (the producer's delivery timeout).
    grace_s = ingress["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace_s * 1000 > load_settings(path="", env=settings).publisher.delivery_timeout_ms


def test_ingress_service_pdb_and_monitor_reach_the_ingress_pods() -> None:
    objects = _base()
    ingress = objects["Deployment/streamscribe-ingress"]
    pod_labels = ingress["spec"]["template"]["metadata"]["labels"]
    service = objects["Service/streamscribe-ingress"]["spec"]
    assert service["selector"].items() <= pod_labels.items()
    http, sip_udp, sip_tcp = service["ports"]
    assert http["targetPort"] == "http"
    assert http["port"] == IngressSettings().port
    assert (sip_udp["targetPort"], sip_udp["protocol"]) == ("sip-udp", "UDP")
    assert (sip_tcp["targetPort"], sip_tcp["protocol"]) == ("sip-tcp", "TCP")
    assert sip_udp["port"] == sip_tcp["port"] == IngressSettings().sip_port
    pdb = objects["PodDisruptionBudget/streamscribe-ingress"]["spec"]
    assert pdb["selector"]["matchLabels"].items() <= pod_labels.items()
    assert ingress["spec"]["replicas"] > pdb["maxUnavailable"], "a drain leaves one gateway"
    assert pdb["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    strategy = ingress["spec"]["strategy"]["rollingUpdate"]
    assert strategy == {"maxSurge": 1, "maxUnavailable": 0}


def test_the_host_network_overlay_puts_rtp_on_the_node_one_gateway_per_node() -> None:
    overlay = kustomization(K8S / "overlays/ingress-host-network")
    assert overlay["resources"] == ["../../base"]
    base = _base()
    objects = render(K8S / "overlays/ingress-host-network")
    changed = {key for key, document in objects.items() if document != base[key]}
    assert changed == {"Deployment/streamscribe-ingress", "Service/streamscribe-ingress"}
    deployment = objects["Deployment/streamscribe-ingress"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"  # still resolves the Kafka service
    env = _env(_container(deployment))
    advertised = env["STREAMSCRIBE_INGRESS_ADVERTISED_HOST"]["valueFrom"]["fieldRef"]
    assert advertised == {"fieldPath": "status.hostIP"}
    assert env.keys() == _env(_container(base["Deployment/streamscribe-ingress"])).keys()
    # The node's ports: never two gateways on one node, so no surge pod during a rollout.
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert term["labelSelector"]["matchLabels"].items() <= labels.items()
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    service = objects["Service/streamscribe-ingress"]["spec"]
    assert service["type"] == "LoadBalancer"
    assert service["externalTrafficPolicy"] == "Local"


def test_built_in_kinds_validate_against_the_upstream_kubernetes_schemas() -> None:
    import kubernetes_validate

    checked = 0
    for path in MANIFESTS:
        for document in documents(path):
            if "." in document["apiVersion"].split("/")[0]:
                continue  # CRDs (KEDA, Prometheus Operator) and kustomize: not in upstream
            kubernetes_validate.validate(document, "1.30.0", strict=True)
            checked += 1
    assert checked >= 7
