"""Keep credentials out of everything lmi-build shows: tables, JSON, messages, manifests.

A value is hidden when its key names a credential (``option.hf_token``, ``...secret_access_key``),
when it looks like one (a Hugging Face ``hf_...`` token, an AWS access key id), or when it
contains the value of a credential variable of the environment (a token pasted into a URL).
"""

from __future__ import annotations

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


def is_secret_key(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None


def secret_values(env: Mapping[str, str]) -> list[str]:
    """Values of the credential variables of ``env`` (long enough to be worth searching for)."""
    return [value for name, value in env.items() if name in SECRET_ENV_VARS and len(value) >= 8]


def redact(key: str, value: str, known_secrets: Iterable[str] = ()) -> str:
    """``value`` as it may be shown for ``key``."""
    if is_secret_key(key):
        return REDACTED
    redacted = _SECRET_VALUE.sub(REDACTED, value)
    for secret in known_secrets:
        if secret:
            redacted = redacted.replace(secret, REDACTED)
    return redacted
