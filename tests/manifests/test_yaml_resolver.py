"""The loader whose plain scalars are resolved once per text: PyYAML's tags, exactly."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from fleet.manifests import yaml_resolver
from fleet.manifests.yaml_resolver import cached_resolver

BASES = sorted({yaml.SafeLoader, getattr(yaml, "CSafeLoader", yaml.SafeLoader)}, key=str)
#: Characters that steer PyYAML's implicit resolvers (numbers, booleans, nulls,
#: timestamps, merge keys, values) and some that do not.
ALPHABET = "0123456789+-._:eExXoObBnNyYtTfFlLuUrRsS~=<ZTaA ,"


def tag(loader_class: Any, text: str) -> str:
    loader = loader_class("")
    try:
        return str(loader.resolve(ScalarNode, text, (True, False)))
    finally:
        loader.dispose()


@pytest.mark.parametrize("base", BASES, ids=lambda c: c.__name__)
@settings(max_examples=300, deadline=None)
@given(texts=st.lists(st.text(ALPHABET, max_size=12), min_size=1, max_size=20))
def test_plain_scalars_resolve_to_pyyamls_tags_first_time_and_again(
    base: Any, texts: list[str]
) -> None:
    cached = cached_resolver(base)
    for text in [*texts, *texts]:  # the second time from the table
        assert tag(cached, text) == tag(base, text), text


@pytest.mark.parametrize("base", BASES, ids=lambda c: c.__name__)
def test_documents_load_the_same_data(base: Any) -> None:
    text = (
        "a: [1, 0x1f, 0o17, 1.5e3, .inf, -.nan, ~, null, yes, No, on, 2001-12-14, '1', \"yes\"]\n"
        "b: {<<: {c: 1}, d: !!str 12, e: 1_000, f: 12:30:00, g: ''}\n"
    )
    cached = cached_resolver(base)
    for _ in range(2):
        got, want = yaml.load(text, Loader=cached), yaml.load(text, Loader=base)
        assert repr(got) == repr(want)  # nan != nan: compare the spelling


def test_the_table_is_bounded_and_long_texts_are_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    class Fresh(yaml.SafeLoader):  # a class of its own: a table of its own
        pass

    monkeypatch.setattr(yaml_resolver, "MAX_REMEMBERED", 3)
    cached = cached_resolver(Fresh)
    table = cached.resolve.__closure__  # the shared table, seen through the function
    assert table is not None
    (found,) = [c.cell_contents for c in table if isinstance(c.cell_contents, dict)]
    for text in ("a", "b", "c"):
        tag(cached, text)
    assert sorted(found) == ["a", "b", "c"]
    assert tag(cached, "12") == "tag:yaml.org,2002:int"
    assert sorted(found) == ["12"]  # full: emptied, then the new text kept
    tag(cached, "x" * (yaml_resolver.MAX_TEXT + 1))
    assert sorted(found) == ["12"]


def test_collections_and_quoted_scalars_take_pyyamls_path() -> None:
    cached = cached_resolver(yaml.SafeLoader)
    loader = cached("")
    try:
        assert loader.resolve(ScalarNode, "12", (False, True)) == "tag:yaml.org,2002:str"
        assert loader.resolve(SequenceNode, None, (True, False)) == "tag:yaml.org,2002:seq"
        assert loader.resolve(MappingNode, None, (True, False)) == "tag:yaml.org,2002:map"
    finally:
        loader.dispose()


def test_a_loader_with_path_resolvers_is_left_as_it_is() -> None:
    class Pathed(yaml.SafeLoader):
        pass

    Pathed.add_path_resolver("tag:yaml.org,2002:str", ["a"], ScalarNode)
    assert cached_resolver(Pathed) is Pathed


def test_path_resolvers_added_later_are_honoured() -> None:
    class Later(yaml.SafeLoader):
        pass

    cached = cached_resolver(Later)
    assert yaml.load("a: abc\n", Loader=cached) == {"a": "abc"}  # "abc" now in the table
    Later.add_path_resolver("tag:yaml.org,2002:null", ["a"], ScalarNode)
    assert yaml.load("a: abc\n", Loader=Later) == {"a": None}
    assert yaml.load("a: abc\n", Loader=cached) == {"a": None}
