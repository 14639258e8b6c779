"""deploy/helm/fleet: rendered by a real helm, applied to a real kube-apiserver (dry run)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.manifests import convert
from tests.databases import in_ci
from tests.kube.controlplane import Admin, ApiError, ControlPlane

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "fleet"
CRD = ROOT / "tests" / "data" / "deploy" / "servicemonitor-crd.yaml"
NAMESPACE = "fleet-system"
PLURALS = {
    "ServiceAccount": "serviceaccounts",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "Service": "services",
    "Deployment": "deployments",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "ServiceMonitor": "servicemonitors",
}
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: east, cluster: {server: "https://east.example:6443"}}]
users: [{name: fleet, user: {token: not-a-real-token}}]
contexts: [{name: east, context: {cluster: east, user: fleet}}]
current-context: east
"""
CUSTOM = {
    "image": {"repository": "registry.example/fleet", "tag": "1.2.3"},
    "fleet": {
        "otlpEndpoint": "http://otel-collector.observability:4318",
        "quotaCutGrace": "10m",
        "logFormat": "text",
    },
    "database": {"existingSecret": "fleet-db"},
    "memberKubeconfigs": {"east.yaml": KUBECONFIG},
    "hubKubeconfig": KUBECONFIG,
    "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
    "podDisruptionBudget": {"maxUnavailable": 0},
    "service": {"type": "NodePort"},
}


@pytest.fixture(scope="module")
def helm() -> Path:
    found = os.environ.get("FLEET_HELM")
    if not found:
        done = subprocess.run(
            [str(ROOT / "scripts" / "helm-binary"), "--path"], capture_output=True, text=True
        )
        found = done.stdout.strip() if done.returncode == 0 else ""
    if not found:
        message = "helm is not built: run scripts/helm-binary (make test does), or set FLEET_HELM"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return Path(found)


