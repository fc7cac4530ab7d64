#!/usr/bin/env python3
"""A queue script in Python, using only RQ_WRITE (and RQ_READ for `dup`), like the seed's
bash example: param1 `slow`, `err`, `duplicate` or anything else for a plain run."""

import os
import sys
import time


def write_status(state: str, text: str = "") -> None:
    # One write per line: the worker reads whole lines from the pipe.
    os.write(int(os.environ["RQ_WRITE"]), f"{state} {text}\n".encode())


def read_reply() -> str:
    with os.fdopen(int(os.environ["RQ_READ"]), closefd=False) as pipe:
        return pipe.readline().strip()


write_status("run", "Looking for RQ environment variables")
for key in sorted(os.environ):
    if key.startswith("RQ_"):
        print(f"{key}={os.environ[key]}")
sys.stdout.flush()  # stdout is a file: flush so the log shows progress
param1 = os.environ.get("RQ_PARAM1", "")

if param1 == "slow":
    write_status("run", "start sleeping for 30")
    time.sleep(30)
    write_status("run", "done sleeping for 30")

if param1 == "err":
    write_status("err", "by design")
    sys.exit(0)

if param1 == "duplicate":
    write_status("run", "start dup")
    write_status("dup", "0-X-test_nop")
    reply = read_reply()
    if not reply.startswith("ok "):
        print(f"Sorry, system didn't dup test message properly : {reply}")
        write_status("err", "duplication failed")
        sys.exit(0)
    write_status("run", f"done dup: {reply[3:]}")

write_status("done", "script completed happily")
