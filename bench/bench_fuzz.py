"""A larger schemathesis run against ``fleet serve`` on SQLite: how many cases, how many failed.

Starts ``fleet serve`` with an admin token on a throwaway SQLite file, draws
``--examples`` requests per operation and generation mode (schema-valid,
schema-breaking, and number-like text in each query parameter) from the
OpenAPI document, sends them, and prints the
number of cases, the failures (first per operation), the time taken and
whether the server is still healthy.  The suite runs the same driver with
15 examples (``tests/fuzz/test_schemathesis.py``).

    python bench/bench_fuzz.py --examples 200
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from fleet.testing import servers
from fleet.testing.fuzz import fuzz
from fleet.testing.tokens import admin_tokens_file

TOKEN = "fleet_bench-fuzz-admin"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200, help="per operation and mode")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokens = admin_tokens_file(work / "tokens.yaml", TOKEN, name="bench")
        with servers.serving(work, extra=["--tokens-file", str(tokens)]) as server:
            url, log = server.url, server.log
            start = time.perf_counter()
            result = fuzz(url, {"Authorization": f"Bearer {TOKEN}"}, examples=args.examples)
            took = time.perf_counter() - start
            healthy = all(
                urllib.request.urlopen(url + p, timeout=10).status == 200
                for p in ("/healthz", "/readyz")
            )
        errors_logged = log.read_text().count("unexpected error answering")
    print(f"operations x modes: {len(result.per_operation)}")
    print(f"cases tried:        {result.cases}")
    print(f"failed operations:  {len(result.failures)}")
    print(f"500s in the log:    {errors_logged}")
    print(f"still healthy:      {healthy}")
    print(f"time:               {took:.1f} s ({result.cases / took:.0f} cases/s)")
    for label, message in result.failures:
        print(f"\n{label}:\n{message}")
    return 1 if result.failures or errors_logged or not healthy else 0


if __name__ == "__main__":
    sys.exit(main())
