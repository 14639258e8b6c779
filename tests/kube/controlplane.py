"""Real member control planes for tests: etcd and kube-apiserver on loopback.

Theory of operation: :func:`binaries` finds the ``etcd`` and
``kube-apiserver`` that ``scripts/kube-binaries`` built (``FLEET_KUBE_BIN``
names their directory; else the script is asked where its cache is), and
with ``kubectl=True`` the directory that also holds that script's
``kubectl`` (the hub tests run it).  :class:`ControlPlane` starts both on
free loopback ports in a directory of its own: a serving certificate and a
service-account key pair made with ``openssl``, a token file with an admin
(``system:masters``), Fleet's service account
(``system:serviceaccount:fleet-system:fleet``, whose rights come only from
the RBAC file the test installs: ``deploy/member/rbac.yaml`` in a member,
``deploy/hub/rbac.yaml`` in the hub), a user with no rights at all, and the
:class:`Token` users a test adds (the hub's teams); RBAC authorization.
:meth:`ControlPlane.install_crd` installs CRDs of ``deploy/member/crds`` by
name, or any CRD file by path.  :class:`Admin` talks to it as the admin, for
the fixtures and for the stand-in of the training operator
(:mod:`.operator`).  No kubelet, controller manager or scheduler runs: the
tests play them.
"""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fleet.testing.servers import free_port
from tests.paths import ROOT as REPO_ROOT

DEPLOY = REPO_ROOT / "deploy" / "member"
ADMIN_TOKEN = "admin-token"
FLEET_TOKEN = "fleet-token"
NOBODY_TOKEN = "nobody-token"
FLEET_USER = "system:serviceaccount:fleet-system:fleet"


def cached_binaries(variable: str, script: str, names: tuple[str, ...]) -> Path | None:
    """The directory holding every one of ``names``: ``$variable``, else where ``script``
    says its cache is (``--path``, building nothing); None when they are not built."""
    named = os.environ.get(variable)
    candidates = [Path(named)] if named else []
    if not named:
        out = subprocess.run(
            [str(REPO_ROOT / "scripts" / script), "--path"],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))
    for d in candidates:
        if all((d / name).is_file() for name in names):
            return d
    return None


def binaries(*, kubectl: bool = False) -> Path | None:
    """The directory with ``etcd`` and ``kube-apiserver`` (and ``kubectl`` if asked), or None
    when they are not built."""
    names = ("etcd", "kube-apiserver", "kubectl") if kubectl else ("etcd", "kube-apiserver")
    return cached_binaries("FLEET_KUBE_BIN", "kube-binaries", names)


@dataclass(frozen=True)
class Token:
    """A user of the token file: ``token``, ``user`` (also its uid) and its ``groups``."""

    token: str
    user: str
    groups: tuple[str, ...] = ()

    def line(self) -> str:
        """The token file's line: ``token,user,uid[,"group,..."]``."""
        groups = ",".join(self.groups)
        return f"{self.token},{self.user},{self.user}" + (f',"{groups}"' if groups else "") + "\n"


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status


@dataclass
class Admin:
    """Plain JSON calls to one API server with one token (synchronous, for tests)."""

    url: str
    token: str
    ca_file: Path

    def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        context = ssl.create_default_context(cafile=str(self.ca_file))
        for attempt in range(100):
            try:
                with urllib.request.urlopen(req, timeout=30, context=context) as resp:
                    text = resp.read().decode()
                break
            except urllib.error.HTTPError as e:
                # 429 while a restarted API server (re)initializes its storage.
                if e.code != 429 or attempt == 99:
                    raise ApiError(e.code, e.read().decode()) from e
                time.sleep(0.1)
        try:
            return json.loads(text) if text else None
        except ValueError:
            return text  # /readyz and friends answer plain text

    def get(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query=query or None)

    def items(self, path: str, **query: str) -> list[dict[str, Any]]:
        return list(self.get(path, **query)["items"])

    def apply(self, document: dict[str, Any]) -> None:
        """Create ``document`` (Namespace, ServiceAccount, RBAC, CRD, Node); existing is fine."""
        try:
            self.request("POST", collection_path(document), document)
        except ApiError as e:
            if e.status != 409:
                raise

    def apply_file(self, path: Path) -> None:
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                self.apply(document)


