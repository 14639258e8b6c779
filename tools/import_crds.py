"""Write the CRD schemas that :mod:`fleet.manifests.kinds.schema` validates with.

Theory of operation: each CustomResourceDefinition YAML file named on the
command line gives, for each of its versions, the version's
``openAPIV3Schema``; it is written as compact JSON to
``<group>_<version>_<Kind>.json`` (``kubeflow.org_v1_PyTorchJob.json``)
with every ``description`` keyword dropped (prose for ``kubectl explain``,
about four fifths of the bytes, and no part of validation) and nothing else
changed: the Kubernetes semantics (``x-kubernetes-*``) are applied when the
schema is loaded, not here.  A property *named* ``description`` is a field,
not the keyword, and is kept: the walk tells schema nodes from the maps of
field names (``properties``) that hold them.

``batch/v1`` Job has no CRD (the API server builds it in): when a JobSet CRD
is among the inputs, ``batch_v1_Job.json`` is written too, from
:data:`JOB_SPEC` (the fields of a Kubernetes 1.34 JobSpec, written here) with
``template`` set to the PodTemplateSpec of the JobSet CRD's replicated Job
template (the newest pod schema among the inputs).  ``crds/SOURCE.md`` names
the upstream files; regenerate with::

    python tools/import_crds.py --out fleet/manifests/kinds/crds CRD.yaml...
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

#: The C loader when PyYAML has it (a CRD is half a megabyte of YAML).
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: Schema keywords whose value is a map of field names to schemas.
_SCHEMA_MAPS = ("properties", "patternProperties", "definitions")
#: Schema keywords whose value is one schema (or, for ``items``, a list of them).
_SCHEMA_ONE = ("items", "additionalProperties", "additionalItems", "not")
#: Schema keywords whose value is a list of schemas.
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf")


def strip_descriptions(schema: Any) -> Any:
    """``schema`` without its ``description`` keywords (fields named so are kept)."""
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "description":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: strip_descriptions(sub) for name, sub in value.items()}
        elif key in _SCHEMA_ONE:
            if isinstance(value, list):
                out[key] = [strip_descriptions(sub) for sub in value]
            else:
                out[key] = strip_descriptions(value)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [strip_descriptions(sub) for sub in value]
        else:
            out[key] = value
    return out


def _int32(minimum: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "integer", "format": "int32"}
    if minimum is not None:
        out["minimum"] = minimum
    return out


_LABEL_SELECTOR: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-map-type": "atomic",
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "x-kubernetes-list-type": "atomic",
            "items": {
                "type": "object",
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {
                        "type": "array",
                        "x-kubernetes-list-type": "atomic",
                        "items": {"type": "string"},
                    },
                },
            },
        },
    },
}

#: batch/v1 JobSpec of Kubernetes 1.34 (k8s.io/api/batch/v1/types.go), all but ``template``,
#: with the enums and lower bounds the API server's validation enforces.
JOB_SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["template"],
    "properties": {
        "parallelism": _int32(0),
        "completions": _int32(0),
        "activeDeadlineSeconds": {"type": "integer", "format": "int64", "minimum": 1},
        "podFailurePolicy": {
            "type": "object",
            "required": ["rules"],
            "properties": {
                "rules": {
                    "type": "array",
                    "maxItems": 20,
                    "x-kubernetes-list-type": "atomic",
                    "items": {
                        "type": "object",
                        "required": ["action"],
                        "properties": {
                            "action": {
                                "type": "string",
                                "enum": ["FailJob", "FailIndex", "Ignore", "Count"],
                            },
                            "onExitCodes": {
                                "type": "object",
                                "required": ["operator", "values"],
                                "properties": {
                                    "containerName": {"type": "string"},
                                    "operator": {"type": "string", "enum": ["In", "NotIn"]},
                                    "values": {
                                        "type": "array",
                                        "maxItems": 255,
                                        "x-kubernetes-list-type": "set",
                                        "items": _int32(),
                                    },
                                },
                            },
                            "onPodConditions": {
                                "type": "array",
                                "maxItems": 20,
                                "x-kubernetes-list-type": "atomic",
                                "items": {
                                    "type": "object",
                                    "required": ["type"],
                                    "properties": {
                                        "type": {"type": "string"},
                                        "status": {
                                            "type": "string",
                                            "enum": ["True", "False", "Unknown"],
                                        },
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
        "successPolicy": {
            "type": "object",
            "required": ["rules"],
            "properties": {
                "rules": {
                    "type": "array",
                    "maxItems": 20,
                    "x-kubernetes-list-type": "atomic",
                    "items": {
                        "type": "object",
                        "properties": {
                            "succeededIndexes": {"type": "string"},
                            "succeededCount": _int32(0),
                        },
                    },
                }
            },
        },
        "backoffLimit": _int32(0),
        "backoffLimitPerIndex": _int32(0),
        "maxFailedIndexes": _int32(0),
        "selector": _LABEL_SELECTOR,
        "manualSelector": {"type": "boolean"},
        "ttlSecondsAfterFinished": _int32(0),
        "completionMode": {"type": "string", "enum": ["NonIndexed", "Indexed"]},
        "suspend": {"type": "boolean"},
        "podReplacementPolicy": {"type": "string", "enum": ["TerminatingOrFailed", "Failed"]},
        "managedBy": {"type": "string", "maxLength": 63},
    },
}


def batch_job(pod_template: Mapping[str, Any]) -> dict[str, Any]:
    """The batch/v1 Job schema: :data:`JOB_SPEC` with ``pod_template`` as its ``template``."""
    spec = dict(JOB_SPEC)
    spec["properties"] = {**JOB_SPEC["properties"], "template": pod_template}
    return {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }


def file_name(group: str, version: str, kind: str) -> str:
    return f"{group}_{version}_{kind}.json"


def schemas(crd: Mapping[str, Any]) -> dict[str, Any]:
    """File name -> description-free ``openAPIV3Schema`` of each version of one CRD."""
    spec = crd["spec"]
    out: dict[str, Any] = {}
    for version in spec["versions"]:
        name = file_name(spec["group"], version["name"], spec["names"]["kind"])
        out[name] = strip_descriptions(version["schema"]["openAPIV3Schema"])
    return out


def jobset_pod_template(jobset: Mapping[str, Any]) -> Any:
    """The PodTemplateSpec inside a JobSet schema (replicatedJobs[].template.spec.template)."""
    replicated = jobset["properties"]["spec"]["properties"]["replicatedJobs"]["items"]
    return replicated["properties"]["template"]["properties"]["spec"]["properties"]["template"]


def write(out: Path, name: str, schema: Any) -> None:
    text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
    (out / name).write_text(text + "\n", encoding="utf-8")
    print(f"{name}: {len(text) + 1} bytes")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("crds", nargs="+", type=Path, help="CustomResourceDefinition YAML files")
    parser.add_argument("--out", type=Path, default=Path("fleet/manifests/kinds/crds"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.crds:
        crd = yaml.load(path.read_text(encoding="utf-8"), Loader=LOADER)
        for name, schema in schemas(crd).items():
            write(args.out, name, schema)
            if name == file_name("jobset.x-k8s.io", "v1alpha2", "JobSet"):
                write(
                    args.out,
                    file_name("batch", "v1", "Job"),
                    batch_job(jobset_pod_template(schema)),
                )


if __name__ == "__main__":
    main()
