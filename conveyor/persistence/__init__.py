"""The append-only file: Disque's record stream, written, rewritten, loaded, checked.

Owns the file format and file I/O: `records` (which job events become LOADJOB / DELJOB,
the LOADJOB encoder), `reader` (RESP framing of a file, with exact offsets), `loader`
(a file into the core, a chunk at a time), `appendfile` (an open AOF: buffered appends,
write errors kept as state, fdatasync), `rewrite` (a compact file built a slice at a
time beside the live one), `check` (`conveyor check-aof`).

It must not touch sockets, the event loop or the core's internals: jobs go in through
`NodeCore.import_job` / `del_jobs` and come out of `JobEvent`s and the job codec. When to
write, fsync and rewrite is the node's business (conveyor/node/aof*.py).
"""
