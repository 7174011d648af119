"""The Kubernetes manifests: both overlays (and their migrations) render offline with `kubectl
kustomize` and every document validates against the Kubernetes schemas (`kubernetes-validate`,
strict: unknown fields are errors); then what the schemas cannot know: probes, security
contexts, drain grace, secrets, environment names, autoscaling and disruption budgets."""

from __future__ import annotations

import copy
import re

import kubernetes_validate
import pytest

from notification.entrypoints.runtime import STOP_TIMEOUT_SECONDS
from scheduler.entrypoints.cli_serve import DEFAULT_GRACE_SECONDS
from tests.deploy.rendered import (
    OVERLAYS,
    RENDERINGS,
    config_maps,
    env_from_config_maps,
    env_names,
    named,
    of_kind,
    pod_specs,
    render,
    runbook_code,
    secret_env_names,
    secret_refs,
    service_of,
)

# The oldest Kubernetes we support (HPA autoscaling/v2, PDB policy/v1, job TTL are GA there)
# and the newest the validator ships.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
SENSITIVE_NAME = re.compile(r"KEY|SECRET|PASSWORD|TOKEN|CREDENTIAL|DATABASE_URL|SMTP_URL")
WORKLOADS = {"scheduler-api", "scheduler-worker", "notification"}


