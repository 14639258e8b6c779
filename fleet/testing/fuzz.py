"""Drive schemathesis over every operation of a running Fleet's OpenAPI document.

:func:`fuzz` loads the document a server publishes, and for each operation
lets hypothesis draw requests from schemathesis' strategies (schema-valid
data, and data that breaks the schema), sends each with the given headers and runs schemathesis'
checks on the answer: no 5xx, a documented status, a documented media type,
a body that matches its schema.  A third round per operation that has query
parameters (``numbers``) sends schema-valid requests with one query
parameter replaced by text that only looks like a number to a lenient reader:
each of :data:`EVERY_PARAMETER` (``²``, ``١٢``, 5,000 digits) in every query
parameter once, then ``examples`` drawn from :data:`NUMBER_LIKE` (Unicode
digits, long numbers, signs, exponents, spaces, newlines), which the
schema-driven strategies would rarely send.  It returns how many cases it sent and the
failures (operation and message), first failure per operation only, so one
broken route does not hide the others.  Used by the test suite (a modest
number of examples, ``tests/fuzz/test_schemathesis.py``) and by
``bench/bench_fuzz.py`` (a larger run); :func:`fleet.testing.servers.serving`
starts the server both run it against.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import checks
from schemathesis.core.result import Err

#: A case of any operation.
AnyCase = schemathesis.Case[Any]

#: What every answer must satisfy.  Not ``positive_data_acceptance``: a YAML
#: body is documented as a string, so most schema-valid bodies are rightly 422;
#: not ``negative_data_rejection``: unknown query parameters are ignored, as
#: Kubernetes' API server ignores them.
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]


#: Texts that ``str.isdigit()``, ``int()`` or a lax pattern may take for a number.
NUMBER_LIKE = st.one_of(
    st.sampled_from(["²", "١٢", "１", "𝟗", "9" * 5_000, "1" * 19]),
    st.sampled_from(["-1", "0", "1e3", " 1", "1\n", "+1", "1_0", ""]),
    st.text(st.characters(categories=["Nd", "No"]), min_size=1, max_size=30),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
)
NUMBERS = "numbers"
#: Sent in every query parameter of every operation, whatever else is drawn.
EVERY_PARAMETER = ("²", "١٢", "9" * 5_000)


@dataclass
class FuzzResult:
    cases: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    per_operation: dict[str, int] = field(default_factory=dict)


def _run(
    strategy: st.SearchStrategy[AnyCase],
    examples: int,
    base_url: str,
    headers: dict[str, str],
) -> tuple[int, str | None]:
    """Send up to ``examples`` cases drawn from ``strategy``: how many, and the failure if any."""
    count = 0

    @given(case=strategy)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    def run(case: AnyCase) -> None:
        nonlocal count
        count += 1
        case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS)

    try:
        run()
    except Unsatisfiable:
        pass
    except (Exception, BaseExceptionGroup) as e:  # this operation's failure, reported
        return count, str(e)[:3000]
    return count, None


def _numbers(operation: Any, names: list[str]) -> list[st.SearchStrategy[AnyCase]]:
    """Schema-valid requests with one query parameter number-like: each of
    :data:`EVERY_PARAMETER` in each parameter once, then drawn ones."""
    fixed = [
        operation.as_strategy(query={name: value}) for name in names for value in EVERY_PARAMETER
    ]
    drawn = st.tuples(st.sampled_from(names), NUMBER_LIKE).flatmap(
        lambda pair: operation.as_strategy(query={pair[0]: pair[1]})
    )
    return [*fixed, drawn]


def fuzz(base_url: str, headers: dict[str, str], *, examples: int) -> FuzzResult:
    """Send up to ``examples`` drawn requests per operation and mode; what happened."""
    schema = schemathesis.openapi.from_url(f"{base_url}/api/v1/openapi.json")
    result = FuzzResult()
    for found in schema.get_all_operations():
        if isinstance(found, Err):  # a document the server should never publish
            raise found.err()
        operation = found.ok()
        rounds: list[tuple[str, list[tuple[st.SearchStrategy[AnyCase], int]]]] = [
            (mode.value, [(operation.as_strategy(generation_mode=mode), examples)])
            for mode in schemathesis.GenerationMode
        ]
        names = [p.name for p in operation.query.items]
        if names:
            strategies = _numbers(operation, names)
            rounds.append(
                (NUMBERS, [(one, 1) for one in strategies[:-1]] + [(strategies[-1], examples)])
            )
        for mode, runs in rounds:
            label = f"{operation.label} ({mode})"
            count = 0
            for strategy, n in runs:
                sent, failure = _run(strategy, n, base_url, headers)
                count += sent
                if failure is not None:
                    result.failures.append((label, failure))
                    break
            result.cases += count
            result.per_operation[label] = count
    return result
