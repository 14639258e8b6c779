"""Dataclasses of the core that write their own ``__init__`` keep the dataclass's contract.

Theory of operation: mypyc compiles an ``__init__`` written in the class (about
20 ns a call) but leaves the one ``@dataclass`` generates interpreted (about
440 ns), so the value classes made on the cycle's hot path (decisions,
charges, placements, quota blocks, ...) write theirs (ADR 0034).  Such an
``__init__`` must be the generated one: the same parameters in field order
(``dataclasses.replace`` and keyword calls rely on the names), the same
defaults (``None`` standing for a ``default_factory``), and every field set
from its parameter.  This test reads the core's sources and checks each one;
forgetting a field, reordering parameters or changing a default fails it.
Behaviour (equality, hashing, frozen) stays the dataclass's and is covered
by the tests of each class.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "fleet" / "core"


def _is_dataclass(node: ast.ClassDef) -> bool:
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Name) and target.id == "dataclass":
            return True
    return False


#: every dataclass of the core by name (a subclass's fields follow its base's)
DATACLASSES: dict[str, ast.ClassDef] = {}


def _classes() -> list[tuple[str, ast.ClassDef, ast.FunctionDef]]:
    found = []
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef) or not _is_dataclass(node):
                continue
            DATACLASSES[node.name] = node
            init = next(
                (f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"),
                None,
            )
            if init is not None:
                found.append((f"{path.relative_to(CORE)}:{node.name}", node, init))
    return found


def _fields(cls: ast.ClassDef) -> list[ast.AnnAssign]:
    inherited = [
        field
        for base in cls.bases
        if isinstance(base, ast.Name) and base.id in DATACLASSES
        for field in _fields(DATACLASSES[base.id])
    ]
    return inherited + [
        node
        for node in cls.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and "ClassVar" not in ast.unparse(node.annotation)
    ]


CLASSES = _classes()


def test_the_hot_value_classes_write_their_own_init() -> None:
    names = {name.split(":")[1] for name, _, _ in CLASSES}
    assert {
        "Admit",
        "Wait",
        "Charge",
        "Fit",
        "CellFit",
        "QuotaBlock",
        "Transition",
        "ParkedTail",
    } <= names


@pytest.mark.parametrize(("name", "cls", "init"), CLASSES, ids=[c[0] for c in CLASSES])
def test_an_own_init_is_the_dataclass_init(
    name: str, cls: ast.ClassDef, init: ast.FunctionDef
) -> None:
    fields = _fields(cls)
    params = init.args.args[1:]
    assert [p.arg for p in params] == [f.target.id for f in fields]  # type: ignore[union-attr]
    assert not init.args.kwonlyargs and init.args.vararg is None and init.args.kwarg is None
    defaults: list[ast.expr | None] = [None] * (len(params) - len(init.args.defaults))
    defaults += init.args.defaults
    for field, param, default in zip(fields, params, defaults, strict=True):
        assert ast.unparse(field.annotation) in ast.unparse(param.annotation or field.annotation)
        if field.value is None:
            assert default is None, f"{param.arg} has a default the field has not"
        elif isinstance(field.value, ast.Call) and ast.unparse(field.value.func) == "field":
            assert default is not None and ast.unparse(default) == "None", param.arg
        else:
            assert default is not None and ast.unparse(default) == ast.unparse(field.value)
    body = ast.unparse(init)
    for param in params:
        arg = param.arg
        assert (
            f"object.__setattr__(self, '{arg}', {arg})" in body
            or f"self.{arg} = {arg}" in body
            or f"self.{arg} = [] if {arg} is None else {arg}" in body
            or f"self.{arg} = {{}} if {arg} is None else {arg}" in body
            or f"object.__setattr__(self, '{arg}', {{}} if {arg} is None else {arg})" in body
        ), f"{name}: field {arg} is not set from its parameter"
