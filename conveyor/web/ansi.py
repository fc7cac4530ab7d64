"""ANSI colour escapes (SGR) in a script's log, rendered as HTML spans with CSS classes.

Only classes, never inline styles: the console's Content-Security-Policy forbids inline
styles. Everything that is not an SGR sequence (cursor moves, OSC titles) is dropped, and
all text is HTML-escaped. The renderer keeps its state between `feed` calls, so a log
streamed in pieces keeps a colour that spans two pieces.
"""

from __future__ import annotations

import html
import re

# CSI ... final byte, OSC ... BEL/ST, or a lone ESC + one character. A CSI's parameters are
# a few dozen characters in any real log; past _MAX_PARAMS it is not parsed (its text shows).
_MAX_PARAMS = 256
_ESCAPE = re.compile(
    rf"\x1b\[([0-9;?]{{0,{_MAX_PARAMS}}})([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]"
)
_MAX_DIGITS = 8  # no SGR code or colour number is longer; a longer one matches no code
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_FLAGS = {1: "b", 2: "dim", 3: "i", 4: "u", 9: "s"}
_UNFLAGS = {21: "b", 22: ("b", "dim"), 23: "i", 24: "u", 29: "s"}


def _code(param: str) -> int:
    if not param.isdigit():
        return 0  # empty (or "?"): SGR reads it as 0
    # int() refuses over 4300 digits (ValueError): an over-long number is no code at all.
    return int(param) if len(param) <= _MAX_DIGITS else -1


class AnsiRenderer:
    def __init__(self) -> None:
        self.fg: str | None = None
        self.bg: str | None = None
        self.flags: set[str] = set()
        self._pending = ""  # an escape sequence cut by the end of a piece

    def _classes(self) -> str:
        names = sorted(f"a-{f}" for f in self.flags)
        if self.fg:
            names.append(f"a-fg{self.fg}")
        if self.bg:
            names.append(f"a-bg{self.bg}")
        return " ".join(names)

    def _sgr(self, params: str) -> None:
        codes = [_code(p) for p in params.split(";")] if params else [0]
        index = 0
        while index < len(codes):  # bounded: each turn consumes at least one code
            code = codes[index]
            index += 1
            if code == 0:
                self.fg = self.bg = None
                self.flags.clear()
            elif code in _FLAGS:
                self.flags.add(_FLAGS[code])
            elif code in _UNFLAGS:
                gone = _UNFLAGS[code]
                self.flags.difference_update((gone,) if isinstance(gone, str) else gone)
            elif 30 <= code <= 37 or 90 <= code <= 97:
                self.fg = str(code - 30 if code < 90 else code - 90 + 8)
            elif 40 <= code <= 47 or 100 <= code <= 107:
                self.bg = str(code - 40 if code < 100 else code - 100 + 8)
            elif code == 39:
                self.fg = None
            elif code == 49:
                self.bg = None
            elif code in (38, 48):
                index = self._extended(code, codes, index)

    def _extended(self, code: int, codes: list[int], index: int) -> int:
        # 38;5;N (256 colours: the first 16 map to classes, the rest to the nearest of
        # those) or 38;2;R;G;B (true colour: dropped, the text keeps its colour).
        if index < len(codes) and codes[index] == 5 and index + 1 < len(codes):
            number = codes[index + 1]
            colour = str(number) if 0 <= number < 16 else None
            if code == 38:
                self.fg = colour
            else:
                self.bg = colour
            return index + 2
        if index < len(codes) and codes[index] == 2:
            return index + 4
        return index

    def _span(self, text: str) -> str:
        if not text:
            return ""
        escaped = html.escape(_CONTROL.sub("", text), quote=False)
        classes = self._classes()
        return f'<span class="{classes}">{escaped}</span>' if classes else escaped

    def feed(self, text: str) -> str:
        """HTML for the next piece of the log."""
        text = self._pending + text
        self._pending = ""
        cut = text.rfind("\x1b")
        if cut != -1 and cut >= len(text) - 32 and not _ESCAPE.match(text, cut):
            text, self._pending = text[:cut], text[cut:]  # wait for the rest of it
        out: list[str] = []
        position = 0
        for match in _ESCAPE.finditer(text):
            out.append(self._span(text[position : match.start()]))
            if match.group(2) == "m":
                self._sgr(match.group(1))
            position = match.end()
        out.append(self._span(text[position:]))
        return "".join(out)

    def flush(self) -> str:
        """HTML for an escape sequence left incomplete at the end of the log."""
        pending, self._pending = self._pending, ""
        return self._span(pending)


def render(text: str) -> str:
    """A whole log as HTML."""
    renderer = AnsiRenderer()
    return renderer.feed(text) + renderer.flush()
