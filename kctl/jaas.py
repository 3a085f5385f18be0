"""``sasl.jaas.config`` read as the Java client reads it (``JaasConfig``, ``JaasContext``).

How this works: Java splits the value with a ``java.io.StreamTokenizer`` set up so that
every character from ``!`` to U+0080 and from U+00A0 up is part of a word, except
``;`` and ``=`` (tokens of their own), ``"`` and ``'`` (quotes) and ``/`` (comments:
``//`` and a lone ``/`` to the end of the line, ``/* ... */``); characters up to the
space are blanks, and U+0081..U+009F are single-character tokens. A quoted value ends
at its closing quote or at the end of the line, and takes the tokenizer's escapes
(``\\n``, ``\\t``, octal ``\\101``...; a backslash before any other character is that
character, so ``"a\\\\b"`` is ``a\\b`` and ``"a\\"b"`` is ``a"b``). A bare word is a
value too (``username=alice``). The grammar is then

    <login module class> <control flag> (<name>=<value>)* ;

repeated, and the client config must hold exactly one entry (Java: "JAAS config
property contains 2 login modules, should be 1 module"). A repeated option keeps its
last value (a ``HashMap``).

Errors are ``ConfigError`` lines that never quote the value, its login module, option
names or flag (a password with a blank in it, unquoted, would be read as a name).
Java takes a name that is not a word (``==v``) as a null key; kctl refuses it.
"""

from __future__ import annotations

from typing import Final

from kctl.errors import ConfigError

__all__ = ["CONTROL_FLAGS", "parse_jaas_config"]

CONTROL_FLAGS: Final = ("required", "requisite", "sufficient", "optional")

_FLAGS_UPPER: Final = frozenset(f.upper() for f in CONTROL_FLAGS)
_EOF: Final = -1
_WORD: Final = -3
_EXAMPLE: Final = ("'org.apache.kafka.common.security.plain.PlainLoginModule required "
                   'username="alice" password="...";\'')
_ESCAPES: Final = {"a": "\x07", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\x0b"}


def _is_word(ch: str) -> bool:
    """A word character of Java's JaasConfig tokenizer (not a blank, quote, ';', '=', '/')."""
    c = ord(ch)
    if c >= 256:
        return True
    return (32 < c <= 128 or c >= 160) and ch not in ';="\'/'


def _is_blank(ch: str) -> bool:
    return ord(ch) <= 32


class _Tokenizer:
    """The slice of ``java.io.StreamTokenizer`` JaasConfig configures: ``next()`` returns
    the token type (``_EOF``, ``_WORD``, a quote character or an ordinary character's
    code) and leaves a word's or quoted string's text in ``sval`` (``None`` otherwise)."""

    __slots__ = ("text", "pos", "ttype", "sval")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.ttype = _EOF
        self.sval: str | None = None

    def _read(self) -> str | None:
        if self.pos >= len(self.text):
            self.pos += 1          # reading past the end stays past it (a pushed-back EOF)
            return None
        ch = self.text[self.pos]
        self.pos += 1
        return ch

    def _unread(self) -> None:
        """Steps back over the character last read (an end of text too)."""
        self.pos -= 1

    def next(self) -> int:
        self.sval = None
        while True:
            ch = self._read()
            while ch is not None and _is_blank(ch):
                ch = self._read()
            if ch is None:
                self.ttype = _EOF
                return _EOF
            if _is_word(ch):
                start = self.pos - 1
                while (nxt := self._read()) is not None and _is_word(nxt):
                    pass
                self._unread()
                self.sval = self.text[start:self.pos]
                self.ttype = _WORD
                return _WORD
            if ch in "\"'":
                self.sval = self._quoted(ch)
                self.ttype = ord(ch)
                return self.ttype
            if ch == "/":
                nxt = self._read()
                if nxt is None or (nxt == "*" and not self._skip_block_comment()):
                    self.ttype = _EOF
                    return _EOF
                if nxt != "*":
                    # '//' and a lone '/' (a comment character) alike: the rest of the line
                    # after the character that follows the '/' (Java reads that one first).
                    self._skip_line()
                continue
            self.ttype = ord(ch)
            return self.ttype

    def _skip_line(self) -> None:
        while (ch := self._read()) is not None and ch not in "\r\n":
            pass
        self._unread()

    def _skip_block_comment(self) -> bool:
        prev = None
        while (ch := self._read()) is not None:
            if ch == "/" and prev == "*":
                return True
            prev = ch
        return False

    def _quoted(self, quote: str) -> str:
        out: list[str] = []
        d = self._read()
        while d is not None and d != quote and d not in "\r\n":
            if d != "\\":
                out.append(d)
                d = self._read()
                continue
            c = self._read()
            if c is not None and "0" <= c <= "7":
                value = ord(c) - 48
                c2 = self._read()
                if c2 is not None and "0" <= c2 <= "7":
                    value = value * 8 + ord(c2) - 48
                    c3 = self._read()
                    if c3 is not None and "0" <= c3 <= "7" and c <= "3":
                        value = value * 8 + ord(c3) - 48
                        d = self._read()
                    else:
                        d = c3
                else:
                    d = c2
                out.append(chr(value))
                continue
            out.append("\uffff" if c is None else _ESCAPES.get(c, c))   # Java: (char) -1 at the end
            d = self._read()
        if d is not None and d != quote:
            self._unread()        # a line end closes the string and is read again
        return "".join(out)


def _entry(tok: _Tokenizer) -> tuple[str, dict[str, str]]:
    """One ``<module> <flag> (<name>=<value>)* ;`` entry, its first token already read."""
    module = tok.sval
    if not module:
        raise ConfigError("sasl.jaas.config does not start with a login module class, as in " + _EXAMPLE)
    if tok.next() == _EOF:
        raise ConfigError("sasl.jaas.config has a login module but no control flag "
                          f"({', '.join(CONTROL_FLAGS)}), as in " + _EXAMPLE)
    if tok.sval is None or tok.sval.upper() not in _FLAGS_UPPER:    # Java: toUpperCase(ROOT)
        raise ConfigError("sasl.jaas.config: the word after the login module is not a control flag "
                          f"({', '.join(CONTROL_FLAGS)})")
    options: dict[str, str] = {}
    count = 0
    while tok.next() != _EOF and tok.ttype != ord(";"):
        count += 1
        key = tok.sval
        if tok.next() != ord("=") or tok.next() == _EOF or tok.sval is None:
            raise ConfigError(
                f"sasl.jaas.config: option {count} has no value (name=value expected; "
                "quote a value that holds blanks, ';', '=', '/' or quotes)")
        if key is None:
            raise ConfigError(f"sasl.jaas.config: option {count} has no name")
        options[key] = tok.sval
    if tok.ttype != ord(";"):
        raise ConfigError("sasl.jaas.config does not end its entry with ';' (the Java client refuses it; "
                          "an unquoted '/' starts a comment to the end of the line)")
    return module, options


def parse_jaas_config(text: str) -> tuple[str, dict[str, str]]:
    """``sasl.jaas.config`` into (login module class, options), as Java reads it; exactly
    one entry. Raises ``ConfigError`` without echoing the text."""
    tok = _Tokenizer(text)
    entries = []
    while tok.next() != _EOF:
        entries.append(_entry(tok))
    if not entries:
        raise ConfigError("sasl.jaas.config names no login module, as in " + _EXAMPLE)
    if len(entries) != 1:
        raise ConfigError(f"sasl.jaas.config contains {len(entries)} login modules, should be 1 module "
                          "(as the Java client says): keep the one for sasl.mechanism")
    return entries[0]
