"""Compile the scheduling core with mypyc into ``build/core`` (``scripts/compile-core``).

Theory of operation: :func:`fleet.compiled_core.compiled_sources` lists the
modules to compile; mypyc (shipped with mypy, a development dependency)
type-checks them and writes C, and setuptools builds one extension per
module plus their shared runtime (``fleet_core__mypyc``).  The result is
built in a temporary directory and then moved into ``build/core`` together
with its ``STAMP`` (:func:`fleet.compiled_core.stamp`), so a failed or
interrupted build never leaves a half-built core that a stamp vouches for.
Nothing is done when the build in place is current (``--force`` rebuilds).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

from fleet.compiled_core import BUILD, ROOT, compiled_sources, current_build, stamp

GROUP = "fleet_core"


def build(root: Path, jobs: int) -> Path:
    """Compile the core under ``root`` into a fresh directory beside ``build/core``."""
    from mypyc.build import mypycify
    from setuptools import setup  # type: ignore[import-untyped]

    target = root / BUILD
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="core-", dir=target.parent))
    sources = [p.relative_to(root).as_posix() for p in compiled_sources(root)]
    before = stamp(root)
    cwd = Path.cwd()
    os.chdir(root)  # mypyc names modules by their paths from here
    said = io.StringIO()  # mypyc's notes and setuptools' chatter: shown if the build fails
    try:
        with contextlib.redirect_stdout(said), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            extensions = mypycify(
                sources, group_name=GROUP, target_dir=str(work / "c"), opt_level="3"
            )
            setup(
                name="fleet-core-compiled",
                ext_modules=extensions,
                script_args=[
                    "--quiet",
                    "build_ext",
                    f"--build-lib={work / 'lib'}",
                    f"--build-temp={work / 'temp'}",
                    f"--parallel={jobs}",
                ],
            )
    except BaseException:
        sys.stderr.write(said.getvalue())
        raise
    finally:
        os.chdir(cwd)
    if stamp(root) != before:
        shutil.rmtree(work, ignore_errors=True)
        raise SystemExit("compile-core: the core's sources changed during the build; run it again")
    (work / "lib" / "STAMP").write_text(before + "\n", encoding="ascii")
    return work


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when current")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="C compilers at once")
    args = parser.parse_args(argv)
    target = ROOT / BUILD
    if not args.force and current_build(ROOT) is not None:
        print(f"compile-core: {target} is current", file=sys.stderr)
        return 0
    started = time.monotonic()
    work = build(ROOT, args.jobs)
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    (work / "lib").rename(target)
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    count = len(compiled_sources(ROOT))
    took = time.monotonic() - started
    print(f"compile-core: {count} modules compiled into {target} in {took:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
