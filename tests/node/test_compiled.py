"""The compiled modules (conveyor/compiled.py): which build loads, and that a node says so.

`make test` runs the suite twice: with CONVEYOR_EXPECT_COMPILED=1 (every module must have
loaded compiled, or the build was skipped or went stale) and with CONVEYOR_PURE_PYTHON=1
(none may). Run bare, the tests check what loaded against the files on disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from conveyor import compiled
from tests.servers import NodeProcess

EXPECT_COMPILED = os.environ.get("CONVEYOR_EXPECT_COMPILED", "") not in ("", "0")


def _loaded_from(env: dict[str, str]) -> dict[str, str]:
    """Each compiled module's __file__, imported in a fresh interpreter under `env`."""
    code = (
        "import importlib, json; from conveyor.compiled import COMPILED_MODULES as M; "
        "print(json.dumps({m: importlib.import_module(m).__file__ for m in M}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    import json

    return dict(json.loads(out.stdout))


def _built(module: str) -> bool:
    package, _, name = module.rpartition(".")
    directory = Path(sys.modules[package].__file__ or "").parent
    return compiled.built_file(str(directory), name) is not None


def test_this_run_loaded_what_it_asked_for() -> None:
    for module in compiled.COMPILED_MODULES:
        __import__(module)
    files = {m: sys.modules[m].__file__ or "" for m in compiled.COMPILED_MODULES}
    if compiled.pure_requested():
        assert all(path.endswith(".py") for path in files.values()), files
    elif EXPECT_COMPILED:
        assert all(not path.endswith(".py") for path in files.values()), (
            f"{compiled.summary()}: run `make compile`"
        )
    else:
        for module, path in files.items():
            assert path.endswith(".py") != (compiled.status[module] == "compiled"), module


def test_pure_python_switch_loads_every_source() -> None:
    files = _loaded_from(dict(os.environ, CONVEYOR_PURE_PYTHON="1"))
    assert set(files) == set(compiled.COMPILED_MODULES)
    assert all(path.endswith(".py") for path in files.values()), files


def test_without_the_switch_built_modules_load_compiled() -> None:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    files = _loaded_from(env)
    for module, path in files.items():
        fresh = compiled.status.get(module) != "stale"
        if _built(module) and fresh:
            assert not path.endswith(".py"), (module, path)
        else:
            assert path.endswith(".py"), (module, path)


def test_a_build_older_than_its_source_is_not_used(tmp_path: Path) -> None:
    source, built = tmp_path / "codec.py", tmp_path / "codec.cpython-311-x86_64-linux-gnu.so"
    source.write_text("")
    built.write_bytes(b"")
    os.utime(source, (1_000, 1_000))
    os.utime(built, (2_000, 2_000))
    assert compiled.choose(str(source), str(built), pure=False) == "compiled"
    assert compiled.choose(str(source), str(built), pure=True) == "pure"
    assert compiled.choose(str(source), None, pure=False) == "not built"
    os.utime(source, (3_000, 3_000))  # the source edited after the build
    assert compiled.choose(str(source), str(built), pure=False) == "stale"


@pytest.mark.parametrize("value, pure", [("", False), ("0", False), ("1", True), ("yes", True)])
def test_switch_values(monkeypatch: pytest.MonkeyPatch, value: str, pure: bool) -> None:
    monkeypatch.setenv(compiled.PURE_ENV, value)
    assert compiled.pure_requested() is pure


def test_info_says_how_many_modules_run_compiled(node: NodeProcess) -> None:
    client = redis.Redis(port=node.port, decode_responses=True)
    field = str(client.info("server")["compiled_modules"])
    total = len(compiled.COMPILED_MODULES)
    if compiled.pure_requested():
        assert field.startswith(f"0/{total} (") and "pure" in field
    elif EXPECT_COMPILED:
        assert field == f"{total}/{total}"
    else:
        assert field.split(" ")[0].endswith(f"/{total}")
