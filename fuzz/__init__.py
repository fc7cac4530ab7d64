"""Coverage-guided fuzz targets (atheris) for what a stranger can reach: the RESP request
parser and every command's argument parser, driven against the pure core.

- `fuzz_resp`: `RequestParser` fed arbitrary bytes in arbitrary splits;
- `fuzz_commands`: fuzzed argument lists run through an in-process `Server`;
- `resp_check`: the RESP reply validator both use as an oracle;
- `harness`: what they share (violations, known issues, keep-going mode);
- `run`: runs the targets for a while and prints corpus size and coverage (`make fuzz`);
- `make_seeds`: writes the seed corpus under `fuzz/corpus/<target>/`.

Nothing here may import `conveyor` at import time: atheris instruments the modules a target
imports inside `atheris.instrument_imports()`, and a module imported earlier is not seen.
See docs/fuzzing.md.
"""
