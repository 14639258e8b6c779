"""Every workload kind Fleet runs, by ``(apiVersion, kind)``.

Theory of operation: :data:`KINDS` lists the kinds in the order Fleet names
them; :func:`find` returns a kind by its document's ``apiVersion`` and
``kind`` (two kinds may share a ``kind``, such as Volcano's ``Job`` and
``batch/v1`` ``Job``: the pair tells them apart); :func:`of` reads them from a
document or a member object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from fleet.manifests.kinds import (
    batchjob,
    jobset,
    mpijob_v1,
    mpijob_v2,
    pytorchjob,
    tfjob,
    trainjob,
    volcano,
)
from fleet.manifests.kinds.base import Kind

KINDS: Final[tuple[Kind, ...]] = (
    pytorchjob.KIND,
    tfjob.KIND,
    mpijob_v1.KIND,
    mpijob_v2.KIND,
    volcano.KIND,
    jobset.KIND,
    trainjob.KIND,
    batchjob.KIND,
)
_BY_TYPE: Final = {(k.api_version, k.kind): k for k in KINDS}


def find(api_version: object, kind: object) -> Kind | None:
    """The kind of documents with this ``apiVersion`` and ``kind``, if Fleet runs it."""
    return _BY_TYPE.get((str(api_version), str(kind)))


def of(document: Mapping[str, Any]) -> Kind:
    """The kind of a workload document Fleet accepted (KeyError if it runs no such kind)."""
    found = find(document.get("apiVersion"), document.get("kind"))
    if found is None:
        raise KeyError(f"no workload kind {document.get('apiVersion')}/{document.get('kind')}")
    return found


def names() -> str:
    """The kinds Fleet runs, for messages: ``PyTorchJob (kubeflow.org/v1), ...``."""
    return ", ".join(f"{k.kind} ({k.api_version})" for k in KINDS)
