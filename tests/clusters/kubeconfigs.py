"""Kubeconfig files for tests: a plain one, and a user whose exec plugin leaves a mark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: Stands for a secret in a file that is not a kubeconfig: it must show up nowhere.
SECRET = "hunter2-in-the-file"


def config(user: dict[str, Any] | None = None, server: str = "https://127.0.0.1:1") -> str:
    """A kubeconfig of one cluster, one user and one context ``c``."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "fleet", "user": user or {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "fleet"}}],
            "current-context": "c",
        }
    )


def exec_user(marker: Path) -> dict[str, Any]:
    """A user whose exec plugin leaves ``marker`` behind when it runs."""
    credential = (
        '{"apiVersion": "client.authentication.k8s.io/v1beta1", '
        '"kind": "ExecCredential", "status": {"token": "t"}}'
    )
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "/bin/sh",
            "args": ["-c", f"touch {marker}; echo '{credential}'"],
        }
    }
