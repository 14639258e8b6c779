"""Builders for the test suite and the benchmarks: one copy of each, used by both.

Theory of operation: what a test and a benchmark both need to build lives here,
once: YAML documents (:mod:`fleet.testing.documents`), cell configs and cell
placers (:mod:`fleet.testing.cells`), a service on a virtual clock
(:mod:`fleet.testing.running`: settings, submissions, ``running_service``),
``fleet serve`` as a real process (:mod:`fleet.testing.servers`), bearer
tokens (:mod:`fleet.testing.tokens`) and the schemathesis driver
(:mod:`fleet.testing.fuzz`).  It is the top layer beside the CLI: it may
import any fleet package, and production code never imports it (a contract
in ``pyproject.toml`` says so).  Some of its modules import test-only
libraries (hypothesis and schemathesis: the ``dev`` extra).  This file
only documents the package: import each name from the module that defines it.
"""
