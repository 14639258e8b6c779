"""The compiled scheduling core: used only when it was built from the sources as they are.

Theory of operation: ``scripts/compile-core`` (``make install`` runs it)
compiles the modules of :mod:`fleet.core` with mypyc, the compiler that
ships with mypy, into C extensions under ``build/core/`` of the source tree,
with a ``STAMP``: a digest of every ``fleet/core`` source and of the
interpreter they were built for.  ``import fleet`` calls :func:`install`,
which compares that stamp with the sources as they are now; when they match,
it puts a finder in front of ``sys.meta_path`` that loads the compiled
modules, and every other module (and every module when the build is missing
or stale) loads from its source as usual.  So an edited core is never run
from an old build: it runs interpreted until it is compiled again.

The compiled and the interpreted core are the same code and make the same
decisions; the compiled one is about twice as fast (ADR 0034).  The
``FLEET_CORE`` environment variable chooses:

* ``auto`` (the default): compiled when the build is current, else interpreted;
* ``interpreted``: always interpreted;
* ``compiled``: compiled, or :class:`CompiledCoreError` at ``import fleet``
  when the build is missing or stale (CI runs the tests so).

Modules left interpreted (:data:`INTERPRETED`): package ``__init__`` files
and the error that subclasses :class:`KeyError` (a compiled class may not).
"""

from __future__ import annotations

import copyreg
import dataclasses
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

#: the project's source tree (the parent of the ``fleet`` package)
ROOT = Path(__file__).resolve().parent.parent
#: where ``scripts/compile-core`` puts the compiled modules, relative to the root
BUILD = Path("build") / "core"
#: core modules that stay interpreted (see the module docstring)
INTERPRETED = frozenset({"fleet/core/unknown_job.py"})
#: the environment variable that chooses the core
ENV = "FLEET_CORE"
CHOICES = ("auto", "interpreted", "compiled")


class CompiledCoreError(RuntimeError):
    """``FLEET_CORE=compiled`` and the compiled core is missing or stale."""


def core_sources(root: Path) -> list[Path]:
    """Every source of ``fleet/core`` under ``root``, in path order."""
    return sorted((root / "fleet" / "core").rglob("*.py"))


def compiled_sources(root: Path) -> list[Path]:
    """The sources ``scripts/compile-core`` compiles: not ``__init__`` files, not
    :data:`INTERPRETED`."""
    return [
        p
        for p in core_sources(root)
        if p.name != "__init__.py" and p.relative_to(root).as_posix() not in INTERPRETED
    ]


def stamp(root: Path) -> str:
    """A digest of every core source under ``root`` and of this interpreter's ABI."""
    digest = hashlib.sha256()
    digest.update(f"{sys.implementation.cache_tag} {sys.platform}\n".encode())
    for path in core_sources(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def _modules(build: Path) -> dict[str, Path]:
    """Module name -> compiled file, for every extension under ``build``."""
    out: dict[str, Path] = {}
    suffixes = importlib.machinery.EXTENSION_SUFFIXES  # the most specific first
    for path in sorted(build.rglob("*")):
        rel = path.relative_to(build).as_posix()
        suffix = next((s for s in suffixes if rel.endswith(s)), None)
        if suffix is not None:
            out.setdefault(rel[: -len(suffix)].replace("/", "."), path)
    return out


def _rebuild(cls: type[object], state: dict[str, object]) -> object:
    """A frozen dataclass instance from its fields (the unpickling half of :func:`_reduce`)."""
    obj = cls.__new__(cls)
    for name, value in state.items():
        object.__setattr__(obj, name, value)
    return obj


def _reduce(obj: object) -> tuple[Callable[..., object], tuple[object, ...]]:
    """Pickle a compiled frozen dataclass by its fields: the compiled class's own
    unpickling sets them through ``__setattr__``, which a frozen class refuses."""
    cls = type(obj)
    state = {f.name: getattr(obj, f.name) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return (_rebuild, (cls, state))


#: the compiled modules whose frozen dataclasses :func:`picklable` registered
_REGISTERED: set[str] = set()
_SEEN = [0]  # len(sys.modules) at the last look


def picklable() -> None:
    """Make the frozen dataclasses of every compiled module loaded so far picklable.

    A compiled class unpickles by setting its fields through ``__setattr__``,
    which a frozen dataclass refuses; :func:`_reduce` pickles them by their
    fields instead.  Call before pickling core values (:mod:`fleet.service.workers`
    does, on both sides): the classes of the values are loaded by then.
    """
    if len(sys.modules) == _SEEN[0]:
        return
    _SEEN[0] = len(sys.modules)
    for name, module in list(sys.modules.items()):
        if name in _REGISTERED or not name.startswith("fleet.core."):
            continue
        if module is None or (module.__file__ or "").endswith(".py"):
            continue
        _REGISTERED.add(name)
        for value in list(vars(module).values()):
            params = getattr(value, "__dataclass_params__", None)
            if (
                isinstance(value, type)
                and value.__module__ == name
                and params is not None
                and params.frozen
                and "__reduce__" not in vars(value)  # it says how itself
            ):
                copyreg.pickle(value, _reduce)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules of a current build; declines every other module."""

    def __init__(self, modules: dict[str, Path]):
        self.modules = modules

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        found = self.modules.get(fullname)
        if found is None:
            return None
        return importlib.util.spec_from_file_location(fullname, found)


def current_build(root: Path) -> dict[str, Path] | None:
    """The compiled modules under ``root`` when their stamp matches the sources, else None."""
    build = root / BUILD
    try:
        built = (build / "STAMP").read_text(encoding="ascii").strip()
    except OSError:
        return None
    if built != stamp(root):
        return None
    modules = _modules(build)
    return modules or None


def install(root: Path = ROOT, choice: str | None = None) -> bool:
    """Load the core compiled when ``FLEET_CORE`` (or ``choice``) allows and the build is
    current; returns whether it will be.  Call before anything imports ``fleet.core``."""
    choice = choice if choice is not None else os.environ.get(ENV, "auto") or "auto"
    if choice not in CHOICES:
        raise CompiledCoreError(f"{ENV}={choice!r}: expected one of {', '.join(CHOICES)}")
    if choice == "interpreted":
        return False
    modules = current_build(root)
    if modules is None:
        if choice == "compiled":
            raise CompiledCoreError(
                f"{ENV}=compiled, but {root / BUILD} is missing or was built from other "
                "sources: run scripts/compile-core"
            )
        return False
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(modules))
    return True


def describe() -> str:
    """One line for benchmarks: which core runs, and how to get the other."""
    if active():
        return f"core: compiled (mypyc, {ROOT / BUILD}); {ENV}=interpreted runs the sources"
    return (
        f"core: interpreted ({ENV}={os.environ.get(ENV, 'auto') or 'auto'}); "
        "scripts/compile-core builds the compiled one"
    )


def active() -> bool:
    """Whether the core in use is the compiled one."""
    module = sys.modules.get("fleet.core.cycle")
    if module is None:
        return any(isinstance(f, _Finder) for f in sys.meta_path)
    return not (module.__file__ or "").endswith(".py")
