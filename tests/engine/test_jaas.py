"""sasl.jaas.config read as Java's JaasConfig (StreamTokenizer) and JaasContext read it.
Named after Java's JaasConfigTest / JaasContextTest cases; a bounded property test
renders entries the way a user would write them and reads them back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kctl.config import ProducerConfig
from kctl.consumer_config import ConsumerConfig
from kctl.errors import ConfigError
from kctl.jaas import CONTROL_FLAGS, parse_jaas_config

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


# -- the audit's three cases, through the client configs ------------------------------

def _sasl(client, mechanism, jaas):
    return client.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                                   "sasl.jaas.config": jaas}).security


@pytest.mark.parametrize("client", [ProducerConfig, ConsumerConfig])
def test_unquoted_values_are_bare_words(client):
    security = _sasl(client, "SCRAM-SHA-512", f"{SCRAM} required username=alice password=alice-secret;")
    assert (security.sasl_username, security.sasl_password) == ("alice", "alice-secret")


@pytest.mark.parametrize("client", [ProducerConfig, ConsumerConfig])
def test_two_login_modules_are_refused_as_java_refuses_them(client):
    two = (f'{SCRAM} required username="alice" password="alice-secret"; '
           f'{PLAIN} required username="x" password="y";')
    with pytest.raises(ConfigError, match="contains 2 login modules, should be 1 module") as info:
        _sasl(client, "SCRAM-SHA-512", two)
    assert "alice-secret" not in str(info.value) and '"y"' not in str(info.value)


@pytest.mark.parametrize("client", [ProducerConfig, ConsumerConfig])
def test_backslash_escapes_in_quoted_values(client):
    security = _sasl(client, "PLAIN", f'{PLAIN} required username="u" password="a\\\\b";')
    assert security.sasl_password == "a\\b"


# -- Java's JaasConfigTest ------------------------------------------------------------------

def test_config_no_options():
    assert parse_jaas_config(f"{PLAIN} required;") == (PLAIN, {})


@pytest.mark.parametrize("flag", [*CONTROL_FLAGS, "REQUIRED", "Optional"])
def test_control_flag(flag):
    assert parse_jaas_config(f"{PLAIN} {flag} a=b;") == (PLAIN, {"a": "b"})


def test_numeric_option_without_and_with_quotes():
    assert parse_jaas_config(f"{PLAIN} required option1=3;")[1] == {"option1": "3"}
    assert parse_jaas_config(f'{PLAIN} required option1="3";')[1] == {"option1": "3"}


def test_quoted_option_names_and_values_and_single_quotes():
    assert parse_jaas_config(f"""{PLAIN} required "user name"='it is' "x"="a;b=c/d";""")[1] == \
        {"user name": "it is", "x": "a;b=c/d"}


def test_escapes_as_stream_tokenizer_reads_them():
    text = f'{PLAIN} required a="\\"q\\" \\t\\n \\101\\1012 \\400 \\z";'
    assert parse_jaas_config(text)[1] == {"a": '"q" \t\n A\x412 \x200 z'}


def test_comments_and_line_breaks_are_blanks():
    text = f"// a comment\n{PLAIN} /* here */ required\n  username=u // the user\n  password=p;"
    assert parse_jaas_config(text) == (PLAIN, {"username": "u", "password": "p"})


def test_a_repeated_option_keeps_its_last_value():
    assert parse_jaas_config(f"{PLAIN} required a=1 a=2;")[1] == {"a": "2"}


@pytest.mark.parametrize("text,message", [
    ("", "names no login module"),
    ("   /* only a comment */ ", "names no login module"),
    (f"{PLAIN}", "no control flag"),
    (f"{PLAIN} mandatory a=b;", "not a control flag"),
    (f"{PLAIN} required a;", "option 1 has no value"),
    (f"{PLAIN} required a=b c;", "option 2 has no value"),
    (f"{PLAIN} required a=;", "option 1 has no value"),
    (f"{PLAIN} required a=b", "does not end its entry with ';'"),
    (f"{PLAIN} required a=b/c;", "an unquoted '/' starts a comment"),
    (f'{PLAIN} required a="b;', "does not end its entry with ';'"),   # the quote runs to the end
    (f"{PLAIN} required ==b;", "option 1 has no name"),
    (f"{PLAIN} required a=b; {PLAIN} required c=d;", "contains 2 login modules, should be 1 module"),
])
def test_malformed_entries_are_one_line_without_the_text(text, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_jaas_config(text)
    assert "\n" not in str(info.value)


# -- property: what a user writes is what Java reads -----------------------------------------

_WORD_CHARS = st.characters(min_codepoint=33, max_codepoint=0x2FF,
                            blacklist_characters=';="\'/', blacklist_categories=("Cs",)).filter(
    lambda c: not 0x81 <= ord(c) <= 0x9F)
_WORD = st.text(_WORD_CHARS, min_size=1, max_size=12)
_VALUE = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
_BLANK = st.sampled_from([" ", "  ", "\n", "\t", " /* c */ ", " // c\n", "\r\n"])


def _quote(value: str, quote: str) -> str:
    out = value.replace("\\", "\\\\").replace(quote, "\\" + quote)
    return quote + out.replace("\n", "\\n").replace("\r", "\\r") + quote


@settings(max_examples=300, deadline=None)
@given(_WORD, st.sampled_from([*CONTROL_FLAGS, "REQUIRED"]),
       st.lists(st.tuples(_WORD, _VALUE, st.sampled_from(['"', "'", ""])), max_size=5, unique_by=lambda t: t[0]),
       _BLANK)
def test_written_entries_read_back(module, flag, options, blank):
    parts = [module, flag]
    for key, value, quote in options:
        bare = quote == "" and value and all(not (c <= " " or c in ';="\'/' or 0x81 <= ord(c) <= 0x9F)
                                             for c in value)
        parts.append(f"{key}{blank}={blank}{value if bare else _quote(value, quote or chr(34))}")
    text = blank.join(parts) + blank + ";" + blank
    assert parse_jaas_config(text) == (module, dict((k, v) for k, v, _ in options))


@settings(max_examples=400, deadline=None)
@given(st.text(st.sampled_from('ab =;"\'/\\*\n\r\t\x85x1'), max_size=40))
def test_any_text_is_an_entry_or_one_clear_line(text):
    try:
        module, options = parse_jaas_config(text)
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    assert module and all(isinstance(k, str) and isinstance(v, str) for k, v in options.items())


# -- oracle: the JDK's own StreamTokenizer, where a JDK is installed ---------------------------

def _hex(text: str) -> str:
    return "".join(f"{ord(c):04x}" for c in text)


def _near_entries(rng, n: int) -> list[str]:
    """Entries as users write them, and broken ones: blanks and comments between tokens,
    bare and quoted values with escapes, unclosed quotes, missing ';', two entries."""
    chars = list('ab =;"\'/\\*\n\r\t x1') + ["\x85", "\x80", "\xa0", "\u0131", "\x00", "07", "4"]

    def value() -> str:
        if rng.random() < 0.3:
            return "".join(rng.choice(chars + ["a", "b"]) for _ in range(rng.randint(0, 6)))
        q = rng.choice(['"', "'"])
        body = "".join(rng.choice(chars + ["\\n", "\\t", "\\101", "\\400", "\\7x", "\\\\", "\\" + q, "é"])
                       for _ in range(rng.randint(0, 6)))
        return q + body + (q if rng.random() < 0.9 else "")

    out = []
    for _ in range(n):
        def sep() -> str:
            return rng.choice([" ", "  ", "\n", "\t", " /* c */ ", " // c\n", "\r\n", ""])
        parts = [rng.choice([PLAIN, "x", '"q m"', "a/b"]),
                 rng.choice(["required", "Optional", "requisite", "req", "requıred"])]
        parts += [rng.choice(["username", "password", "k", '"k k"']) + sep() + "=" + sep() + value()
                  for _ in range(rng.randint(0, 3))]
        text = sep().join(parts) + sep() + (";" if rng.random() < 0.9 else "") + sep()
        out.append(text + text if rng.random() < 0.1 else text)
    return out


def test_reads_what_javas_stream_tokenizer_reads(tmp_path):
    """Differential: 3000 near-entries through the JDK's StreamTokenizer set up as JaasConfig
    sets it up (tests/engine/java/JaasOracle.java) and through kctl; same verdict, same
    module and options."""
    import random
    import shutil
    import subprocess
    from pathlib import Path

    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK: the Java oracle cannot run")
    source = Path(__file__).parent / "java" / "JaasOracle.java"
    subprocess.run(["javac", "-d", str(tmp_path), str(source)], check=True, timeout=120)
    texts = _near_entries(random.Random(368), 3000)
    java = subprocess.run(["java", "-cp", str(tmp_path), "JaasOracle"], check=True, timeout=120,
                          input="".join(_hex(t) + "\n" for t in texts), capture_output=True,
                          text=True).stdout.splitlines()
    assert len(java) == len(texts)
    valid = 0
    for text, verdict in zip(texts, java):
        try:
            module, options = parse_jaas_config(text)
        except ConfigError:
            assert verdict.startswith("ERR"), (text, verdict)
            continue
        valid += 1
        assert verdict == "OK " + " ".join(
            [_hex(module)] + [f"{_hex(k)}:{_hex(v)}" for k, v in sorted(options.items())]), text
    assert valid > 300      # the sample holds valid entries, not only broken ones
