"""The error for a job key the scheduler does not hold.

It lives in a module of its own because it subclasses :class:`KeyError`, which
a compiled class may not (``scripts/compile-core`` leaves this module
interpreted; :mod:`fleet.compiled_core`).
"""


class UnknownJob(KeyError):
    """A job key the scheduler does not hold in the state the caller expects."""
