"""Build the modules of conveyor.compiled.COMPILED_MODULES with Cython, in place.

Run by `make compile` (and so by `make run` and `make test`). Cython regenerates only the
modules whose .py changed; the generated C stays under build/, the .so lands beside its .py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Distribution

from conveyor.compiled import COMPILED_MODULES

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    sources = [str(Path(*module.split(".")).with_suffix(".py")) for module in COMPILED_MODULES]
    extensions = cythonize(
        sources,
        build_dir="build/cython",
        compiler_directives={"language_level": 3},
        quiet=True,
    )
    # A bare Distribution: setuptools' own project metadata (pyproject.toml) is not needed
    # to build extensions in place.
    dist = Distribution(
        {
            "ext_modules": extensions,
            "script_name": "scripts/compile.py",
            "script_args": ["build_ext", "--inplace", "--build-temp", "build/temp"],
        }
    )
    dist.parse_command_line()
    dist.run_commands()
    print(f"compiled: {', '.join(COMPILED_MODULES)}", file=sys.stderr)


if __name__ == "__main__":
    import os

    os.chdir(ROOT)
    main()
