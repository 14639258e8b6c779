"""The YAML loader: libyaml's C safe loader when PyYAML has it, else the Python one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fleet.manifests import documents
from fleet.manifests.yaml_resolver import cached_resolver
from tests.manifests.factories import dump, make_job, make_policy

POLICIES = Path(__file__).resolve().parents[2] / "policies"


def test_the_c_loader_is_chosen_when_pyyaml_was_built_with_libyaml() -> None:
    if yaml.__with_libyaml__:
        assert documents.safe_loader() is cached_resolver(yaml.CSafeLoader)
        assert documents.YAML_LOADER is documents.safe_loader()
        assert issubclass(documents.YAML_LOADER, yaml.CSafeLoader)
    else:
        assert documents.YAML_LOADER is cached_resolver(yaml.SafeLoader)


def test_the_python_safe_loader_is_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert documents.safe_loader() is cached_resolver(yaml.SafeLoader)
    assert issubclass(documents.safe_loader(), yaml.SafeLoader)


def test_documents_are_read_with_the_chosen_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    streams: list[object] = []

    class Recording(documents.YAML_LOADER):
        def __init__(self, stream: str) -> None:
            streams.append(stream)
            super().__init__(stream)

    monkeypatch.setattr(documents, "YAML_LOADER", Recording)
    text = dump(make_policy(), make_job())
    docs, issues = documents.parse_documents(text)
    assert streams == [text]
    assert [d.kind for d in docs] == ["PropagationPolicy", "PyTorchJob"] and issues == []


@pytest.mark.parametrize("path", sorted(POLICIES.rglob("*.yaml")), ids=lambda p: p.name)
def test_both_loaders_read_the_examples_alike(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = path.read_text(encoding="utf-8")
    read = []
    for loader in {yaml.SafeLoader, documents.safe_loader()}:
        monkeypatch.setattr(documents, "YAML_LOADER", loader)
        docs, issues = documents.parse_documents(text)
        read.append(([(d.index, d.kind, d.name, d.model) for d in docs], issues))
    assert all(r == read[0] for r in read)
