"""Gymnasium spaces for text observations and actions."""

from functools import cache

from gymnasium.spaces import Text

# Tab, newline and every Basic Multilingual Plane character outside the control and
# surrogate ranges: wide enough that `check_env` accepts real tool output (box-drawing
# characters, accents, CJK) while staying a finite charset, as `Text` requires.
WIDE_CHARSET: str = (
    "\t\n"
    + "".join(chr(code) for code in range(0x20, 0xD800) if not 0x7F <= code < 0xA0)
    + "".join(chr(code) for code in range(0xE000, 0xFFFE))
)


@cache
def text_space(max_length: int) -> Text:
    """A `Text` space of at most `max_length` characters over `WIDE_CHARSET`.

    Cached: building the 63k-character set takes ~0.2 s, and every env instance needs one.
    """
    return Text(max_length=max_length, min_length=0, charset=WIDE_CHARSET)
