"""Name normalisation, did-you-mean suggestions, and the one place that makes input text safe to show or write.

Anything read from input (a model's `name`, HF `_name_or_path`, a cluster `name`, a hardware id) is data:
- `check_name` refuses control characters, line/paragraph separators and bidi overrides at input time;
- `safe_line` escapes them (and cuts the text) wherever input text enters a terminal message or a comment
  line of an emitted file, so no value can add a line, a key or a command;
- `yaml_quote` writes a string as a YAML double-quoted scalar that is one line whatever it holds.
"""

from __future__ import annotations

import difflib
import re

MAX_NAME_CHARS = 256  # longest model/cluster/hardware name accepted (a HF repo id or path fits easily)
# C0/C1 controls and DEL, the Unicode line/paragraph separators, bidi embedding/override/isolate marks, the BOM,
# non-characters and lone surrogates (which cannot even be written as UTF-8)
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff\ufffe\uffff\ud800-\udfff]")


def normalise(name: str) -> str:
    """Case-, space- and punctuation-insensitive key: 'Llama-3.1 70B' -> 'llama3170b'."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def did_you_mean(name: str, choices: list[str], n: int = 3) -> str:
    """' (did you mean: a, b?)' or '' when nothing is close."""
    if len(name) > MAX_NAME_CHARS:  # difflib is quadratic: a 40,000-character name would take seconds
        return ""
    close = difflib.get_close_matches(name.lower(), choices, n=n, cutoff=0.5)
    return f" (did you mean: {', '.join(close)}?)" if close else ""


def _escape_char(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def escape_controls(text: str) -> str:
    """`text` with every control/separator/bidi character written as a visible \\xNN or \\uNNNN escape."""
    return _UNSAFE.sub(_escape_char, text)


def safe_line(value: object, limit: int = 80) -> str:
    """One printable line for a terminal or a comment: controls escaped, cut to `limit` characters."""
    text = escape_controls(str(value))
    if len(text) > limit:
        text = f"{text[:limit - 1]}…(+{len(text) - limit + 1} chars)"
    return text


def check_name(value: str, what: str = "name") -> str:
    """`value` unchanged if it is a one-line printable name of at most MAX_NAME_CHARS; ValueError otherwise
    (pydantic validators raise it; the message never echoes the raw value)."""
    m = _UNSAFE.search(value)
    if m:
        raise ValueError(f"{what} holds a control character ({_escape_char(m)} at position {m.start()}): "
                         "use a one-line name of printable characters")
    if len(value) > MAX_NAME_CHARS:
        raise ValueError(f"{what} is {len(value):,} characters long, over the {MAX_NAME_CHARS} allowed: "
                         "use a shorter name")
    return value


def yaml_quote(text: str) -> str:
    """A YAML double-quoted scalar holding `text` on one line (controls and separators escaped; YAML 1.1
    double-quoted escapes \\xNN and \\uNNNN, which PyYAML and MaxText's loader read back exactly)."""
    body = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + _UNSAFE.sub(_escape_char, body) + '"'


def error_line(message: object, limit: int = 600) -> str:
    """A terminal-safe one-line error: controls escaped, runs of blanks shrunk, every word longer than 80
    characters cut in its middle (so the 'what to do' tail survives a 100 KB name), at most `limit` chars."""
    text = escape_controls(str(message))
    text = re.sub(r"\s{4,}", lambda m: f" [{len(m.group())} blanks] ", text)
    text = re.sub(r"\S{81,}", lambda m: f"{m.group()[:60]}…(+{len(m.group()) - 75} chars)…{m.group()[-15:]}", text)
    return text if len(text) <= limit else f"{text[:limit - 1]}…"
