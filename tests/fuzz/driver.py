"""Drive schemathesis over every operation of a running Fleet's OpenAPI document.

:func:`fuzz` loads the document a server publishes, and for each operation
lets hypothesis draw requests from schemathesis' strategies (schema-valid
data, and data that breaks the schema), sends each with the given headers and runs schemathesis'
checks on the answer: no 5xx, a documented status, a documented media type,
a body that matches its schema.  It returns how many cases it sent and the
failures (operation and message), first failure per operation only, so one
broken route does not hide the others.  Used by the test suite (a modest
number of examples) and by ``bench/bench_fuzz.py`` (a larger run).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import checks

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


@dataclass
class FuzzResult:
    cases: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    per_operation: dict[str, int] = field(default_factory=dict)


def fuzz(base_url: str, headers: dict[str, str], *, examples: int) -> FuzzResult:
    """Send up to ``examples`` drawn requests per operation; what happened."""
    schema = schemathesis.openapi.from_url(f"{base_url}/api/v1/openapi.json")
    result = FuzzResult()
    for found in schema.get_all_operations():
        operation = found.ok()
        for mode in schemathesis.GenerationMode:
            label = f"{operation.label} ({mode.value})"
            count = 0

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                derandomize=True,
            )
            def run(case: schemathesis.Case) -> None:
                nonlocal count
                count += 1
                case.call_and_validate(base_url=base_url, headers=headers, checks=CHECKS)

            try:
                run()
            except Unsatisfiable:
                pass
            except (Exception, BaseExceptionGroup) as e:  # this operation's failure, reported
                result.failures.append((label, str(e)[:3000]))
            result.cases += count
            result.per_operation[label] = count
    return result
