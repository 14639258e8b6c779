"""Project tooling that is not part of the ``fleet`` package (lint-time checks)."""
