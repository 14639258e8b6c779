"""The pure scheduling core: quantities, the quota tree, jobs, the cycle, the placers.

Theory of operation: values in, decisions out.  The core imports nothing but
itself and a short list of pure standard-library modules (no clock, no
randomness, no files, sockets, threads or processes, no YAML or pydantic) and
no other ``fleet`` package; ``make lint`` checks this (see ``[tool.importlinter]``).
"""