def render(helm: Path, tmp_path: Path, values: dict[str, Any] | None = None) -> list[Any]:
    argv = [str(helm), "template", "fleet", str(CHART), "--namespace", NAMESPACE]
    if values is not None:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        argv += ["--values", str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def by_kind(documents: list[Any]) -> dict[str, Any]:
    kinds: dict[str, Any] = {}
    for d in documents:
        assert d["kind"] not in kinds, d["kind"]
        kinds[d["kind"]] = d
    return kinds


def test_the_defaults_render_two_hardened_replicas_on_postgresql(
    helm: Path, tmp_path: Path
) -> None:
    kinds = by_kind(render(helm, tmp_path))
    assert set(kinds) == {
        "ServiceAccount",
        "ConfigMap",
        "Secret",
        "Service",
        "Deployment",
        "PodDisruptionBudget",
    }
    deployment = kinds["Deployment"]
    # Two replicas elect the scheduler's leader; pods roll one by one.
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["resources"]["limits"]["memory"] == "1Gi"
    env = {e["name"]: e for e in container["env"]}
    assert env["FLEET_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "database-url"
    assert "FLEET_OTLP_ENDPOINT" not in env
    assert env["FLEET_TOKENS_FILE"]["value"] == "/etc/fleet/tokens/tokens.yaml"
    # Followers forward to the leader at its pod's address.
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["FLEET_ADVERTISE_URL"]["value"] == "http://$(POD_IP):8080"
    # ... with the caller's identity signed with a secret the replicas share (generated).
    replica = env["FLEET_REPLICA_SECRET"]["valueFrom"]["secretKeyRef"]
    assert replica == {"name": kinds["Secret"]["metadata"]["name"], "key": "replica-secret"}
    assert len(kinds["Secret"]["stringData"]["replica-secret"]) >= 32
    assert env["FLEET_LEADER_LEASE_SECONDS"]["value"] == "15"
    assert env["FLEET_LEADER_RENEW_SECONDS"]["value"] == "5"
    assert env["FLEET_KUBECONFIG_DIR"]["value"] == "/etc/fleet/kubeconfigs"
    assert env["FLEET_ALLOW_KUBECONFIG_EXEC"]["value"] == "false"
    assert "FLEET_HUB_KUBECONFIG" not in env  # no hub unless one is given
    # The shipped seed configuration is what fleet serve accepts.
    config = kinds["ConfigMap"]["data"]
    assert [c.name for c in convert.load_clusters(config["clusters.yaml"])] == ["sim"]
    tree, warnings = convert.load_quota(config["quota.yaml"])
    assert tree.leaves() and not warnings
    assert "database-url" in kinds["Secret"]["stringData"]


def test_non_default_values_render_what_they_say(helm: Path, tmp_path: Path) -> None:
    kinds = by_kind(render(helm, tmp_path, CUSTOM))
    assert "ServiceMonitor" in kinds
    monitor = kinds["ServiceMonitor"]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    (container,) = kinds["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/fleet:1.2.3"
    assert container["args"] == ["serve", "--quota-cut-grace", "10m"]
    env = {e["name"]: e for e in container["env"]}
    assert env["FLEET_OTLP_ENDPOINT"]["value"] == "http://otel-collector.observability:4318"
    assert env["FLEET_LOG_FORMAT"]["value"] == "text"
    assert env["FLEET_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "fleet-db"
    assert "database-url" not in kinds["Secret"]["stringData"]
    assert yaml.safe_load(kinds["Secret"]["stringData"]["kubeconfig-east.yaml"])["kind"] == "Config"
    volumes = {v["name"]: v for v in kinds["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["kubeconfigs"]["secret"]["items"] == [
        {"key": "kubeconfig-east.yaml", "path": "east.yaml"}
    ]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["kubeconfigs"] == env["FLEET_KUBECONFIG_DIR"]["value"]  # where Fleet reads
    # The hub's kubeconfig, where FLEET_HUB_KUBECONFIG says.
    assert volumes["hub"]["secret"]["items"] == [{"key": "hub-kubeconfig", "path": "kubeconfig"}]
    assert env["FLEET_HUB_KUBECONFIG"]["value"] == mounts["hub"] + "/kubeconfig"
    assert yaml.safe_load(kinds["Secret"]["stringData"]["hub-kubeconfig"])["kind"] == "Config"
    assert kinds["Service"]["spec"]["type"] == "NodePort"
    assert kinds["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 0


def template_error(helm: Path, tmp_path: Path, values: dict[str, Any]) -> str:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    done = subprocess.run(
        [str(helm), "template", "fleet", str(CHART), "--values", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0, "helm template accepted the values"
    return done.stderr


@pytest.mark.parametrize(
    ("values", "replicas", "strategy"),
    [
        pytest.param({"replicaCount": 3}, 3, "RollingUpdate", id="postgresql-three"),
        pytest.param({"database": {"kind": "sqlite"}}, 1, "Recreate", id="sqlite-default"),
        pytest.param(
            {"database": {"url": "sqlite+aiosqlite:////var/lib/fleet/fleet.db"}},
            1,
            "Recreate",
            id="sqlite-url",
        ),
    ],
)
def test_replicas_follow_the_database(
    helm: Path, tmp_path: Path, values: dict[str, Any], replicas: int, strategy: str
) -> None:
    deployment = by_kind(render(helm, tmp_path, values))["Deployment"]
    assert deployment["spec"]["replicas"] == replicas
    assert deployment["spec"]["strategy"]["type"] == strategy


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"replicaCount": 2, "database": {"kind": "sqlite"}}, id="sqlite-kind"),
        pytest.param(
            {"replicaCount": 2, "database": {"url": "sqlite+aiosqlite:////var/lib/fleet/f.db"}},
            id="sqlite-url",
        ),
    ],
)
def test_more_than_one_replica_on_sqlite_is_refused(
    helm: Path, tmp_path: Path, values: dict[str, Any]
) -> None:
    assert "needs PostgreSQL" in template_error(helm, tmp_path, values)


@pytest.mark.parametrize(
    ("values", "secret_name", "stored"),
    [
        pytest.param({"replicaSecret": {"value": "s" * 40}}, "fleet", "s" * 40, id="given"),
        pytest.param({"replicaSecret": {"existingSecret": "mine"}}, "mine", None, id="existing"),
    ],
)
def test_the_replica_secret_is_given_or_an_existing_secret(
    helm: Path, tmp_path: Path, values: dict[str, Any], secret_name: str, stored: str | None
) -> None:
    kinds = by_kind(render(helm, tmp_path, values))
    (container,) = kinds["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    ref = env["FLEET_REPLICA_SECRET"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": secret_name, "key": "replica-secret"}
    assert kinds["Secret"]["stringData"].get("replica-secret") == stored


def test_a_short_replica_secret_is_refused(helm: Path, tmp_path: Path) -> None:
    values = {"replicaSecret": {"value": "short"}}
    assert "at least 32 characters" in template_error(helm, tmp_path, values)


def test_a_renewal_as_long_as_the_lease_is_refused(helm: Path, tmp_path: Path) -> None:
    values = {"fleet": {"leaderLeaseSeconds": 5, "leaderRenewSeconds": 5}}
    assert "leaderRenewSeconds must be below" in template_error(helm, tmp_path, values)


def server_side_dry_run(admin: Admin, document: dict[str, Any]) -> dict[str, Any]:
    api, kind, name = document["apiVersion"], document["kind"], document["metadata"]["name"]
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    path = f"{base}/namespaces/{NAMESPACE}/{PLURALS[kind]}/{name}"
    answer: dict[str, Any] = admin.request(
        "PATCH",
        path,
        document,
        query={"dryRun": "All", "fieldManager": "fleet-chart-test", "force": "true"},
        content_type="application/apply-patch+yaml",
    )
    return answer


def install_servicemonitor_crd(admin: Admin) -> None:
    admin.apply_file(CRD)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            admin.get(f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}/servicemonitors")
            return
        except ApiError:
            time.sleep(0.2)
    raise AssertionError("the ServiceMonitor CRD was not established")


def test_every_rendered_manifest_passes_a_server_side_dry_run(
    helm: Path, tmp_path: Path, members: dict[str, ControlPlane]
) -> None:
    plane = next(iter(members.values()))
    if plane.apiserver is None:
        plane.start_apiserver()
    admin = plane.admin
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    install_servicemonitor_crd(admin)
    for values in (None, CUSTOM):
        for document in render(helm, tmp_path, values):
            answer = server_side_dry_run(admin, document)
            assert answer["kind"] == document["kind"]
            assert answer["metadata"]["name"] == document["metadata"]["name"]
            if document["kind"] == "Deployment":  # defaulted by the server, checked by it
                (container,) = answer["spec"]["template"]["spec"]["containers"]
                assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
                assert container["terminationMessagePolicy"] == "File"
    # A dry run creates nothing.
    assert admin.items(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments") == []
    # And the API server does check: a Deployment with a wrong field is refused.
    broken = by_kind(render(helm, tmp_path))["Deployment"]
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["port"] = 70000
    with pytest.raises(ApiError) as refused:
        server_side_dry_run(admin, broken)
    assert refused.value.status == 422
    assert "livenessProbe" in str(refused.value)
