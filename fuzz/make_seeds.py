"""Write the seed corpus: `fuzz/corpus/resp/` and `fuzz/corpus/commands/`.

    .venv/bin/python -m fuzz.make_seeds

Seeds are small: real requests, the inputs issue 9 reproduced by hand (`*2147483647`, a
5 MB bulk header behind a 70 KB request, an inline command after a big multibulk one,
`DEBUG SLEEP nan`, `CONFIG SET event-log "\\x00"`...), each in the target's input layout
(`fuzz_resp.encode_input`, `fuzz_commands.encode_program`). Big streams are made by the
filler, so no seed is over a few hundred bytes. The fuzzer only reads this directory.
"""

from __future__ import annotations

from pathlib import Path

from fuzz import fuzz_commands, fuzz_resp

CORPUS = Path(__file__).resolve().parent / "corpus"


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def request(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(bulk(arg) for arg in args)


UNIT = bulk(b"x" * 50)  # 57 bytes: a filler unit (at most 63)


def resp_seeds() -> dict[str, bytes]:
    enc = fuzz_resp.encode_input
    ping = request(b"PING")
    pipeline = (
        request(b"ADDJOB", b"q", b"hello", b"0", b"RETRY", b"30")
        + request(b"GETJOB", b"TIMEOUT", b"100", b"FROM", b"q")
        + request(b"ACKJOB", b"D-dc4ef6cf-5j1LA4IJG1JHlDPC8WIV4top-05a1")
    )
    copies_70k = 9 * fuzz_resp.FILL_UNIT // len(UNIT)  # what a filler of 9 units adds
    after_70k = b"*%d\r\n" % (copies_70k + 2) + UNIT + b"$5242880\r\n"
    after_70k_length = len(after_70k) + copies_70k * len(UNIT)
    copies_96k = 12 * fuzz_resp.FILL_UNIT // len(UNIT)
    multibulk_96k = b"*%d\r\n" % (copies_96k + 1) + UNIT
    return {
        "ping-multibulk": enc(ping),
        "ping-inline": enc(b"PING\r\n"),
        "ping-split-everywhere": enc(ping, [1, 2, 3, 4, 5, 6, 8, 10]),
        "pipeline": enc(pipeline),
        "pipeline-split": enc(pipeline, [7, 30, 61, 90, 120]),
        "inline-quotes": enc(b"ADDJOB q \"a \\x41\\n b\" 0\r\nECHO 'it\\'s'\r\n"),
        "inline-unbalanced": enc(b'ECHO "oops\r\n'),
        "inline-empty-lines": enc(b"\r\n\n \r\nPING\n"),
        "inline-after-multibulk": enc(ping + b"PING\r\n" + ping),
        "multibulk-after-inline-split": enc(b"PING\r\n" + ping, [3, 9]),
        # Issue 9, defect 2: 15 bytes that froze the node for seconds, or MemoryError'd.
        "count-2147483647": enc(b"*2147483647\r\n"),
        "count-4294967295": enc(b"*4294967295\r\n"),
        "count-1073741824": enc(b"*1073741824\r\n"),
        "count-1048577": enc(b"*1048577\r\n"),
        "count-negative": enc(b"*-1\r\n" + ping),
        "count-zero": enc(b"*0\r\n" + ping),
        "bulk-negative": enc(b"*1\r\n$-1\r\n"),
        "bulk-over-limit": enc(b"*1\r\n$257\r\n"),
        "bulk-at-limit": enc(b"*1\r\n$256\r\n" + b"y" * 256 + b"\r\n"),
        "bulk-leading-zero": enc(b"*1\r\n$04\r\nPING\r\n"),
        "bulk-plus-sign": enc(b"*+1\r\n$+4\r\nPING\r\n"),
        "bulk-no-crlf": enc(b"*1\r\n$4\r\nPINGxx"),
        "resp3-types": enc(b"*2\r\n:1\r\n%1\r\n+a\r\n_\r\n"),
        # Issue 9, defect 5: a 5 MB bulk header behind a 70 KB request (in two reads),
        # as sent and scaled to the target's limits (many 50-byte bulks, then the header).
        "bulk-5mb-behind-70kb": enc(b"*2\r\n$71680\r\n" + b"z" * 40 + b"\r\n$5242880\r\n", [11]),
        "bulk-5mb-behind-70kb-scaled": enc(after_70k, [after_70k_length - 10], (9, 7, 57, 0)),
        # Issue 9, defect 6: an inline command after a big (~96 KB) multibulk request.
        "inline-after-96kb-multibulk": enc(multibulk_96k + b"PING\r\n", [], (12, 7, 57, 0)),
        "inline-after-96kb-multibulk-split": enc(
            multibulk_96k + b"PING\r\n", [4, 70000], (12, 7, 57, 0)
        ),
        "inline-too-long": enc(b"ECHO " + b"a" * 60, [], (12, 5, 1, 97)),
        # A stranger's limits (before AUTH): 10 arguments, 16 KiB bulks.
        "unauthenticated-11-args": enc(b"*11\r\n" + UNIT, [], None, authenticated=False),
        "unauthenticated-auth": enc(request(b"AUTH", b"secret") + ping, [], None, False),
    }


def command_seeds() -> dict[str, bytes]:
    enc = fuzz_commands.encode_program

    def k(word: bytes) -> tuple[str, bytes]:
        return ("kw", word)

    def n(text: bytes) -> tuple[str, bytes]:
        return ("num", text)

    queue = ("queue", b"q")
    job0 = ("id", 0)
    add = (0, [b"addjob", queue, b"hello", n(b"0")])
    return {
        "ping": enc([(0, [b"ping"])]),
        "addjob-getjob-ackjob": enc(
            [add, (0, [b"getjob", k(b"FROM"), queue]), (0, [b"ackjob", job0])]
        ),
        "addjob-options": enc(
            [
                (
                    0,
                    [
                        b"addjob",
                        queue,
                        b"x",
                        n(b"100"),
                        k(b"RETRY"),
                        n(b"1"),
                        k(b"TTL"),
                        n(b"10"),
                        k(b"DELAY"),
                        n(b"0"),
                        k(b"MAXLEN"),
                        n(b"10"),
                    ],
                ),
                (0, [b"addjob", queue, b"x", n(b"0"), k(b"REPLICATE"), n(b"65536")]),
                (0, [b"addjob", queue, b"x", n(b"0"), k(b"ASYNC"), k(b"TTL"), n(b"-1")]),
            ]
        ),
        "getjob-blocks-then-times-out": enc(
            [
                (
                    1,
                    [
                        b"getjob",
                        k(b"TIMEOUT"),
                        n(b"100"),
                        k(b"COUNT"),
                        n(b"2"),
                        k(b"WITHCOUNTERS"),
                        k(b"FROM"),
                        queue,
                        queue,
                    ],
                ),
                (1, [b"ping"]),
                ("tick", 200),
                add,
                (1, [b"getjob", k(b"NOHANG"), k(b"FROM"), queue]),
            ]
        ),
        "getjob-blocked-then-served": enc(
            [(1, [b"getjob", k(b"FROM"), queue]), add, ("deadline",), ("disconnect", 1)]
        ),
        "nack-working-enqueue-dequeue": enc(
            [
                add,
                (0, [b"getjob", k(b"FROM"), queue]),
                (0, [b"nack", job0]),
                (0, [b"working", job0]),
                (0, [b"dequeue", job0]),
                (0, [b"enqueue", job0]),
                (0, [b"nack", job0, k(b"DELAY"), n(b"1")]),
                ("tick", 2000),
                (0, [b"show", job0]),
                (0, [b"fastack", job0]),
                (0, [b"deljob", job0]),
            ]
        ),
        "scans": enc(
            [
                add,
                (
                    0,
                    [
                        b"jscan",
                        n(b"0"),
                        k(b"COUNT"),
                        n(b"10"),
                        k(b"QUEUE"),
                        queue,
                        k(b"STATE"),
                        k(b"queued"),
                        k(b"REPLY"),
                        k(b"ALL"),
                    ],
                ),
                (0, [b"qscan", k(b"BUSYLOOP"), k(b"MINLEN"), n(b"1"), k(b"MAXLEN"), n(b"10")]),
                (0, [b"qpeek", queue, n(b"-1")]),
                (0, [b"qlen", queue]),
                (0, [b"qstat", queue]),
                (0, [b"pause", queue, k(b"IN"), k(b"OUT"), k(b"BCAST")]),
                (0, [b"pause", queue, k(b"STATE")]),
            ]
        ),
        "resp3-client": enc(
            [
                (0, [b"hello", k(b"3"), k(b"SETNAME"), b"me"]),
                (0, [b"qstat", queue]),
                (0, [b"getjob", k(b"NOHANG"), k(b"FROM"), queue]),
                (0, [b"show", job0]),
                (0, [b"config", k(b"GET"), k(b"*")]),
                (0, [b"info", k(b"everything")]),
                (0, [b"client", k(b"INFO")]),
                (0, [b"command", k(b"DOCS")]),
            ]
        ),
        "server-commands": enc(
            [
                (0, [b"info"]),
                (0, [b"command"]),
                (0, [b"command", k(b"INFO"), b"addjob", b"nope"]),
                (0, [b"client", k(b"LIST"), k(b"ID"), n(b"1"), n(b"2")]),
                (0, [b"client", k(b"KILL"), k(b"ID"), n(b"2"), k(b"SKIPME"), k(b"no")]),
                (0, [b"cluster", k(b"NODES")]),
                (0, [b"cluster", k(b"LEAVING"), k(b"yes")]),
                (0, [b"cluster", k(b"RESET"), k(b"SOFT")]),
                (0, [b"debug", k(b"JOBS")]),
                (0, [b"time"]),
                (0, [b"echo", b"hi"]),
                (0, [b"quit"]),
            ]
        ),
        "auth-requirepass": enc(
            [
                (0, [b"config", k(b"SET"), ("directive", b"requirepass"), b"secret"]),
                ("disconnect", 1),
                (1, [b"ping"]),
                (1, [b"auth", b"wrong"]),
                (1, [b"hello", k(b"3"), k(b"AUTH"), k(b"default"), b"secret"]),
                (1, [b"ping"]),
            ]
        ),
        # Issue 9's hand-made repros: defects 1, 7, 8, 9.
        "config-set-tcp-keepalive": enc(
            [(0, [b"config", k(b"SET"), ("directive", b"tcp-keepalive"), n(b"32768")])]
        ),
        "config-set-event-log-nul": enc(
            [(0, [b"config", k(b"SET"), ("directive", b"event-log"), b"\x00"])]
        ),
        "config-set-event-log-path": enc(
            [
                (0, [b"config", k(b"SET"), ("directive", b"event-log"), b"../../x"]),
                add,
                (0, [b"config", k(b"SET"), ("directive", b"event-log"), b""]),
            ]
        ),
        "config-set-newline": enc(
            [
                (0, [b"config", k(b"SET"), ("directive", b"deadletter-queue"), b"x\nfoo"]),
                (0, [b"config", k(b"REWRITE")]),
            ]
        ),
        "config-set-maxmemory": enc(
            [
                (0, [b"config", k(b"SET"), ("directive", b"maxmemory"), n(b"1")]),
                add,
                (0, [b"config", k(b"SET"), ("directive", b"max-deliveries"), n(b"1")]),
                (
                    0,
                    [
                        b"config",
                        k(b"SET"),
                        ("directive", b"client-output-buffer-limit"),
                        n(b"normal 1mb 1mb 60"),
                    ],
                ),
                (0, [b"config", k(b"RESETSTAT")]),
            ]
        ),
        "debug-sleep-nan": enc([(0, [b"debug", k(b"SLEEP"), n(b"nan")])]),
        "debug-sleep-inf": enc([(0, [b"debug", k(b"SLEEP"), n(b"inf")])]),
        "debug-sleep-1e400": enc([(0, [b"debug", k(b"SLEEP"), n(b"1e400")])]),
        "debug-error-flushall": enc(
            [add, (0, [b"debug", k(b"ERROR"), b"forged"]), (0, [b"debug", k(b"FLUSHALL")])]
        ),
        "int64-edges": enc(
            [
                (0, [b"addjob", queue, b"x", n(b"9223372036854775807")]),
                (0, [b"addjob", queue, b"x", n(b"0"), k(b"TTL"), n(b"9223372036854775807")]),
                (0, [b"addjob", queue, b"x", n(b"0"), k(b"DELAY"), n(b"9223372036854775807")]),
                (0, [b"addjob", queue, b"x", n(b"0"), k(b"RETRY"), n(b"9223372036854775807")]),
                (0, [b"getjob", k(b"TIMEOUT"), n(b"9223372036854775807"), k(b"FROM"), queue]),
                ("tick", 1 << 20),
                (0, [b"jscan", n(b"18446744073709551616")]),
            ]
        ),
    }


def write(folder: Path, seeds: dict[str, bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for name, data in seeds.items():
        (folder / name).write_bytes(data)


def main() -> None:
    fuzz_resp.load()
    fuzz_commands.load()
    write(CORPUS / "resp", resp_seeds())
    write(CORPUS / "commands", command_seeds())
    for target in ("resp", "commands"):
        files = list((CORPUS / target).iterdir())
        size = sum(path.stat().st_size for path in files)
        print(f"fuzz/corpus/{target}: {len(files)} seeds, {size} bytes")


if __name__ == "__main__":
    main()
