"""Kubernetes names, matched whole: the one check of every name and namespace Fleet reads.

Theory of operation: Kubernetes has two name syntaxes that matter here.  An
object name (a job, a policy, a quota node, a member cluster) is a DNS-1123
subdomain: at most 253 characters, lowercase letters, digits, ``-`` and ``.``,
starting and ending with a letter or digit.  A namespace is a DNS-1123 label:
at most 63 characters, lowercase letters, digits and ``-``, the same ends.
:func:`name_problem` says why a value is not one (or None).  The pattern must
match the whole text (``re.fullmatch``): with ``re.match`` and ``$``, which
also matches before a final newline, ``"team-a\\n"`` would pass and be stored,
and a namespace that only looks like ``team-a`` is another namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class NameRule:
    """One name syntax: what it names, its pattern (matched whole), its length and its words."""

    what: str
    pattern: re.Pattern[str]
    max_length: int
    characters: str


_LABEL: Final = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"

#: An object name: a DNS-1123 subdomain.
OBJECT_NAME: Final = NameRule(
    "name", re.compile(rf"{_LABEL}(?:\.{_LABEL})*"), 253, "lowercase letters, digits, '-' and '.'"
)
#: A namespace: a DNS-1123 label.
NAMESPACE: Final = NameRule(
    "namespace", re.compile(_LABEL), 63, "lowercase letters, digits and '-'"
)


def name_problem(value: str, rule: NameRule, shown: str) -> str | None:
    """Why ``value`` (quoted as ``shown``) is not a name of ``rule``, or None if it is one."""
    if len(value) <= rule.max_length and rule.pattern.fullmatch(value) is not None:
        return None
    return (
        f"{shown} is not a valid {rule.what}: {rule.characters}, "
        f"starting and ending with a letter or digit, at most {rule.max_length} characters"
    )
