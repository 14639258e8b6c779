"""Strict validation of a workload document against its kind's CRD schema, as a member does.

Theory of operation: ``crds/`` holds, per ``(apiVersion, kind)`` of
:data:`SCHEMAS`, the ``openAPIV3Schema`` of that version of the kind's
CustomResourceDefinition (written by ``tools/import_crds.py``, origins in
``crds/SOURCE.md``; batch/v1 Job, built into the API server, has a schema
composed there).  Nothing is read until a kind is first validated
(:func:`problems`); then its schema is loaded, transformed once into plain
JSON Schema with Kubernetes' structural-schema semantics
(:func:`structural`) and kept with its validator for the process's life.

The transformation, node by node: an object schema without
``additionalProperties`` and without ``x-kubernetes-preserve-unknown-fields:
true`` gets ``additionalProperties: false`` (Kubernetes prunes its unknown
fields, and ``kubectl --validate=strict`` refuses them; an object with no
``properties`` at all refuses every field), while a preserve-unknown-fields
node stays open, anything below an unknown field included; an
``x-kubernetes-embedded-resource`` object keeps ``apiVersion``, ``kind`` and
an open ``metadata``; ``nullable: true`` adds ``null`` to the type; the
``anyOf`` of integer and string of ``x-kubernetes-int-or-string`` becomes
one keyword of that name, and its ``pattern`` (the resource-quantity
syntax, which Fleet checks itself) is dropped; what JSON Schema cannot
check or Kubernetes enforces elsewhere is dropped too (``format``,
``default``, CEL ``x-kubernetes-validations``).

Validation is Draft 4 (the OpenAPI v3.0 subset a CRD uses: boolean
``exclusiveMinimum``, no ``$ref``) through :mod:`jsonschema`, extended with
the Kubernetes keywords: a field whose value is ``null`` counts as absent,
as the API server prunes it (so ``required`` refuses it); an unknown field
is one problem of its own (``unknown field``, with ``did you mean`` the
closest known field, :func:`fleet.manifests.wording.did_you_mean`); an
``x-kubernetes-int-or-string`` value must be an integer or a string (a
YAML float such as ``cpu: 0.5`` is neither, as for the API server); a list
of ``x-kubernetes-list-type`` ``set`` or ``map`` refuses a second item with
the same value or keys (a missing key counts as its default, e.g. a port's
``protocol``).  The whole object is validated but ``metadata`` (the API
server's business, and Fleet's checks) and ``status`` (never written by
users).  Problems are ``(field path, message)`` pairs in the paths of
:func:`fleet.manifests.wording.loc_to_path`, every one of them, in document
order (mapping keys in the order written, missing fields after them).

Speed (``bench/bench_schema.py``): a document first takes
:meth:`Validator.is_valid`, which builds no messages; only a document with a
problem is walked again with ``iter_errors`` to word them.  jsonschema's own
``descend`` builds a validator for every schema node it enters, each time:
the keywords that descend (``properties``, ``additionalProperties``,
``items``) use :func:`_descend` instead, which builds it once per node, and
a node that checks nothing but a type (most leaves: strings, integers,
quantities) passes a value of that type without a walk; a value of another
type is walked, so its error comes from the validator like any other.
jsonschema itself is imported on first validation too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

import orjson

from fleet.manifests.wording import did_you_mean, loc_to_path, quote, shorten, wrong_type, yaml_type

if TYPE_CHECKING:  # jsonschema itself is imported when a kind is first validated
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

#: (apiVersion, kind) -> the file of its schema in ``crds/``.
SCHEMAS: Final[Mapping[tuple[str, str], str]] = {
    ("kubeflow.org/v1", "PyTorchJob"): "kubeflow.org_v1_PyTorchJob.json",
    ("kubeflow.org/v1", "TFJob"): "kubeflow.org_v1_TFJob.json",
    ("kubeflow.org/v1", "MPIJob"): "kubeflow.org_v1_MPIJob.json",
    ("kubeflow.org/v2beta1", "MPIJob"): "kubeflow.org_v2beta1_MPIJob.json",
    ("batch.volcano.sh/v1alpha1", "Job"): "batch.volcano.sh_v1alpha1_Job.json",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.x-k8s.io_v1alpha2_JobSet.json",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainer.kubeflow.org_v1alpha1_TrainJob.json",
    (
        "trainer.kubeflow.org/v1alpha1",
        "TrainingRuntime",
    ): "trainer.kubeflow.org_v1alpha1_TrainingRuntime.json",
    (
        "trainer.kubeflow.org/v1alpha1",
        "ClusterTrainingRuntime",
    ): "trainer.kubeflow.org_v1alpha1_ClusterTrainingRuntime.json",
    ("batch/v1", "Job"): "batch_v1_Job.json",
}

#: Top-level fields not validated against the schema.
SKIPPED: Final = frozenset({"metadata", "status"})

#: Schema keywords dropped by :func:`structural` (checked elsewhere, or not checkable here).
_DROPPED: Final = frozenset(
    {"description", "format", "default", "x-kubernetes-validations", "x-kubernetes-map-type"}
)

#: The Kubernetes keywords :func:`structural` reads (an open subtree's are left as they are).
PRESERVE: Final = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING: Final = "x-kubernetes-int-or-string"
EMBEDDED: Final = "x-kubernetes-embedded-resource"
LIST_TYPE: Final = "x-kubernetes-list-type"
MAP_KEYS: Final = "x-kubernetes-list-map-keys"
#: Added by :func:`structural`: a map list's key fields with their defaults.
_MAP_KEY_DEFAULTS: Final = "x-fleet-list-map-keys"

#: JSON Schema type -> what was expected, in plain words.
_EXPECTED: Final[Mapping[str, str]] = {
    "object": "a mapping (key: value)",
    "array": "a list",
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "null": "null",
}


def known(api_version: str, kind: str) -> bool:
    """Whether Fleet has the schema of ``kind`` in ``api_version`` (loads nothing)."""
    return (api_version, kind) in SCHEMAS


def structural(node: Any) -> Any:
    """A CRD schema as JSON Schema with Kubernetes' structural semantics (module docstring)."""
    if not isinstance(node, Mapping):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: structural(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = structural(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [structural(sub) for sub in value]
        else:
            out[key] = value
    if out.get(INT_OR_STRING):
        for key in ("anyOf", "type", "pattern"):
            out.pop(key, None)
    if out.get("nullable"):
        kind = out.get("type")
        if isinstance(kind, str):
            out["type"] = [kind, "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    if out.get(EMBEDDED):
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object", PRESERVE: True})
    is_object = out.get("type") == "object" or "properties" in out
    if is_object and not out.get(PRESERVE) and "additionalProperties" not in out:
        out.setdefault("properties", {})
        out["additionalProperties"] = False
    if out.get(LIST_TYPE) == "atomic":
        del out[LIST_TYPE]
    if out.get(LIST_TYPE) == "map":
        item_props = node.get("items", {}).get("properties", {})
        keys = out.get(MAP_KEYS, [])
        out[_MAP_KEY_DEFAULTS] = [[k, item_props.get(k, {}).get("default")] for k in keys]
    return out


# -- the Kubernetes keywords, as jsonschema keyword functions ---------------------------------

_Errors = Iterator["ValidationError"]


def _error(message: str, path: Sequence[str | int] = ()) -> ValidationError:
    from jsonschema.exceptions import ValidationError  # loaded by then: see validator()

    return ValidationError(message, path=path)


#: A leaf node's one type -> what Draft 4's type checker accepts for it (bool is no number).
_LEAF_TYPES: Final[Mapping[str, Callable[[Any], bool]]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def _is_int_or_string(value: Any) -> bool:
    return isinstance(value, int | str) and not isinstance(value, bool)


def _leaf_test(schema: Any) -> Callable[[Any], bool] | None:
    """The whole check of a node that checks only a type (or integer-or-string), else None."""
    if not isinstance(schema, dict):
        return None
    if schema.keys() == {"type"} and isinstance(schema["type"], str):
        return _LEAF_TYPES.get(schema["type"])
    if schema.keys() == {INT_OR_STRING} and schema[INT_OR_STRING] is True:
        return _is_int_or_string
    return None


#: id(schema node) -> (the node, its validator, the node's type test if the type is all it
#: checks): jsonschema's ``descend`` builds a validator for every node it enters, every
#: time; these are built once per node (the node is kept, so its id is not reused).
_NODES: dict[int, tuple[Any, Validator, Callable[[Any], bool] | None]] = {}


def _descend(validator: Validator, instance: Any, schema: Any, path: str | int) -> _Errors:
    """``validator.descend(instance, schema, path=path)`` with the node's validator cached,
    and a leaf that only has a type checked without a walk (its errors still come from it)."""
    hit = _NODES.get(id(schema))
    if hit is None or hit[0] is not schema:
        hit = (schema, validator.evolve(schema=schema), _leaf_test(schema))
        _NODES[id(schema)] = hit
    leaf = hit[2]
    if leaf is not None and leaf(instance):
        return
    for error in hit[1].iter_errors(instance):
        error.path.appendleft(path)
        yield error


def _properties(
    validator: Validator, properties: Mapping[str, Any], instance: Any, schema: Any
) -> _Errors:
    if not isinstance(instance, dict):
        return
    for name, value in instance.items():
        sub = properties.get(name)
        if sub is not None and value is not None:
            yield from _descend(validator, value, sub, name)


def _additional_properties(
    validator: Validator, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> _Errors:
    if not isinstance(instance, dict):
        return
    properties = schema.get("properties", {})
    for name, value in instance.items():
        if name in properties:
            continue
        if additional is False:
            yield _error(_unknown_field(str(name), properties), [name])
        elif isinstance(additional, dict) and value is not None:
            yield from _descend(validator, value, additional, name)


def _unknown_field(name: str, properties: Mapping[str, Any]) -> str:
    msg = f"unknown field {quote(name)}"
    close = did_you_mean(name, properties)
    return msg if close is None else f"{msg} (did you mean {close!r}?)"


def _required(validator: Validator, required: Sequence[str], instance: Any, schema: Any) -> _Errors:
    if not isinstance(instance, dict):
        return
    for name in required:
        if instance.get(name) is None:
            yield _error("required field is missing", [name])


def _int_or_string(validator: Validator, flag: Any, instance: Any, schema: Any) -> _Errors:
    if not flag or _is_int_or_string(instance):
        return
    msg = wrong_type("an integer or a string", instance)
    if isinstance(instance, float):
        msg += f" (quote it: '{instance}')"
    yield _error(msg)


def _items(validator: Validator, items: Any, instance: Any, schema: Any) -> _Errors:
    if not isinstance(instance, list):
        return
    for index, item in enumerate(instance):
        yield from _descend(validator, item, items, index)


def _hashable(value: Any) -> Any:
    """A key that equal entries share (any YAML value: sets, dates and odd keys too)."""
    if value is None or isinstance(value, str | int | float):
        return value
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # not JSON data: the entry's own schema refuses it anyway
        return repr(value)


def _list_type(validator: Validator, list_type: Any, instance: Any, schema: Any) -> _Errors:
    if not isinstance(instance, list):
        return
    seen: dict[Any, int] = {}
    if list_type == "set":
        for i, item in enumerate(instance):
            key = _hashable(item)
            if key in seen:
                yield _error(f"duplicate entry (also at [{seen[key]}])", [i])
            else:
                seen[key] = i
    elif list_type == "map":
        keys: list[list[Any]] = schema.get(_MAP_KEY_DEFAULTS, [])
        for i, item in enumerate(instance):
            if not isinstance(item, dict):
                continue  # the items' schema says what is wrong
            found = tuple(_hashable(item.get(k, default)) for k, default in keys)
            if found in seen:
                named = ", ".join(f"{k} {quote(item.get(k, d))}" for k, d in keys)
                yield _error(f"duplicate entry: {named} (also at [{seen[found]}])", [i])
            else:
                seen[found] = i


_KEYWORDS: Final[Mapping[str, Callable[..., _Errors]]] = {
    "properties": _properties,
    "additionalProperties": _additional_properties,
    "required": _required,
    "items": _items,
    INT_OR_STRING: _int_or_string,
    LIST_TYPE: _list_type,
}


@functools.cache
def validator_class() -> type[Validator]:
    """Draft 4 with the Kubernetes keywords (imports jsonschema, on first use)."""
    import jsonschema

    extended: type[Validator] = jsonschema.validators.extend(
        jsonschema.Draft4Validator, dict(_KEYWORDS)
    )
    return extended


# -- messages --------------------------------------------------------------------------------


def _one_of(values: Sequence[Any]) -> str:
    quoted = [quote(v) for v in values if v is not None]
    if len(quoted) == 1:
        return quoted[0]
    return f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def _message(error: ValidationError) -> str:
    """The error in the words of :mod:`fleet.manifests.documents`' messages."""
    keyword = error.validator
    value = error.instance
    limit = error.validator_value
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if keyword == "type":
        types = [limit] if isinstance(limit, str) else list(limit)
        expected = " or ".join(_EXPECTED.get(t, t) for t in types if t != "null")
        return wrong_type(expected, value, "integer" if "integer" in types else types[0])
    if keyword == "enum":
        return f"must be {_one_of(limit)}, not {yaml_type(value)}"
    if keyword in ("minimum", "maximum"):
        exclusive = schema.get(f"exclusive{keyword.capitalize()}")
        if keyword == "minimum":
            bound = "more than" if exclusive else "at least"
        else:
            bound = "less than" if exclusive else "at most"
        return f"must be {bound} {limit}, not {quote(value)}"
    counted = {
        "minLength": ("least", "characters"),
        "maxLength": ("most", "characters"),
        "minItems": ("least", "items"),
        "maxItems": ("most", "items"),
        "minProperties": ("least", "entries"),
        "maxProperties": ("most", "entries"),
    }
    if keyword in counted:
        if limit == 1 and counted[keyword][0] == "least":
            return "must not be empty"
        word, unit = counted[keyword]
        return f"must have at {word} {limit} {unit}"
    if keyword == "pattern":
        return f"must match the pattern {quote(limit)}, not {yaml_type(value)}"
    if keyword == "uniqueItems":
        return "items must be unique"
    return shorten(error.message, 200)


def _located(document: Any, path: Sequence[Any]) -> tuple[tuple[int, ...], str]:
    """Where ``path`` is in ``document`` (key order as written, missing keys last) and its
    dotted path (a mapping's key is a name even when YAML read it as a number)."""
    order: list[int] = []
    loc: list[int | str] = []
    node = document
    for part in path:
        if isinstance(node, dict):
            keys = list(node)
            order.append(keys.index(part) if part in node else len(keys))
            loc.append(str(part))
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            order.append(part)
            loc.append(part)
            node = node[part]
        else:
            order.append(0)
            loc.append(part)
            node = None
    return tuple(order), loc_to_path(loc)


@functools.cache
def validator(api_version: str, kind: str) -> Validator:
    """The cached validator of a kind (its schema loaded on first use); KeyError if unknown."""
    name = SCHEMAS[(api_version, kind)]
    raw = orjson.loads((resources.files("fleet.manifests.kinds") / "crds" / name).read_bytes())
    return validator_class()(structural(raw))


def problems(api_version: str, kind: str, document: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every (field path, message) of ``document`` against its kind's CRD schema, in document
    order; empty when it is valid.  KeyError if the kind is not :func:`known`."""
    checker = validator(api_version, kind)
    body = {key: value for key, value in document.items() if key not in SKIPPED}
    if checker.is_valid(body):
        return []
    found = []
    for error in checker.iter_errors(body):
        order, path = _located(body, list(error.absolute_path))
        found.append((order, path, _message(error)))
    found.sort()
    return [(path, message) for _, path, message in found]