def collection_path(document: dict[str, Any]) -> str:
    api, kind = document["apiVersion"], document["kind"]
    namespace = (document.get("metadata") or {}).get("namespace")
    plural = {
        "Namespace": "namespaces",
        "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "CustomResourceDefinition": "customresourcedefinitions",
        "Node": "nodes",
        "Pod": "pods",
    }[kind]
    base = "/api/v1" if api == "v1" else f"/apis/{api}"
    return f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


class ControlPlane:
    """etcd and kube-apiserver of one member; see the module docstring."""

    def __init__(
        self, name: str, bin_dir: Path, root: Path, *, tokens: Sequence[Token] = ()
    ) -> None:
        self.name = name
        self.bin_dir = bin_dir
        self.tokens = tuple(tokens)
        self.dir = root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.etcd_port = free_port()
        self.peer_port = free_port()
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.etcd: subprocess.Popen[bytes] | None = None
        self.apiserver: subprocess.Popen[bytes] | None = None
        self._pki()
        self.admin = Admin(self.url, ADMIN_TOKEN, self.dir / "ca.crt")

    def _pki(self) -> None:
        d = self.dir
        _openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"),
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        )  # fmt: skip
        _openssl("genrsa", "-out", str(d / "sa.key"), "2048")
        _openssl("rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub"))
        (d / "tokens.csv").write_text(
            f'{ADMIN_TOKEN},admin,admin,"system:masters"\n'
            f'{FLEET_TOKEN},{FLEET_USER},fleet,"system:serviceaccounts,'
            'system:serviceaccounts:fleet-system"\n'
            f"{NOBODY_TOKEN},nobody,nobody\n" + "".join(t.line() for t in self.tokens)
        )

    def kubeconfig(self, token: str = FLEET_TOKEN, path: Path | None = None) -> Path:
        """A kubeconfig file for this member with ``token`` (context ``NAME``)."""
        path = path or self.dir / f"kubeconfig-{token}.yaml"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": self.name,
                    "cluster": {
                        "server": self.url,
                        "certificate-authority": str(self.dir / "ca.crt"),
                    },
                }
            ],
            "users": [{"name": "fleet", "user": {"token": token}}],
            "contexts": [{"name": self.name, "context": {"cluster": self.name, "user": "fleet"}}],
            "current-context": self.name,
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # Processes ---------------------------------------------------------------------

    @staticmethod
    def _spawn(log: Any, argv: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def start(self) -> None:
        self.start_etcd()
        self.start_apiserver()

    def start_etcd(self) -> None:
        with (self.dir / "etcd.log").open("ab") as log:
            self.etcd = self._spawn(
                log,
                [
                str(self.bin_dir / "etcd"),
                "--name", "default",
                "--data-dir", str(self.dir / "etcd"),
                "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
                "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                "--initial-cluster", f"default=http://127.0.0.1:{self.peer_port}",
                "--unsafe-no-fsync",
                "--log-level", "warn",
            ]
            )  # fmt: skip

    def start_apiserver(self, *, wait: bool = True) -> None:
        d = self.dir
        with (d / "apiserver.log").open("ab") as log:
            self.apiserver = self._spawn(
                log,
                [
                str(self.bin_dir / "kube-apiserver"),
                "--etcd-servers", f"http://127.0.0.1:{self.etcd_port}",
                "--bind-address", "127.0.0.1",
                "--advertise-address", "127.0.0.1",
                "--secure-port", str(self.port),
                "--tls-cert-file", str(d / "ca.crt"),
                "--tls-private-key-file", str(d / "ca.key"),
                "--cert-dir", str(d / "certs"),
                "--token-auth-file", str(d / "tokens.csv"),
                "--authorization-mode", "RBAC",
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file", str(d / "sa.pub"),
                "--service-account-signing-key-file", str(d / "sa.key"),
                "--service-cluster-ip-range", "10.0.0.0/24",
                "--endpoint-reconciler-type", "none",
                "--disable-admission-plugins", "ServiceAccount",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                "--watch-cache=true",
                # ConfigMaps straight from etcd: a compaction then makes an
                # old resourceVersion 410 Gone (tests/kube/test_watches.py).
                "--watch-cache-sizes=configmaps#0",
                "-v", "0",
            ]
            )  # fmt: skip
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.apiserver is not None and self.apiserver.poll() is not None:
                raise AssertionError(f"kube-apiserver of {self.name} exited:\n{self.log_tail()}")
            try:
                self.admin.get("/readyz")
                self.admin.get("/apis/rbac.authorization.k8s.io/v1/clusterroles/admin")
                return
            except (ApiError, OSError, ValueError) as e:
                last = str(e)
            time.sleep(0.2)
        raise AssertionError(f"kube-apiserver of {self.name} not ready: {last}\n{self.log_tail()}")

    def log_tail(self) -> str:
        text = ""
        for name in ("apiserver.log", "etcd.log"):
            f = self.dir / name
            if f.exists():
                text += f"--- {name}\n" + "\n".join(
                    f.read_text(errors="replace").splitlines()[-30:]
                )
        return text

    def stop_apiserver(self) -> None:
        """Kill the API server at once (its graceful shutdown waits for open watches)."""
        if self.apiserver is not None and self.apiserver.poll() is None:
            self.apiserver.kill()
            self.apiserver.wait()
        self.apiserver = None

    def stop(self) -> None:
        self.stop_apiserver()
        _stop(self.etcd)
        self.etcd = None

    # Member set-up -------------------------------------------------------------------

    def install_crd(self, *files: str | Path) -> None:
        """Install CRDs and wait for them: a name is a file of ``deploy/member/crds/``
        (default: PyTorchJob's), a :class:`Path` any CRD file."""
        for file in files or ("kubeflow.org_pytorchjobs.yaml",):
            path = file if isinstance(file, Path) else DEPLOY / "crds" / file
            self.admin.apply_file(path)
            for crd in yaml.safe_load_all(path.read_text()):
                if not crd:
                    continue
                group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
                version = next(v["name"] for v in crd["spec"]["versions"] if v.get("served"))
                self._wait_established(f"{plural}.{group}", f"/apis/{group}/{version}/{plural}")

    def _wait_established(self, name: str, path: str) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            crd = self.admin.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                try:
                    self.admin.get(path)
                    return
                except ApiError:
                    pass
            time.sleep(0.2)
        raise AssertionError(f"the CRD {name} was not established")

    def install_rbac(self, path: Path = DEPLOY / "rbac.yaml") -> None:
        """Apply an RBAC file (default: ``deploy/member/rbac.yaml``, Fleet's role in a member)."""
        self.admin.apply_file(path)

    def namespace(self, name: str) -> None:
        self.admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def add_node(self, name: str, gpus: int, *, ready: bool = True) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        }
        self.admin.apply(node)
        self.set_node_ready(name, ready, gpus=gpus)

    def set_node_ready(self, name: str, ready: bool, *, gpus: int | None = None) -> None:
        status: dict[str, Any] = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "set by the test",
                }
            ]
        }
        if gpus is not None:
            capacity = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
            status["capacity"] = capacity
            status["allocatable"] = capacity
        self.admin.request(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )

    def compact_etcd(self) -> int:
        """Compact etcd's history up to now (its HTTP gateway); the revision."""
        rev = int(self._etcd("/v3/kv/range", {"key": "AA=="})["header"]["revision"])
        self._etcd("/v3/kv/compaction", {"revision": rev, "physical": True})
        return rev

    def _etcd(self, path: str, body: dict[str, Any]) -> Any:
        url = f"http://127.0.0.1:{self.etcd_port}{path}"
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def cordon(self, name: str, unschedulable: bool = True) -> None:
        self.admin.request(
            "PATCH",
            f"/api/v1/nodes/{name}",
            {"spec": {"unschedulable": unschedulable}},
            content_type="application/merge-patch+json",
        )


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_for(predicate: Any, what: str, timeout: float = 60.0, interval: float = 0.1) -> Any:
    """Poll ``predicate()`` until it returns something true; AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
