"""Keep credentials out of everything lmi-build shows: tables, JSON, messages, manifests.

A value is hidden when its key names a credential (``option.hf_token``, ``...secret_access_key``),
when it looks like one (a Hugging Face ``hf_...`` token, an AWS access key id), or when it
contains the value of a credential variable of the environment (a token pasted into a URL).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from lmi_build.options.env import SECRET_ENV_VARS

REDACTED = "***"

# Whole last word of the key: "tokens_per_block" and "max_tokens" are not secrets, nor is a
# "per_token" switch (option.smoothquant_per_token, which SmoothQuant builds write).
_SECRET_KEY = re.compile(
    r"(?:^|[._])(?:hf_token|(?<!per_)token|auth_token|access_token|session_token|secret|secret_key|"
    r"secret_access_key|access_key_id|password|passwd|api_key|credentials?)$",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(r"\bhf_[A-Za-z0-9]{30,}\b|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")
# The user:password part of a URL (https://user:pw@host/..., an --endpoint-url with credentials).
_URL_CREDENTIALS = re.compile(r"(?<=://)(?:(?P<user>[^/@:\s]*):)?[^/@\s]+@")
# Credential-like environment variables beyond the fixed list (GITHUB_TOKEN, WANDB_API_KEY, ...).
_SECRET_ENV_NAME = re.compile(r"((^|_)TOKEN$|SECRET|PASSWORD|PASSWD|ACCESS_KEY|API_KEY|CREDENTIAL)", re.I)
# Values shorter than this are not treated as secrets: a value such as 1 would match everywhere.
_MIN_SECRET_LEN = 8


def is_secret_key(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Values of the credential variables of ``env`` (long enough to be worth searching for)."""
    return [value for name, value in env.items() if name in SECRET_ENV_VARS and len(value) >= 8]


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of every credential variable of the environment (HF_TOKEN, AWS_SECRET_ACCESS_KEY,
    GITHUB_TOKEN, ...), longest first, so that a longer secret is replaced before its prefix."""
    env = os.environ if environ is None else environ
    found = set(secret_values(env))
    found.update(v for name, v in env.items() if _SECRET_ENV_NAME.search(name) and len(v) >= _MIN_SECRET_LEN)
    return sorted(found, key=len, reverse=True)


def is_secret_env_name(name: str) -> bool:
    """A variable that holds a credential: the fixed list or a credential-like name."""
    return name in SECRET_ENV_VARS or _SECRET_ENV_NAME.search(name) is not None


def redact_text(text: str, known_secrets: Iterable[str] = ()) -> str:
    """``text`` (a message, a log line, a URL) with tokens, URL passwords and known secrets hidden."""
    return redact("", text, known_secrets)


def _hide_url_credentials(match: re.Match[str]) -> str:
    """``user:password@`` keeps the user name (it says whose credentials); a lone token is hidden whole."""
    user = match.group("user")
    return f"{user}:{REDACTED}@" if user is not None else f"{REDACTED}@"


def redact(key: str, value: str, known_secrets: Iterable[str] = ()) -> str:
    """``value`` as it may be shown for ``key``."""
    if is_secret_key(key):
        return REDACTED
    redacted = _URL_CREDENTIALS.sub(_hide_url_credentials, _SECRET_VALUE.sub(REDACTED, value))
    for secret in known_secrets:
        if secret:
            redacted = redacted.replace(secret, REDACTED)
    return redacted
