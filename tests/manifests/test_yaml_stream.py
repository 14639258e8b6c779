"""The bounded YAML reader: same data as PyYAML, and a refusal past each bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.manifests import documents, yaml_stream
from fleet.manifests.yaml_stream import YamlLimitError, YamlLimits, read_documents

POLICIES = Path(__file__).resolve().parents[2] / "policies"
LOADERS = sorted({yaml.SafeLoader, documents.safe_loader()}, key=lambda c: c.__name__)


def billion_laughs(levels: int = 9, width: int = 10) -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def read(text: str, loader: Any = None, **limits: Any) -> list[object]:
    return list(read_documents(text, loader or documents.YAML_LOADER, YamlLimits(**limits)))


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("path", sorted(POLICIES.rglob("*.yaml")), ids=lambda p: p.name)
def test_the_examples_read_as_pyyaml_reads_them(path: Path, loader: Any) -> None:
    text = path.read_text(encoding="utf-8")
    assert read(text, loader) == list(yaml.load_all(text, Loader=loader))


SAMPLES = [
    "a: 1\n---\n- x\n- &a {b: [1, 2]}\n- *a\n",
    "",
    "---\n---\n",
    "<<: {a: 1}\nb: 2\n",
    "base: &b {x: 1}\nderived: {<<: *b, y: 2}\n",
    "a: 2020-01-01\nb: !!binary aGVsbG8=\nc: !!set {a, b}\nd: !!omap [a: 1]\n",
    "- &s x\n- *s\n- !!str 3\n- ! 4\n- '5'\n- 0x10\n- .nan\n- ~\n",
    "? a\n? b\n",
    "%YAML 1.1\n---\nkey: value\n...\n",
    # no anchor: the quick path reads these
    "a: 0x10\nb: 1_000\nc: .inf\nd: yes\ne: ~\nf: 1.5e3\ng: '5'\nh: !!str 3\ni: 0o17\n",
    "- [1, {b: false, 2: null}]\n- !!binary aGVsbG8=\n- 2020-01-01\n- !!set {a}\n",
    "<<: {a: 1}\nb: 2\n",
]


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("text", SAMPLES)
def test_samples_read_as_pyyaml_reads_them(text: str, loader: Any) -> None:
    got = read(text, loader)
    want = list(yaml.load_all(text, Loader=loader))
    assert repr(got) == repr(want)  # repr: NaN is not equal to itself


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(json_like, max_size=3), st.booleans())
def test_any_plain_data_reads_back(data: list[object], flow: bool) -> None:
    text = yaml.safe_dump_all(data, default_flow_style=flow)
    assert read(text) == data


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
def test_a_billion_laughs_is_refused_before_it_is_expanded(loader: Any) -> None:
    with pytest.raises(YamlLimitError) as info:
        read(billion_laughs(), loader)
    assert "aliases expand to more than 100,000 nodes" in str(info.value)
    assert str(info.value).startswith("line 5, column ")  # in a4: *a3 passes the bound
    assert info.value.document == 0


def test_aliases_are_counted_with_what_they_stand_for() -> None:
    text = billion_laughs(levels=2, width=10)  # *a0 stands for 11 nodes, *a1 for 111
    assert read(text, max_alias_nodes=10 * 11 + 10 * 111)
    with pytest.raises(YamlLimitError):
        read(text, max_alias_nodes=10 * 11 + 10 * 111 - 1)
    assert read(billion_laughs(), max_alias_nodes=None)[0]  # unbounded, shared nodes


def test_the_alias_budget_is_shared_by_the_documents_of_a_stream() -> None:
    doc = "a: &a [1, 2, 3, 4]\nb: [*a, *a]\n"  # each alias stands for 5 nodes
    assert len(read("---\n".join([doc] * 10), max_alias_nodes=100)) == 10
    with pytest.raises(YamlLimitError) as info:
        read("---\n".join([doc] * 11), max_alias_nodes=100)
    assert info.value.document == 10


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("text", ["&a [*a]", "a: &m {self: *m}", "- &x [1, [2, *x]]"])
def test_a_recursive_alias_is_refused(text: str, loader: Any) -> None:
    with pytest.raises(YamlLimitError) as info:
        read(text, loader)
    assert "is inside the node it refers to" in str(info.value)


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
def test_deep_nesting_is_refused_before_any_recursion(loader: Any) -> None:
    depth = 200_000  # libyaml's own composer overflows the C stack on this
    with pytest.raises(YamlLimitError) as info:
        read("[" * depth + "]" * depth, loader)
    # Column 101 where the composer passes the bound; libyaml 0.2.6 on reads
    # ahead and refuses at its own bound of 1,000 first (column 1001).
    assert info.value.message == "lists and mappings nest more than 100 levels deep"
    assert info.value.where in ("line 1, column 101: ", "line 1, column 1001: ")
    assert info.value.document == 0


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("depth", [None, 5000])
def test_nesting_past_the_parsers_own_bound_is_a_limit_error(
    loader: Any, depth: int | None
) -> None:
    text = "a: 1\n---\n" + "[" * 3000 + "]" * 3000
    try:
        found = read(text, loader, max_depth=depth)
    except YamlLimitError as e:  # libyaml 0.2.6 on: its own bound, said as ours
        assert e.document == 1
        assert e.message == (
            "lists and mappings nest more than 1,000 (the YAML parser's own limit) levels deep"
        )
    else:  # a parser without a bound of its own builds it
        assert found[0] == {"a": 1} and len(found) == 2


def test_the_nesting_bound_is_exact() -> None:
    assert read("[" * 100 + "]" * 100) == [eval("[" * 100 + "]" * 100)]
    with pytest.raises(YamlLimitError):
        read("[" * 101 + "]" * 101)
    assert read("a:\n  b:\n    c: 1\n", max_depth=3) == [{"a": {"b": {"c": 1}}}]
    with pytest.raises(YamlLimitError):
        read("a:\n  b:\n    c: [1]\n", max_depth=3)


def test_the_document_count_is_bounded_when_asked() -> None:
    assert len(read("---\na: 1\n" * 3, max_documents=3)) == 3
    with pytest.raises(YamlLimitError) as info:
        read("---\na: 1\n" * 4, max_documents=3)
    assert info.value.document == 3
    assert "more than 3 documents in one stream" in str(info.value)


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("k: *b", "found undefined alias 'b'"),
        ("a: &x 1\nb: &x 2", "found duplicate anchor 'x'"),
        ("a: [b, {c: d}]: e", "mapping values are not allowed"),
    ],
)
def test_composer_and_syntax_errors_are_pyyaml_errors(text: str, message: str, loader: Any) -> None:
    with pytest.raises(yaml.YAMLError, match=message):
        read(text, loader)


def test_parse_documents_reports_a_passed_bound_as_an_issue_and_stops() -> None:
    job = "apiVersion: kubeflow.org/v1\nkind: PyTorchJob\nmetadata: {name: x}\n"
    docs, issues = documents.parse_documents(job + "---\n" + billion_laughs())
    assert docs == []  # the first document has no spec: an issue, not a document
    (bomb,) = [i for i in issues if i.document == 1]
    assert bomb.kind == "" and bomb.path == ""
    assert bomb.message.startswith("line 9, column ")
    assert "aliases expand to more than 100,000 nodes" in bomb.message


def test_parse_documents_takes_the_limits() -> None:
    docs, issues = documents.parse_documents("a: 1\n---\nb: 2\n", YamlLimits(max_documents=1))
    assert docs == []
    assert [(i.document, i.path) for i in issues] == [(0, "kind"), (1, "")]
    assert issues[1].message == (
        "line 2, column 1: more than 1 document in one stream; the limit is 1"
    )


YAML_TOKENS = [
    *"ab:-[]{}&*!|>'\"#,?\n 01.~",
    "\n  ",
    "\n- ",
    "---\n",
    "...\n",
    "&a ",
    "&b ",
    "*a",
    "*b",
    "<<: ",
    "!!str ",
    "!!int ",
    "!!float ",
    "!!binary ",
    "!!set ",
    ".nan",
    "2020-01-01",
    "%YAML 1.1\n",
]


def _outcome(load: Any) -> tuple[str, str]:
    try:
        return "ok", repr(list(load()))
    except yaml.YAMLError:
        return "yaml-error", ""
    except (ValueError, ArithmeticError, LookupError, TypeError):
        return "value-error", ""


@pytest.mark.parametrize("loader", LOADERS, ids=lambda c: c.__name__)
@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(YAML_TOKENS), max_size=60).map("".join))
def test_the_reader_agrees_with_pyyaml_on_yaml_ish_text(loader: Any, text: str) -> None:
    theirs = _outcome(lambda: yaml.load_all(text, Loader=loader))
    try:
        mine = _outcome(lambda: read_documents(text, loader))
    except YamlLimitError as e:  # only for what PyYAML builds as a recursive structure
        assert "inside the node it refers to" in str(e) and theirs[0] == "ok", text
        return
    if theirs[0] == "value-error":  # PyYAML's IndexError and the like are ValueErrors here
        assert mine[0] == "value-error", text
    else:
        assert mine == theirs, text


def read_bounded_only(text: str, monkeypatch: pytest.MonkeyPatch, **limits: Any) -> list[object]:
    with monkeypatch.context() as patched:
        patched.setattr(yaml_stream, "_QUICK_NESTING", -1)  # every stream takes the bounded path
        return read(text, **limits)


@settings(max_examples=150, deadline=None)
@given(st.lists(json_like, max_size=3), st.booleans())
def test_the_quick_path_reads_what_the_bounded_path_reads(data: list[object], flow: bool) -> None:
    text = yaml.safe_dump_all(data, default_flow_style=flow)
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert read(text) == read_bounded_only(text, monkeypatch) == data


@pytest.mark.parametrize(
    ("text", "limits", "message"),
    [
        ("a:\n  b:\n    c: [1]\n", {"max_depth": 2}, "line 3, column 5: lists and mappings nest"),
        ("a: 1\n---\nb: 2\n---\nc: 3\n", {"max_documents": 2}, "line 4, column 1: more than 2"),
        ("a: [1, 2\n", {}, "while parsing a flow sequence"),
        ("a: !!float ''\n", {}, "a malformed value"),
    ],
)
def test_a_stream_the_quick_path_refuses_fails_as_on_the_bounded_path(
    text: str, limits: dict[str, int], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    errors = (YamlLimitError, yaml.YAMLError, ValueError)
    with pytest.raises(errors) as quick:
        read(text, **limits)
    with pytest.raises(errors) as bounded:
        read_bounded_only(text, monkeypatch, **limits)
    assert message in str(quick.value)
    assert (type(quick.value), str(quick.value)) == (type(bounded.value), str(bounded.value))


def test_deep_nesting_without_aliases_is_refused_at_its_place() -> None:
    text = "a: " + "[" * 150 + "]" * 150 + "\n"
    with pytest.raises(YamlLimitError, match=r"^line 1, column 103: lists and mappings nest"):
        read(text)
