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


# The interpreter the last build was made for: another one (a venv made again on another
# Python) rebuilds everything, so that no module stays built against other headers.
BUILT_FOR = ROOT / "build" / "interpreter"
HEADERS = ["conveyor/core/job_slots.h"]


def main() -> None:
    sources = [str(Path(*module.split(".")).with_suffix(".py")) for module in COMPILED_MODULES]
    interpreter = f"{sys.base_prefix} {sys.version}"
    force = not BUILT_FOR.exists() or BUILT_FOR.read_text() != interpreter
    extensions = cythonize(
        sources,
        build_dir="build/cython",
        compiler_directives={"language_level": 3},
        quiet=True,
        force=force,
    )
    for extension in extensions:
        # C headers of our own (conveyor/core/job_slots.h) are named from the root; an
        # edited header rebuilds every module, as it is the C that includes it.
        extension.include_dirs.append(str(ROOT))
        extension.depends.extend(HEADERS)
    # A bare Distribution: setuptools' own project metadata (pyproject.toml) is not needed
    # to build extensions in place.
    dist = Distribution(
        {
            "ext_modules": extensions,
            "script_name": "scripts/compile.py",
            "script_args": ["build_ext", "--inplace", "--build-temp", "build/temp"]
            + (["--force"] if force else []),
        }
    )
    dist.parse_command_line()
    dist.run_commands()
    BUILT_FOR.parent.mkdir(exist_ok=True)
    BUILT_FOR.write_text(interpreter)
    print(f"compiled: {', '.join(COMPILED_MODULES)}", file=sys.stderr)


if __name__ == "__main__":
    import os

    os.chdir(ROOT)
    main()
