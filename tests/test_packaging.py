"""The package's build configuration: ``make install`` prints no setuptools banner."""

from __future__ import annotations

import tomllib

from tests.paths import ROOT


def test_the_flat_layout_is_declared_so_an_editable_install_is_quiet() -> None:
    # Without package-dir {"" = "."}, setuptools installs a meta path finder for
    # `pip install -e .` and warns with an "Editable installation" banner that pip
    # shows even with -q; with it, a plain .pth file names the project directory.
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"": "."}
    assert setuptools["packages"]["find"]["include"] == ["fleet*"]
