"""JSON Schemas of the Kubernetes kinds deploy/k8s uses, written for offline validation.

They check what a typo or a missing field would break (required fields, types, enums) and refuse
unknown keys where a misspelt one would be silently ignored by the API server or an operator
(containers, probes, resources, KEDA triggers). They cover only the fields we use; when the
kubernetes-validate package is installed, built-in kinds are also checked against the full
upstream schemas (test_k8s.py).
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

STRING: Schema = {"type": "string"}
NAME: Schema = {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
INT_OR_STRING: Schema = {"type": ["integer", "string"]}
QUANTITY: Schema = {"type": ["string", "integer"], "pattern": r"^[0-9.]+(m|Ki|Mi|Gi|Ti|k|M|G)?$"}
STRING_MAP: Schema = {"type": "object", "additionalProperties": STRING}
LABEL_SELECTOR: Schema = {
    "type": "object",
    "required": ["matchLabels"],
    "additionalProperties": False,
    "properties": {"matchLabels": {**STRING_MAP, "minProperties": 1}},
}


def strict(required: list[str], **properties: Schema) -> Schema:
    """An object with exactly these properties (unknown keys refused)."""
    return {
        "type": "object",
        "required": required,
        "additionalProperties": False,
        "properties": properties,
    }


METADATA = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": NAME,
        "namespace": NAME,
        "labels": STRING_MAP,
        "annotations": STRING_MAP,
    },
}


def kind(api_version: str, kind_name: str, **properties: Schema) -> Schema:
    required = ["apiVersion", "kind", "metadata", *properties]
    return strict(
        required,
        apiVersion={"const": api_version},
        kind={"const": kind_name},
        metadata=METADATA,
        **properties,
    )


PROBE = strict(
    [],
    httpGet=strict(["path", "port"], path=STRING, port=INT_OR_STRING, scheme=STRING),
    tcpSocket=strict(["port"], port=INT_OR_STRING),
    initialDelaySeconds={"type": "integer", "minimum": 0},
    periodSeconds={"type": "integer", "minimum": 1},
    timeoutSeconds={"type": "integer", "minimum": 1},
    failureThreshold={"type": "integer", "minimum": 1},
    successThreshold={"type": "integer", "minimum": 1},
)
PROBE["oneOf"] = [{"required": ["httpGet"]}, {"required": ["tcpSocket"]}]

ENV_VAR = strict(
    ["name"],
    name={"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
    value=STRING,
    valueFrom=strict(
        [],
        secretKeyRef=strict(["name", "key"], name=NAME, key=STRING),
        configMapKeyRef=strict(["name", "key"], name=NAME, key=STRING),
        fieldRef=strict(["fieldPath"], fieldPath=STRING),
    ),
)
RESOURCE_LIST: Schema = {
    "type": "object",
    "propertyNames": {"pattern": r"^(cpu|memory|ephemeral-storage|nvidia\.com/[a-z0-9.-]+)$"},
    "additionalProperties": QUANTITY,
}
CONTAINER = strict(
    ["name", "image"],
    name=NAME,
    image=STRING,
    args={"type": "array", "items": STRING},
    command={"type": "array", "items": STRING},
    ports={
        "type": "array",
        "items": strict(
            ["containerPort"],
            name={"type": "string", "maxLength": 15},
            containerPort={"type": "integer", "minimum": 1, "maximum": 65535},
            protocol={"enum": ["TCP", "UDP", "SCTP"]},
        ),
    },
    env={"type": "array", "items": ENV_VAR},
    envFrom={
        "type": "array",
        "items": strict(
            [],
            configMapRef=strict(["name"], name=NAME),
            secretRef=strict(["name"], name=NAME),
        ),
    },
    resources=strict([], requests=RESOURCE_LIST, limits=RESOURCE_LIST),
    livenessProbe=PROBE,
    readinessProbe=PROBE,
    startupProbe=PROBE,
    securityContext=strict(
        [],
        allowPrivilegeEscalation={"type": "boolean"},
        readOnlyRootFilesystem={"type": "boolean"},
        runAsNonRoot={"type": "boolean"},
        capabilities=strict([], drop={"type": "array", "items": STRING}),
    ),
    volumeMounts={
        "type": "array",
        "items": strict(
            ["name", "mountPath"], name=NAME, mountPath=STRING, readOnly={"type": "boolean"}
        ),
    },
)
POD_SPEC = strict(
    ["containers"],
    containers={"type": "array", "minItems": 1, "items": CONTAINER},
    terminationGracePeriodSeconds={"type": "integer", "minimum": 0},
    restartPolicy={"enum": ["Always", "OnFailure", "Never"]},
    securityContext={"type": "object"},
    tolerations={"type": "array", "items": {"type": "object"}},
    nodeSelector=STRING_MAP,
    hostNetwork={"type": "boolean"},
    dnsPolicy={"enum": ["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"]},
    affinity={"type": "object"},
    volumes={
        "type": "array",
        "items": strict(
            ["name"],
            name=NAME,
            emptyDir={"type": "object"},
            configMap=strict(["name"], name=NAME),
            secret=strict(
                ["secretName"],
                secretName=NAME,
                items={
                    "type": "array",
                    "minItems": 1,
                    "items": strict(["key", "path"], key=STRING, path=STRING),
                },
            ),
        ),
    },
)

DEPLOYMENT = kind(
    "apps/v1",
    "Deployment",
    spec=strict(
        ["selector", "template"],
        replicas={"type": "integer", "minimum": 0},
        revisionHistoryLimit={"type": "integer", "minimum": 0},
        selector=LABEL_SELECTOR,
        strategy=strict(
            ["type"],
            type={"enum": ["RollingUpdate", "Recreate"]},
            rollingUpdate=strict([], maxSurge=INT_OR_STRING, maxUnavailable=INT_OR_STRING),
        ),
        template=strict(
            ["metadata", "spec"],
            metadata=strict(["labels"], labels=STRING_MAP, annotations=STRING_MAP),
            spec=POD_SPEC,
        ),
    ),
)
JOB = kind(
    "batch/v1",
    "Job",
    spec=strict(
        ["template"],
        backoffLimit={"type": "integer", "minimum": 0},
        ttlSecondsAfterFinished={"type": "integer", "minimum": 0},
        template=strict(
            ["spec"],
            metadata=strict(["labels"], labels=STRING_MAP, annotations=STRING_MAP),
            spec={
                **POD_SPEC,
                "required": ["containers", "restartPolicy"],
                "properties": {
                    **POD_SPEC["properties"],
                    "restartPolicy": {"enum": ["OnFailure", "Never"]},
                },
            },
        ),
    ),
)
POD_DISRUPTION_BUDGET = kind(
    "policy/v1",
    "PodDisruptionBudget",
    spec={
        **strict(
            ["selector"],
            selector=LABEL_SELECTOR,
            minAvailable=INT_OR_STRING,
            maxUnavailable=INT_OR_STRING,
            unhealthyPodEvictionPolicy={"enum": ["IfHealthyBudget", "AlwaysAllow"]},
        ),
        "oneOf": [{"required": ["minAvailable"]}, {"required": ["maxUnavailable"]}],
    },
)
SERVICE = kind(
    "v1",
    "Service",
    spec=strict(
        ["selector", "ports"],
        type={"enum": ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]},
        externalTrafficPolicy={"enum": ["Cluster", "Local"]},
        selector=STRING_MAP,
        ports={
            "type": "array",
            "minItems": 1,
            "items": strict(
                ["port"],
                name=NAME,
                port={"type": "integer", "minimum": 1, "maximum": 65535},
                targetPort=INT_OR_STRING,
                protocol={"enum": ["TCP", "UDP", "SCTP"]},
            ),
        },
    ),
)
NAMESPACE = kind("v1", "Namespace")
CONFIG_MAP = kind("v1", "ConfigMap", data=STRING_MAP)
SECRET = kind("v1", "Secret", type=STRING, stringData=STRING_MAP)

KAFKA_TRIGGER = strict(
    ["type", "metadata"],
    type={"const": "kafka"},
    metadata=strict(
        ["bootstrapServers", "consumerGroup", "topic", "lagThreshold"],
        bootstrapServers=STRING,
        consumerGroup=STRING,
        topic=STRING,
        lagThreshold={"type": "string", "pattern": r"^[0-9]+$"},
        activationLagThreshold={"type": "string", "pattern": r"^[0-9]+$"},
        offsetResetPolicy={"enum": ["earliest", "latest"]},
        allowIdleConsumers={"enum": ["true", "false"]},
        limitToPartitionsWithLag={"enum": ["true", "false"]},
        excludePersistentLag={"enum": ["true", "false"]},
    ),
    authenticationRef=strict(["name"], name=NAME),
)
SCALED_OBJECT = kind(
    "keda.sh/v1alpha1",
    "ScaledObject",
    spec=strict(
        ["scaleTargetRef", "triggers"],
        scaleTargetRef=strict(["name"], name=NAME, kind={"const": "Deployment"}),
        minReplicaCount={"type": "integer", "minimum": 0},
        maxReplicaCount={"type": "integer", "minimum": 1},
        pollingInterval={"type": "integer", "minimum": 1},
        cooldownPeriod={"type": "integer", "minimum": 0},
        advanced=strict(
            [],
            horizontalPodAutoscalerConfig=strict(
                [],
                behavior=strict([], scaleUp={"type": "object"}, scaleDown={"type": "object"}),
            ),
        ),
        triggers={"type": "array", "minItems": 1, "items": KAFKA_TRIGGER},
    ),
)
TRIGGER_AUTHENTICATION = kind(
    "keda.sh/v1alpha1",
    "TriggerAuthentication",
    spec=strict(
        ["secretTargetRef"],
        secretTargetRef={
            "type": "array",
            "items": strict(
                ["parameter", "name", "key"],
                parameter={"enum": ["sasl", "tls", "username", "password", "ca", "cert", "key"]},
                name=NAME,
                key=STRING,
            ),
        },
    ),
)
POD_MONITOR = kind(
    "monitoring.coreos.com/v1",
    "PodMonitor",
    spec=strict(
        ["selector", "podMetricsEndpoints"],
        jobLabel=STRING,
        selector=LABEL_SELECTOR,
        podMetricsEndpoints={
            "type": "array",
            "minItems": 1,
            "items": strict(["port"], port=STRING, path=STRING, interval=STRING),
        },
    ),
)
JSON_PATCH_OP = strict(
    ["op", "path"],
    op={"enum": ["add", "remove", "replace"]},
    path={"type": "string", "pattern": "^/"},
    value={},
)
JSON_PATCH_OP["if"] = {"properties": {"op": {"enum": ["add", "replace"]}}}
JSON_PATCH_OP["then"] = {"required": ["value"]}
PATCHES = {
    "type": "array",
    "items": {
        # Inline (patch) or in a file of the folder (path), never both.
        **strict(
            ["target"],
            target=strict(["kind", "name"], group=STRING, version=STRING, kind=STRING, name=NAME),
            patch=STRING,
            path={"type": "string", "pattern": r"^[a-z0-9-]+\.yaml$"},
        ),
        "oneOf": [{"required": ["patch"]}, {"required": ["path"]}],
    },
}
PATHS: Schema = {"type": "array", "minItems": 1, "items": STRING}
KUSTOMIZATION = strict(
    ["apiVersion", "kind", "resources"],
    apiVersion={"const": "kustomize.config.k8s.io/v1beta1"},
    kind={"const": "Kustomization"},
    namespace=NAME,
    resources=PATHS,
    components=PATHS,
    labels={"type": "array", "items": {"type": "object"}},
    images={
        "type": "array",
        "items": strict(["name"], name=STRING, newName=STRING, newTag=STRING),
    },
    patches=PATCHES,
)
# A kustomize component: resources and patches an overlay opts into with `components:`.
COMPONENT = strict(
    ["apiVersion", "kind"],
    apiVersion={"const": "kustomize.config.k8s.io/v1alpha1"},
    kind={"const": "Component"},
    resources=PATHS,
    patches=PATCHES,
)

SCHEMAS: dict[tuple[str, str], Schema] = {
    ("v1", "Namespace"): NAMESPACE,
    ("v1", "ConfigMap"): CONFIG_MAP,
    ("v1", "Secret"): SECRET,
    ("v1", "Service"): SERVICE,
    ("apps/v1", "Deployment"): DEPLOYMENT,
    ("batch/v1", "Job"): JOB,
    ("policy/v1", "PodDisruptionBudget"): POD_DISRUPTION_BUDGET,
    ("keda.sh/v1alpha1", "ScaledObject"): SCALED_OBJECT,
    ("keda.sh/v1alpha1", "TriggerAuthentication"): TRIGGER_AUTHENTICATION,
    ("monitoring.coreos.com/v1", "PodMonitor"): POD_MONITOR,
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"): KUSTOMIZATION,
    ("kustomize.config.k8s.io/v1alpha1", "Component"): COMPONENT,
}
