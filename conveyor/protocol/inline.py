"""Inline requests and config lines: split like Redis' sdssplitargs (quotes, escapes),
and written back like its sdscatrepr.

Used for a client's inline commands (`PING\\r\\n`, what telnet sends), by the config
file reader and writer (CONFIG REWRITE) and by `conveyor cli`.
"""

from __future__ import annotations

_ESCAPES = {
    ord("n"): b"\n",
    ord("r"): b"\r",
    ord("t"): b"\t",
    ord("b"): b"\b",
    ord("a"): b"\a",
}
_HEX = b"0123456789abcdefABCDEF"


def split_args(line: bytes) -> list[bytes] | None:
    """Split like Redis' sdssplitargs; None when quotes are unbalanced."""
    args: list[bytes] = []
    pos = 0
    length = len(line)
    while True:
        while pos < length and line[pos] in b" \t\r\n\v\f":
            pos += 1
        if pos >= length:
            return args
        current = bytearray()
        in_double = in_single = False
        while True:
            if in_double:
                if pos >= length:
                    return None
                char = line[pos]
                if (
                    char == 92  # backslash
                    and pos + 3 < length
                    and line[pos + 1] == ord("x")
                    and line[pos + 2] in _HEX
                    and line[pos + 3] in _HEX
                ):
                    current.append(int(line[pos + 2 : pos + 4], 16))
                    pos += 3
                elif char == 92 and pos + 1 < length:
                    pos += 1
                    current += _ESCAPES.get(line[pos], bytes([line[pos]]))
                elif char == 34:  # closing "
                    if pos + 1 < length and line[pos + 1] not in b" \t\r\n\v\f":
                        return None  # the closing quote must be followed by a space
                    in_double = False
                    pos += 1
                    break
                else:
                    current.append(char)
            elif in_single:
                if pos >= length:
                    return None
                char = line[pos]
                if char == 92 and pos + 1 < length and line[pos + 1] == 39:
                    pos += 1
                    current.append(39)
                elif char == 39:
                    if pos + 1 < length and line[pos + 1] not in b" \t\r\n\v\f":
                        return None
                    in_single = False
                    pos += 1
                    break
                else:
                    current.append(char)
            else:
                if pos >= length:
                    break
                char = line[pos]
                if char in b" \t\r\n\v\f":
                    break
                if char == 34:
                    in_double = True
                elif char == 39:
                    in_single = True
                else:
                    current.append(char)
            pos += 1
        args.append(bytes(current))


# sdscatrepr's escapes; any other byte outside printable ASCII is written \xhh.
_REPR_ESCAPES = {
    ord("\\"): "\\\\",
    ord('"'): '\\"',
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    ord("\a"): "\\a",
    ord("\b"): "\\b",
}


def sds_repr(data: bytes) -> str:
    """Redis' sdscatrepr without its quotes: printable ASCII as is, `\\` and `"`
    escaped, `\\n \\r \\t \\a \\b`, every other byte as `\\xhh`. What split_args
    reads back, between double quotes, as exactly `data`."""
    return "".join(
        _REPR_ESCAPES.get(byte) or (chr(byte) if 32 <= byte < 127 else f"\\x{byte:02x}")
        for byte in data
    )
