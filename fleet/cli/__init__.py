"""The ``fleet`` command line (:mod:`fleet.cli.main`); ``plan`` lives in :mod:`fleet.cli.plan`."""
