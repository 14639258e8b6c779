"""Fleet's YAML objects: parsing, validation with field paths, conversion to core values.

Theory of operation: the shell side of the object model.  ``documents`` reads
multi-document YAML into pydantic ``models``; ``convert`` turns them into the
core's quota tree and jobs, refusing a whole file with one ``SpecError`` (every
issue, each with its document index and field path) when anything is wrong.
The core never imports this package.  This file only documents the package:
import each name from the module that defines it.
"""
