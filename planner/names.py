"""Name normalisation and did-you-mean suggestions shared by every catalog."""

from __future__ import annotations

import difflib
import re


def normalise(name: str) -> str:
    """Case-, space- and punctuation-insensitive key: 'Llama-3.1 70B' -> 'llama3170b'."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def did_you_mean(name: str, choices: list[str], n: int = 3) -> str:
    """' (did you mean: a, b?)' or '' when nothing is close."""
    close = difflib.get_close_matches(name.lower(), choices, n=n, cutoff=0.5)
    return f" (did you mean: {', '.join(close)}?)" if close else ""
