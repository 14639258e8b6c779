"""parse_submission raises ProblemError and nothing else, whatever the body.

Four kinds of input: arbitrary bytes, text made of YAML's punctuation and
keywords, valid submissions with random edits, and valid submissions whose
fields hold arbitrary YAML values (timestamps, binary, sets, NaN, non-string
keys).  Limits are drawn small too, so the bounds are crossed often.  An
accepted submission must be JSON-clean and hashed; a refused one must be a
client error whose body serializes.
"""

from __future__ import annotations

import datetime
import functools
import json
import re
from typing import Any

import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fleet.api.problems import ProblemError
from fleet.api.submissions import SubmissionLimits, Submitted, parse_submission
from fleet.core.quota import QuotaTree
from fleet.manifests import convert
from fleet.manifests.models import MemberClusterModel
from tests.manifests.factories import dump, make_cluster, make_job, make_policy, make_tree

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def tree() -> QuotaTree:
    return convert.load_quota(dump(make_tree()))[0]


@functools.cache
def clusters() -> tuple[MemberClusterModel, ...]:
    return tuple(convert.load_clusters(dump(make_cluster("c1"), make_cluster("c2"))))


LIMITS = SubmissionLimits()


def check(body: bytes, limits: SubmissionLimits = LIMITS) -> list[Submitted] | None:
    try:
        out = parse_submission(body, tree=tree(), clusters=clusters(), first_seq=1, limits=limits)
    except ProblemError as e:
        problem = e.problem
        event(f"refused: {problem.status}")
        assert 400 <= problem.status < 500
        data = json.loads(problem.to_json())
        assert data["status"] == problem.status and data["title"]
        for error in problem.errors:
            assert error.document is None or error.document >= 0
            assert error.message
        return None
    event("accepted")
    for s in out:
        json.dumps({"job": s.document, "policy": s.policy}, allow_nan=False)
        assert re.fullmatch(r"[0-9a-f]{64}", s.spec_hash)
        assert s.job.key == f"{s.namespace}/{s.name}"
    return out


small_limits = st.builds(
    SubmissionLimits,
    max_bytes=st.integers(1, 5000),
    max_documents=st.integers(1, 4),
    max_alias_nodes=st.integers(0, 50),
    max_depth=st.integers(1, 12),
)


@SETTINGS
@given(st.binary(max_size=3000))
def test_arbitrary_bytes(body: bytes) -> None:
    check(body)


TOKENS = [
    *"abc:-[]{}&*!|>'\"#%@`,?\n \t01.~\\",
    "\n  ",
    "\n    - ",
    "---\n",
    "...\n",
    "apiVersion: kubeflow.org/v1\n",
    "apiVersion: policy.karmada.io/v1alpha1\n",
    "kind: PyTorchJob\n",
    "kind: PropagationPolicy\n",
    "metadata: {name: x, namespace: default}\n",
    "spec:",
    "&a ",
    "*a",
    "<<: ",
    "!!binary ",
    "!!set ",
    "!!float ",
    "!!python/object ",
    "!!omap ",
    ".nan",
    ".inf",
    "2020-02-30",
    "2020-01-01T00:00:00Z",
    "1e999",
    "0x1F",
    "%YAML 1.1\n",
    "%TAG ! tag:x,2020:\n",
    "\ufeff",
    "\x00",
    "\x85",
    "\u2028",
]


@SETTINGS
@given(st.lists(st.sampled_from(TOKENS), max_size=80).map("".join))
def test_yaml_ish_text(text: str) -> None:
    check(text.encode("utf-8", "surrogatepass"))


def valid_text() -> str:
    return dump(make_policy(), make_job(), make_job("other", workers=1))


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.integers(0, 10_000), st.integers(0, 8), st.sampled_from(TOKENS) | st.text(max_size=3)
        ),
        min_size=1,
        max_size=6,
    )
)
def test_edited_valid_submissions(edits: list[tuple[int, int, str]]) -> None:
    text = valid_text()
    for at, cut, insert in edits:
        at %= len(text) + 1
        text = text[:at] + insert + text[at + cut :]
    check(text.encode("utf-8", "surrogatepass"))


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
    | st.dates(min_value=datetime.date(1, 1, 1))
    | st.datetimes(timezones=st.none() | st.just(datetime.UTC))
    | st.binary(max_size=4)
)
yaml_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.one_of(st.text(max_size=4), st.integers(), st.none()), inner, max_size=3
        )
        | st.frozensets(st.text(max_size=3), max_size=2).map(set)
    ),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.extend(_paths(item, (*prefix, i)))
    return out


DOCS = [make_policy(), make_job()]
PATHS = [(d, *p) for d, doc in enumerate(DOCS) for p in _paths(doc) if p]


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(PATHS), yaml_values), min_size=1, max_size=3))
def test_valid_submissions_with_arbitrary_values(changes: list[tuple[Any, Any]]) -> None:
    docs = json.loads(json.dumps(DOCS))
    for (doc, *path), value in changes:
        target = docs[doc]
        try:
            for part in path[:-1]:
                target = target[part]
            target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change replaced a parent
    check(yaml.safe_dump_all(docs).encode())


@SETTINGS
@given(
    small_limits,
    st.sampled_from(
        [
            valid_text(),
            valid_text() + "---\na: &a [1, 2, 3, 4, 5, 6, 7, 8, 9]\nb: [*a, *a, *a]\n",
            "[" * 30 + "]" * 30,
            "---\n" * 8,
        ]
    ),
)
def test_small_limits(limits: SubmissionLimits, text: str) -> None:
    check(text.encode(), limits)


def test_the_valid_text_is_accepted() -> None:
    out = parse_submission(
        valid_text().encode(),
        tree=tree(),
        clusters=clusters(),
        first_seq=1,
        limits=SubmissionLimits(),
    )
    assert len(out) == 2


FREE_FORM = [
    ("status",),
    ("spec", "runPolicy", "cleanPodPolicy"),
    ("spec", "pytorchReplicaSpecs", "Worker", "restartPolicy"),
    ("spec", "pytorchReplicaSpecs", "Worker", "template", "metadata"),
    ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers", 0, "args"),
    ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers", 0, "env"),
]


@SETTINGS
@given(st.lists(st.tuples(st.sampled_from(FREE_FORM), yaml_values), min_size=1, max_size=3))
def test_free_form_fields_hold_any_yaml_value(changes: list[tuple[Any, Any]]) -> None:
    policy, job = make_policy(), make_job()
    for path, value in changes:
        target = job
        for part in path[:-1]:
            target = target.setdefault(part, {}) if isinstance(part, str) else target[part]
        target[path[-1]] = value
    check(yaml.safe_dump_all([policy, job]).encode())
