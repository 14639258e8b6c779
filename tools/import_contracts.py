"""An import-linter contract type: a package imports only what an allow list names.

Theory of operation: import-linter's ``forbidden`` contract refuses the modules
it names, so a library nobody thought to name passes.  An ``allowed_imports``
contract turns that around: every module of the source packages may import
its own package and the allowed modules (each with its submodules; an
external one is named by its top-level name, ``collections`` allows
``collections.abc``), and any other import, of a library or of another package
of the project, breaks it.  Only direct imports are checked: an allowed module
that imports something else is that module's business (and, inside the source
packages, is checked itself).  It is registered in ``pyproject.toml``
(``contract_types``) and run by ``lint-imports`` from the project root.
"""

from __future__ import annotations

from typing import TypedDict, cast

import grimp
from importlinter import Contract, ContractCheck, fields, output
from importlinter.domain.imports import Module


class IllegalImport(TypedDict):
    """One import outside the allow list, with the lines that make it."""

    importer: str
    imported: str
    line_numbers: list[int]


def _within(module: str, allowed: list[str]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in allowed)


class AllowedImportsContract(Contract):
    """``source_modules`` (packages) import nothing but themselves and ``allowed_modules``."""

    type_name = "allowed_imports"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed_modules = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        sources = [module.name for module in cast(list[Module], self.source_modules)]
        allowed = sources + [module.name for module in cast(list[Module], self.allowed_modules)]
        illegal: list[IllegalImport] = []
        for source in sources:
            if source not in graph.modules:
                raise ValueError(f"Module '{source}' does not exist.")
            for importer in sorted({source} | graph.find_descendants(source)):
                output.verbose_print(verbose, f"Checking the imports of {importer}...")
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    if _within(imported, allowed):
                        continue
                    details = graph.get_import_details(importer=importer, imported=imported)
                    illegal.append(
                        IllegalImport(
                            importer=importer,
                            imported=imported,
                            line_numbers=sorted(d["line_number"] for d in details),
                        )
                    )
        return ContractCheck(kept=not illegal, metadata={"illegal": illegal})

    def render_broken_contract(self, check: ContractCheck) -> None:
        illegal = cast(list[IllegalImport], check.metadata["illegal"])
        for item in illegal:
            lines = ", ".join(f"l.{n}" for n in item["line_numbers"])
            output.print_error(
                f"{item['importer']} is not allowed to import {item['imported']} ({lines})",
                bold=False,
            )
        output.new_line()
        output.print_error(
            "Allowed: the package itself and "
            + ", ".join(module.name for module in cast(list[Module], self.allowed_modules)),
            bold=False,
        )
        output.new_line()