@pytest.mark.parametrize("path", RENDERINGS)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_rendered_document_validates(path: str, version: str) -> None:
    docs = render(path)
    assert docs
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_catches_a_misspelt_field() -> None:
    deployment = copy.deepcopy(named(render("overlays/production"), "Deployment", "scheduler-api"))
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
    probe["periodSecond"] = probe.pop("periodSeconds")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_holds_every_piece(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    assert {d["metadata"]["name"] for d in of_kind(docs, "Deployment")} == WORKLOADS
    assert {d["metadata"]["name"] for d in of_kind(docs, "PodDisruptionBudget")} == WORKLOADS
    assert {d["metadata"]["name"] for d in of_kind(docs, "Service")} == {
        "scheduler-api",
        "notification",
    }
    (hpa,) = of_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "scheduler-api",
    }
    # The HPA owns the API's replica count; a `replicas` in the Deployment would reset it.
    assert "replicas" not in named(docs, "Deployment", "scheduler-api")["spec"]
    migrations = render(f"overlays/{overlay}/migrate")
    assert {d["metadata"]["name"] for d in of_kind(migrations, "Job")} == {
        "scheduler-migrate",
        "notification-migrate",
    }
    # Every document lands in the overlay's namespace, migrations included.
    (namespace,) = of_kind(docs, "Namespace")
    ns = namespace["metadata"]["name"]
    for d in (*docs, *migrations):
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == ns, d["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_migrations_run_the_same_image_as_the_workloads(overlay: str) -> None:
    def images(path: str) -> set[str]:
        return {c["image"] for _, spec in pod_specs(render(path)) for c in spec["containers"]}

    workloads = images(f"overlays/{overlay}")
    assert len(workloads) == 1
    assert images(f"overlays/{overlay}/migrate") == workloads
    (image,) = workloads
    assert ":" in image.rsplit("/", 1)[-1]
    assert not image.endswith(":latest")


@pytest.mark.parametrize("path", RENDERINGS)
def test_every_container_runs_non_root_on_a_read_only_root(path: str) -> None:
    for workload, spec in pod_specs(render(path)):
        assert spec["automountServiceAccountToken"] is False
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True
        assert pod["runAsUser"] > 0
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in spec["containers"]:
            sc = c["securityContext"]
            where = f"{workload['metadata']['name']}/{c['name']}"
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert "/tmp" in {m["mountPath"] for m in c["volumeMounts"]}, where
            assert c["resources"]["requests"]["cpu"]
            assert c["resources"]["requests"]["memory"]
            assert c["resources"]["limits"]["memory"], where


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_and_scrape_annotations_point_at_the_served_port(overlay: str) -> None:
    for d in of_kind(render(f"overlays/{overlay}"), "Deployment"):
        template = d["spec"]["template"]
        (c,) = template["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        # The port the process serves is the one the probes and the scrape use.
        served = int(c["args"][c["args"].index("--port") + 1])
        assert ports == {"http": served}
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
        # /readyz waits up to 2 s for the database; the probe must wait longer than that.
        assert c["readinessProbe"]["timeoutSeconds"] > 2
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"
        assert int(annotations["prometheus.io/port"]) == served
        assert c["args"][c["args"].index("--host") + 1] == "0.0.0.0"


def _grace(args: list[str]) -> float:
    return float(args[args.index("--grace") + 1]) if "--grace" in args else DEFAULT_GRACE_SECONDS


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_termination_grace_covers_the_drain(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    # servicekit.runtime.worker.WorkerGroup.stop: the grace for in-flight attempts, then as long
    # again
    # (at least 1 s) for the final writes; then the clients close. A margin of 5 s on top.
    worker = named(docs, "Deployment", "scheduler-worker")["spec"]["template"]["spec"]
    grace = _grace(worker["containers"][0]["args"])
    assert grace >= 10, "in-flight attempts get a real chance to finish"
    assert worker["terminationGracePeriodSeconds"] >= grace + max(grace, 1) + 5
    # notification: preStop sleep, then its workers stop with STOP_TIMEOUT_SECONDS (+ flush).
    notification = named(docs, "Deployment", "notification")["spec"]["template"]["spec"]
    pre_stop = int(notification["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][1])
    assert notification["terminationGracePeriodSeconds"] >= (
        pre_stop + STOP_TIMEOUT_SECONDS + max(STOP_TIMEOUT_SECONDS, 1) + 5
    )
    api = named(docs, "Deployment", "scheduler-api")["spec"]["template"]["spec"]
    api_pre_stop = int(api["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][1])
    assert api["terminationGracePeriodSeconds"] > api_pre_stop + 10


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_disruption_budgets_and_services_select_their_pods(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    for name in WORKLOADS:
        labels = named(docs, "Deployment", name)["spec"]["template"]["metadata"]["labels"]
        pdb = named(docs, "PodDisruptionBudget", name)["spec"]
        assert pdb["selector"]["matchLabels"].items() <= labels.items()
        assert pdb["maxUnavailable"] == 1  # never blocks a drain with one replica (dev)
        others = [d for d in of_kind(docs, "Deployment") if d["metadata"]["name"] != name]
        for other in others:  # a budget counts only its own workload's pods
            other_labels = other["spec"]["template"]["metadata"]["labels"]
            assert not pdb["selector"]["matchLabels"].items() <= other_labels.items()
    for service in of_kind(docs, "Service"):
        deployment = named(docs, "Deployment", service["metadata"]["name"])
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        ports = {
            p["name"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
        }
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


@pytest.mark.parametrize("path", RENDERINGS)
def test_environment_names_exist_in_the_services_config(path: str) -> None:
    docs = render(path)
    for _, spec in pod_specs(docs):
        for c in spec["containers"]:
            service = service_of(c)
            names = set(env_from_config_maps(docs, c)) | {v["name"] for v in c.get("env", [])}
            unknown = names - env_names(service)
            assert not unknown, f"{c['name']} ({service}) sets variables nothing reads: {unknown}"


@pytest.mark.parametrize("path", RENDERINGS)
def test_no_credential_in_a_config_map_or_a_literal(path: str) -> None:
    docs = render(path)
    assert not of_kind(docs, "Secret"), "secrets are created beside the manifests, not in them"
    for name, data in config_maps(docs).items():
        for key, value in data.items():
            assert not SENSITIVE_NAME.search(key), f"{key} in ConfigMap {name} names a secret"
            assert not re.search(r"://[^/@\s]+:[^/@\s]+@", value), f"{key}: userinfo in a URL"
            assert "whsec_" not in value
    for _, spec in pod_specs(docs):
        for c in spec["containers"]:
            secret_names = secret_env_names(service_of(c))
            assert not set(env_from_config_maps(docs, c)) & secret_names
            for var in c.get("env", []):
                assert var["name"] not in secret_names or "secretKeyRef" in var.get(
                    "valueFrom", {}
                ), var["name"]


def _runbook_secrets() -> dict[str, set[str]]:
    """Secret name -> keys, from the runbook's `kubectl create secret generic` commands."""
    secrets: dict[str, set[str]] = {}
    for cmd in re.findall(r"kubectl[^\n]*?create secret generic [^\n]+", runbook_code()):
        name = re.search(r"create secret generic (\S+)", cmd)
        assert name
        keys = set(re.findall(r"--from-literal=([A-Z0-9_]+)=", cmd))
        secrets.setdefault(name.group(1), set()).update(keys)
    return secrets


@pytest.mark.parametrize("path", RENDERINGS)
def test_every_referenced_secret_is_created_in_the_runbook_with_known_keys(path: str) -> None:
    created = _runbook_secrets()
    for _, spec in pod_specs(render(path)):
        for c in spec["containers"]:
            service = service_of(c)
            for ref in c.get("envFrom", []):
                secret = ref.get("secretRef")
                if secret is None:
                    continue
                assert secret["name"] in created, f"the runbook never creates {secret['name']}"
                keys = created[secret["name"]]
                assert keys, secret["name"]
                assert keys <= env_names(service), f"{secret['name']}: {keys - env_names(service)}"
                # what the secret carries is secret; what it does not is not needed here
                assert keys <= secret_env_names(service), keys - secret_env_names(service)
    # The process refuses to start without its database URL and encryption key: both created.
    assert {"SCHEDULER_DATABASE_URL", "SCHEDULER_SECRET_KEY"} <= created["scheduler-secrets"]
    assert {"NOTIFICATION_DATABASE_URL", "NOTIFICATION_SECRET_KEY"} <= created[
        "notification-secrets"
    ]
    assert created["scheduler-migrate"] == {"SCHEDULER_DATABASE_URL"}
    assert created["notification-migrate"] == {"NOTIFICATION_DATABASE_URL"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_private_networks_are_never_allowed(overlay: str) -> None:
    docs = render(f"overlays/{overlay}")
    for _, spec in pod_specs(docs):
        for c in spec["containers"]:
            env = env_from_config_maps(docs, c)
            assert env.get("WEBHOOK_ALLOW_PRIVATE_NETWORKS", "false") == "false"
            assert "--dev" not in c["args"]
            assert secret_refs(c), "every pod gets its keys from a Secret"
