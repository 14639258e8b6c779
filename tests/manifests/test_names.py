"""Every place that reads a Kubernetes name or namespace matches it whole, by one rule.

Each place is a document with a name or namespace at a field path; each
near miss (a trailing newline, which ``$`` accepts, and the other ways to
almost be a DNS-1123 label or subdomain) must be an issue at that path, and
the value itself must pass, so that the place is known to be checked.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from fleet.manifests import documents
from fleet.manifests.names import NAMESPACE, OBJECT_NAME, NameRule, name_problem
from tests.manifests.factories import dump, make_cluster, make_job, make_policy, make_tree, node

Doc = dict[str, Any]


def _set(path: str, value: str) -> Callable[[Doc], None]:
    """A change of ``doc`` at dotted ``path`` (``[i]`` indexes a list)."""

    def change(doc: Doc) -> None:
        target: Any = doc
        parts = path.replace("[", ".").replace("]", "").split(".")
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        last = parts[-1]
        if isinstance(target, list):
            target[int(last)] = value
        else:
            target[last] = value

    return change


def _tree() -> Doc:
    child = node("team-a", namespaces=["team-a"], min={"nvidia.com/gpu": 1})
    return make_tree(node("root", max={"nvidia.com/gpu": 8}, children=[child]))


def _policy() -> Doc:
    selector = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "namespace": "team-a"}
    selector["name"] = "train"
    affinity = {"clusterNames": ["east"], "exclude": ["west"]}
    return make_policy(selectors=[selector], affinity=affinity)


#: (document, field path, rule): every place a name or a namespace is read.
PLACES: dict[str, tuple[Callable[[], Doc], str, NameRule]] = {
    "job name": (make_job, "metadata.name", OBJECT_NAME),
    "job namespace": (make_job, "metadata.namespace", NAMESPACE),
    "policy name": (_policy, "metadata.name", OBJECT_NAME),
    "policy namespace": (_policy, "metadata.namespace", NAMESPACE),
    "selected namespace": (_policy, "spec.resourceSelectors[0].namespace", NAMESPACE),
    "selected name": (_policy, "spec.resourceSelectors[0].name", OBJECT_NAME),
    "cluster affinity": (_policy, "spec.placement.clusterAffinity.clusterNames[0]", OBJECT_NAME),
    "cluster exclusion": (_policy, "spec.placement.clusterAffinity.exclude[0]", OBJECT_NAME),
    "quota tree name": (_tree, "metadata.name", OBJECT_NAME),
    "quota root name": (_tree, "spec.root.name", OBJECT_NAME),
    "quota node name": (_tree, "spec.root.children[0].name", OBJECT_NAME),
    "quota node namespace": (_tree, "spec.root.children[0].namespaces[0]", NAMESPACE),
    "member cluster name": (make_cluster, "metadata.name", OBJECT_NAME),
}

#: Near misses of both syntaxes, and those of one only.
NEAR_MISSES = {
    "trailing newline": "team-a\n",
    "trailing carriage return and newline": "team-a\r\n",
    "leading newline": "\nteam-a",
    "capital": "Team-a",
    "leading dash": "-team-a",
    "trailing dash": "team-a-",
    "underscore": "team_a",
    "space": "team a",
    "trailing space": "team-a ",
    "empty": "",
    "non-ascii letter": "tëam-a",
    "fullwidth digit": "team-１",
}
LABEL_MISSES = {"dot": "team.a", "64 characters": "a" * 64}
SUBDOMAIN_MISSES = {
    "two dots": "team..a",
    "trailing dot": "team-a.",
    "dash after a dot": "team.-a",
    "254 characters": "a" * 254,
}


def _cases() -> list[Any]:
    cases = []
    for place, (build, path, rule) in PLACES.items():
        own = LABEL_MISSES if rule is NAMESPACE else SUBDOMAIN_MISSES
        for label, value in {**NEAR_MISSES, **own}.items():
            cases.append(pytest.param(build, path, value, id=f"{place}: {label}"))
    return cases


def _issues_at(doc: Doc, path: str) -> list[str]:
    _, issues = documents.parse_documents(dump(doc))
    return [i.message for i in issues if i.path == path]


#: The longest valid value of each rule.
LONGEST = {OBJECT_NAME.what: "a" * 249 + "-9.b", NAMESPACE.what: "a" * 61 + "-9"}


@pytest.mark.parametrize("place", PLACES.values(), ids=PLACES.keys())
def test_each_place_takes_a_valid_name(place: tuple[Callable[[], Doc], str, NameRule]) -> None:
    build, path, rule = place
    doc = build()
    _set(path, LONGEST[rule.what])(doc)
    _, issues = documents.parse_documents(dump(doc))
    assert not [i for i in issues if i.path == path], issues


@pytest.mark.parametrize(("build", "path", "value"), _cases())
def test_each_place_refuses_a_near_miss_naming_its_field(
    build: Callable[[], Doc], path: str, value: str
) -> None:
    doc = copy.deepcopy(build())
    _set(path, value)(doc)
    found = _issues_at(doc, path)
    assert found, f"{value!r} at {path} was accepted"
    assert "is not a valid" in found[0], found


@pytest.mark.parametrize(
    ("value", "rule", "valid"),
    [
        pytest.param("team-a", NAMESPACE, True, id="label"),
        pytest.param("a" * 63, NAMESPACE, True, id="63-character label"),
        pytest.param("team-a.example", OBJECT_NAME, True, id="subdomain"),
        pytest.param("team-a\n", NAMESPACE, False, id="label with a newline"),
        pytest.param("team-a\n", OBJECT_NAME, False, id="subdomain with a newline"),
        pytest.param("team-a.example\n", OBJECT_NAME, False, id="dotted with a newline"),
    ],
)
def test_the_one_rule_matches_whole(value: str, rule: NameRule, valid: bool) -> None:
    assert (name_problem(value, rule, repr(value)) is None) is valid
