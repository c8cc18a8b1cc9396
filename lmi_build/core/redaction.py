"""The one rule that keeps credentials out of everything lmi-build shows or writes: the console,
``--json``, saved plans, manifests, vendor logs and error messages.

A value is hidden when its key names a credential (``option.hf_token``, ``api-key``,
``private_key``, ``authorization``), when it looks like one (a Hugging Face ``hf_...`` token, an
AWS access key id, a GitHub token, ``Bearer ...``, ``--hf-token=...`` inside a longer value), when
it is the password part of a URL (``https://user:pw@host``, ``s3://KEY:SECRET@bucket``), or when it
contains the value of a credential variable of the environment. A key that is itself a token is
hidden too. The same function serves every output path (``output.Output`` applies it to every line
and every JSON result), so no path can forget it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "***"

# The environment variables that hold credentials lmi-build itself uses; never passed to vendor
# tools, never written anywhere.
SECRET_ENV_VARS = frozenset({
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
})

# The names of credentials. As a key's whole last word: "tokens_per_block" and "max_tokens" are not
# secrets, nor is a "per_token" switch (option.smoothquant_per_token, which SmoothQuant builds write).
_SECRET_NAMES = (
    r"hf[_-]?token|(?<!per_)token|auth[_-]?token|access[_-]?token|session[_-]?token|secret|access[_-]?key|"
    r"secret[_-]?key|client[_-]?secret|secret[_-]?access[_-]?key|access[_-]?key[_-]?id|password|passwd|"
    r"api[_-]?key|private[_-]?key|authorization|credentials?|bearer"
)
_SECRET_KEY = re.compile(rf"(?:^|[._-])(?:{_SECRET_NAMES})$", re.IGNORECASE)
# Token shapes: Hugging Face, AWS access key ids, GitHub, Slack-style, and PEM private keys.
_SECRET_VALUE = re.compile(
    r"\bhf_[A-Za-z0-9]{30,}\b|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bgh[pousr]_[A-Za-z0-9]{30,}\b"
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)"
)
# "Bearer <token>" and "Basic <token>" in a header-like value. The credential has a digit or base64's
# "+"/"=" ("Basic dXNlcjpwdw==", "Bearer eyJhbGciOi1..."): the words after "Basic configuration" or
# "token embeddings" are not credentials.
_AUTH_SCHEME = re.compile(r"\b(Bearer|Basic|Token)\s+(?=[A-Za-z._~/-]*[0-9+=])[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
# A credential given inside a longer value, as a dashed flag ("--hf-token=abc", "--api_key abc") or an
# assignment ("HF_TOKEN=abc", "option.hf_token: abc", "?token=abc", '"api_key": "abc"'); the name is a
# secret key by ``is_secret_key``, the one rule for option keys too. The name is a whole word: the
# last part of a path is not one ("/etc/passwd is not a directory", "/home/me/secret: not found"), and
# only a dashed flag takes its value after a space (in "the password is wrong" nothing is given).
_SECRET_FLAG = re.compile(
    rf"(?<![\w./\\-])(?:--?(?P<flag>(?:[\w-]*[_-])?(?:{_SECRET_NAMES}))(?![A-Za-z0-9])(?P<flag_sep>\s*=\s*|\s+)"
    rf"|(?P<key>(?:[A-Za-z_][\w.-]*[._-])?(?:{_SECRET_NAMES}))(?![A-Za-z0-9])(?P<key_sep>[\"']?\s*[=:]\s*))"
    r"(?P<value>\"[^\"]*\"|'[^']*'|[^\s,;&]+)",
    re.IGNORECASE,
)
# The user:password part of a URL (https://user:pw@host/..., s3://KEY:SECRET@bucket/...).
_URL_CREDENTIALS = re.compile(r"(?<=://)(?:(?P<user>[^/@:\s]*):)?[^/@\s]+@")
# Credential-like environment variables beyond the fixed list (GITHUB_TOKEN, WANDB_API_KEY, ...).
_SECRET_ENV_NAME = re.compile(r"((^|_)TOKEN$|SECRET|PASSWORD|PASSWD|ACCESS_KEY|API_KEY|CREDENTIAL|PRIVATE_KEY)",
                              re.IGNORECASE)
# A cheap first look: every pattern above needs one of these pieces, so a string without any of
# them (nearly every option value and log line) skips the four substitutions. It runs on the
# lower-cased text because a case-insensitive alternation is about nine times slower in ``re``.
_MAY_HOLD_SECRET = re.compile(
    r"hf_|akia|asia|gh[pousr]_|xox|-----begin|bearer|basic|token|api|access|secret|passw|private|auth|://"
)
# Values shorter than this are not treated as secrets: a value such as 1 would match everywhere.
_MIN_SECRET_LEN = 8


def is_secret_key(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Values of the credential variables of ``env`` (long enough to be worth searching for)."""
    return [value for name, value in env.items() if name in SECRET_ENV_VARS and len(value) >= _MIN_SECRET_LEN]


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of every credential variable of the environment (HF_TOKEN, AWS_SECRET_ACCESS_KEY,
    GITHUB_TOKEN, ...), longest first, so that a longer secret is replaced before its prefix."""
    env = os.environ if environ is None else environ
    found = set(secret_values(env))
    found.update(v for name, v in env.items() if _SECRET_ENV_NAME.search(name) and len(v) >= _MIN_SECRET_LEN)
    return sorted(found, key=len, reverse=True)


_COMMAND_SECRETS: list[str] | None = None


def command_secrets() -> list[str]:
    """``environment_secrets()`` read once per command line, for every channel that prints or writes
    (the console, --events, annotations, step summaries); ``forget_command_secrets`` reads anew."""
    global _COMMAND_SECRETS
    if _COMMAND_SECRETS is None:
        _COMMAND_SECRETS = environment_secrets()
    return _COMMAND_SECRETS


def forget_command_secrets() -> None:
    global _COMMAND_SECRETS
    _COMMAND_SECRETS = None


def is_secret_env_name(name: str) -> bool:
    """A variable that holds a credential: the fixed list or a credential-like name."""
    return name in SECRET_ENV_VARS or _SECRET_ENV_NAME.search(name) is not None


def _hide_given_secret(match: re.Match[str]) -> str:
    """The value of a flag or an assignment whose name is a secret key hidden."""
    value = match.group("value")
    # "Authorization: Bearer ***": the scheme's own credential is hidden already.
    hidden = value == REDACTED or (value.lower() in ("bearer", "basic", "token")
                                   and match.string.startswith(f" {REDACTED}", match.end()))
    return match.group(0) if hidden else match.group(0)[: match.start("value") - match.start()] + REDACTED


def _hide_url_credentials(match: re.Match[str]) -> str:
    """``user:password@`` keeps the user name (it says whose credentials); a lone token is hidden whole."""
    user = match.group("user")
    return f"{user}:{REDACTED}@" if user is not None else f"{REDACTED}@"


def redact_text(text: str, known_secrets: Iterable[str] = ()) -> str:
    """``text`` (a message, a log line, a URL, a value) with every credential shape hidden."""
    may_hold_secret = _MAY_HOLD_SECRET.search(text.lower()) is not None
    redacted = _hide_credential_shapes(text) if may_hold_secret else text
    for secret in known_secrets:
        if secret:
            redacted = redacted.replace(secret, REDACTED)
    return redacted


def _hide_credential_shapes(text: str) -> str:
    redacted = _SECRET_VALUE.sub(REDACTED, text)
    redacted = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)} {REDACTED}", redacted)
    redacted = _SECRET_FLAG.sub(_hide_given_secret, redacted)
    return _URL_CREDENTIALS.sub(_hide_url_credentials, redacted)


def redact(key: str, value: str, known_secrets: Iterable[str] = ()) -> str:
    """``value`` as it may be shown for ``key``."""
    return REDACTED if is_secret_key(key) else redact_text(value, known_secrets)


def redact_key(key: str, known_secrets: Iterable[str] = ()) -> str:
    """A key as it may be shown: a token typed where a key belongs is hidden too."""
    return redact_text(key, known_secrets)


def redact_tree(value: Any, known_secrets: Iterable[str] | None = None, *, key: str = "") -> Any:
    """A JSON-like tree with every string redacted (and secret-named keys' values hidden)."""
    secrets = list(environment_secrets() if known_secrets is None else known_secrets)
    return _redact_node(value, secrets, key)


def _redact_node(value: Any, secrets: list[str], key: str) -> Any:
    if isinstance(value, str):
        return redact(key, value, secrets)
    if isinstance(value, Mapping):
        return {redact_key(str(k), secrets): _redact_node(v, secrets, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_node(item, secrets, key) for item in value]
    return value
