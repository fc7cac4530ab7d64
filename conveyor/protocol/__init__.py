"""RESP reading (hiredis) and RESP2/RESP3 writing.

Owns: turning bytes into argument lists and Python reply values into bytes.
Must not touch: command semantics or the job state."""
