"""Secrets never reach any output: every path goes through ``lmi_build/core/redaction.py``.

Each case leaked before (issue: secrets that still reach output): credentials inside S3 and HTTPS
URLs, options named like credentials in other spellings, a token used as a key, a token flag inside
a longer value, and an S3 URL whose prefix is a token.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lmi_build.core.redaction import REDACTED, redact_text, redact_tree
from tests.hostile import World, make_world

TOKEN = "hf_" + "Zq7" * 12
AWS_SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEYab"


@pytest.fixture
def world(tmp_path: Path) -> World:
    found = make_world(tmp_path)
    found.secrets["TOKEN_IN_CASE"] = TOKEN
    found.secrets["SECRET_IN_CASE"] = AWS_SECRET
    return found


def _no_secret(world: World, *args: str) -> str:
    before = world.snapshot()
    result = world.run(*args)
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output[-2000:]
    for secret in (TOKEN, AWS_SECRET, "pa55word-123"):
        assert secret not in output, f"{secret} leaked by {args}: {output[-2000:]}"
    after = world.snapshot()
    assert {k: v for k, v in after.items() if not k.startswith(("cache", "work/out"))} == \
        {k: v for k, v in before.items() if not k.startswith(("cache", "work/out"))}
    return output


def test_s3_url_with_credentials(world: World) -> None:
    output = _no_secret(world, "publish", "./model", f"s3://AKIAIOSFODNN7EXAMPLE:{AWS_SECRET}@bucket/x")
    assert "credentials" in output
    _no_secret(world, "plan", "hf", "--model", f"s3://AKIAIOSFODNN7EXAMPLE:{AWS_SECRET}@bucket/model")


@pytest.mark.parametrize("how", ["option", "env"])
def test_https_password_in_the_model_id(world: World, how: str) -> None:
    url = "https://alice:pa55word-123@example.com/models/llama"
    if how == "option":
        _no_secret(world, "plan", "hf", "--model", "./model", "-o", f"option.model_id={url}", "--json")
    else:
        world.env["HF_MODEL_ID"] = url
        _no_secret(world, "config", "show", "--json")


@pytest.mark.parametrize("key", ["option.api-key", "option.private_key", "option.authorization",
                                 "option.client_secret", "option.bearer"])
@pytest.mark.parametrize("command", ["plan", "config"])
def test_credential_named_options(world: World, key: str, command: str) -> None:
    args = ("plan", "hf", "--model", "./model") if command == "plan" else ("config", "show")
    _no_secret(world, *args, "-o", f"{key}={AWS_SECRET}")


def test_a_token_used_as_a_key_and_inside_a_value(world: World) -> None:
    _no_secret(world, "plan", "hf", "--model", "./model", "-o", f"option.{TOKEN}=1")
    _no_secret(world, "plan", "hf", "--model", "./model", "-o", "option.custom_args=--hf-token=plainvalue123 --x 1",
               "--json")
    output = _no_secret(world, "config", "show", "-o", "option.custom_args=--api_key plainvalue123")
    assert "plainvalue123" not in output


def test_an_s3_url_whose_prefix_is_a_token(world: World) -> None:
    _no_secret(world, "verify", f"s3://no-such-bucket-here/{TOKEN}/x", "--endpoint-url", "http://127.0.0.1:9")


def test_one_rule_for_text_and_trees() -> None:
    text = (f"Authorization: Bearer abcdefgh12345678 s3://K:{AWS_SECRET}@b/p --token={TOKEN} "
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----")
    shown = redact_text(text)
    assert AWS_SECRET not in shown and TOKEN not in shown and "abcdefgh12345678" not in shown
    assert "MIIE" not in shown and shown.count(REDACTED) >= 4
    tree = redact_tree({"option.api_key": "x" * 20, TOKEN: {"nested": [f"https://u:{AWS_SECRET}@h"]}}, [])
    assert tree["option.api_key"] == REDACTED and AWS_SECRET not in str(tree) and TOKEN not in str(tree)
    # Not secrets: ordinary knobs keep their values.
    assert redact_text("option.max_tokens=512 tokens_per_block=64 option.smoothquant_per_token=true") == \
        "option.max_tokens=512 tokens_per_block=64 option.smoothquant_per_token=true"


@pytest.mark.parametrize("secret_text, hidden", [
    (TOKEN, TOKEN),
    ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("ASIAIOSFODNN7EXAMPLE", "ASIAIOSFODNN7EXAMPLE"),
    ("ghp_" + "a1" * 18, "a1a1a1a1a1"),
    ("xoxb-1234567890-abcdef", "1234567890-abcdef"),
    ("-----BEGIN PRIVATE KEY-----\nMIIEvQ\n-----END PRIVATE KEY-----", "MIIEvQ"),
    ("BEARER abcdefgh12345678", "abcdefgh12345678"),
    ("basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA"),
    ("Token abcdefgh12345678", "abcdefgh12345678"),
    ("--HF-TOKEN=abc123", "abc123"),
    ("API_KEY: abc123", "abc123"),
    ("--access-key abc123", "abc123"),
    ("Secret=abc123", "abc123"),
    ("PASSWD=abc123", "abc123"),
    ("private_key=abc123", "abc123"),
    ("Authorization=abc123", "abc123"),
    ("HTTPS://user:pa55word-123@host/x", "pa55word-123"),
    ("s3://onlytoken@bucket/x", "onlytoken"),
])
def test_every_credential_shape_is_hidden_in_any_case(secret_text: str, hidden: str) -> None:
    """Each shape alone, in a line of ordinary text: the cheap first look must never skip one."""
    shown = redact_text(f"loading the model; {secret_text} ; done")
    assert hidden not in shown and REDACTED in shown, shown


# Ordinary text that names a credential's kind, or a file named like one, and gives none (issue 42:
# "/etc/passwd is not a directory" printed as "/etc/passwd *** not a directory").
ORDINARY = [
    "/etc/passwd is not a directory",
    "/etc/passwd: not a directory",
    "/home/me/secret: not found; /srv/token.txt is empty",
    "the password is wrong; the token expired; the secret key is missing",
    "set the token in HF_TOKEN, or run huggingface-cli login",
    "Basic configuration loaded; Token embeddings are tied; the bearer of the news",
    "auth failed for the bucket; access key denied; private key file unreadable",
    "option.max_tokens=512 tokens_per_block=64 option.smoothquant_per_token=true --max-num-tokens 8192",
    "the tokenizer: llama; api: v2; secret.txt: missing",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_words_are_never_masked(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize("debug", [False, True])
def test_a_url_password_is_hidden_with_and_without_debug(debug: bool) -> None:
    from tests.cli_process import run_lmi_build

    flags = ["--debug"] if debug else []
    result = run_lmi_build(*flags, "plan", "hf", "--model", "https://user:PASSWORD@huggingface.co/org/m")
    shown = result.stdout + result.stderr
    assert result.returncode == 1 and "PASSWORD" not in shown and "user:***@huggingface.co" in shown, shown
    assert ("Traceback" in shown) is debug
    named = run_lmi_build(*flags, "plan", "trtllm", "--model", "/etc/passwd")
    assert "/etc/passwd is not a directory" in named.stderr, named.stderr


def test_library_logs_under_debug_are_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from lmi_build.reporting import output

    out = output.set_mode(output.Mode.HUMAN)
    output.set_debugging(True)
    try:
        with out.library_output():
            logging.getLogger("huggingface_hub").warning("GET https://u:pa55word-123@host/x with token=%s", TOKEN)
            print(f"Authorization: Bearer {AWS_SECRET}")
    finally:
        output.reset()
    shown = capsys.readouterr().err
    assert "debug: huggingface_hub: GET https://u:***@host/x with token=***" in shown, shown
    assert "pa55word-123" not in shown and TOKEN not in shown and AWS_SECRET not in shown
