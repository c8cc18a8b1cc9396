"""Standing defaults from the user's config file: the S3 endpoint, the shared build cache and a
container profile per target, so a team's settings need not be repeated on every command.

The file is ``$LMI_BUILD_CONFIG``, else ``$XDG_CONFIG_HOME/lmi-build/config.toml``, else
``~/.config/lmi-build/config.toml`` (the XDG base-directory rule that ``gh``, ``pip`` and
``huggingface_hub``'s neighbours follow)::

    endpoint_url = "http://minio.internal:9000"
    cache = "s3://team-bucket/lmi-build-cache/"

    [trtllm]
    profile = "lmi-0.33.0-trtllm-0.21.0"

Precedence, first wins: the flag, then the environment (``AWS_ENDPOINT_URL``), then this file, then
lmi-build's own default. Only the command line reads it: the plan records the profile it resolved,
so a saved plan, a script bundle or a Ray task never depends on the file of the host that planned it.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lmi_build.core.errors import OptionError
from lmi_build.core.reading import BadFile, parse_toml, read_regular_bytes
from lmi_build.core.target_names import TARGET_NAMES

CONFIG_ENV = "LMI_BUILD_CONFIG"
_MAX_CONFIG_BYTES = 64 * 1024
_TOP_KEYS = {"endpoint_url": "an http(s):// URL", "cache": "an s3://bucket/prefix URL"}
_TARGET_KEYS = {"profile": "a container profile name (`lmi-build profiles list`)"}
# The environment variables that name an S3 endpoint; when one is set it wins over the file, as
# boto3 itself reads it.
_ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


@dataclass(frozen=True)
class StandingDefaults:
    """What the config file sets (empty when there is none) and where it is."""

    path: Path
    endpoint_url: str | None = None
    cache: str | None = None
    profiles: Mapping[str, str] = field(default_factory=dict)

    @property
    def values(self) -> dict[str, str]:
        """Every value the file sets, by the name ``config show`` prints (``trtllm.profile``)."""
        found = {key: value for key, value in (("endpoint_url", self.endpoint_url), ("cache", self.cache)) if value}
        found.update({f"{target}.profile": name for target, name in self.profiles.items()})
        return found


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the config file is looked for."""
    env = os.environ if env is None else env
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser()
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "lmi-build" / "config.toml"


def load_standing_defaults(env: Mapping[str, str] | None = None) -> StandingDefaults:
    """The config file's values; none when the file does not exist. A file that exists but is not
    what it should be is an error naming the key, never ignored: a silently dropped cache URL
    would rebuild what the team already built."""
    env = os.environ if env is None else env
    path = config_path(env)
    if not path.exists():
        if env.get(CONFIG_ENV):
            raise OptionError(f"{CONFIG_ENV} names {path}, which does not exist",
                              hint=f"create it, or unset {CONFIG_ENV} to use ~/.config/lmi-build/config.toml")
        return StandingDefaults(path=path)
    try:
        data = parse_toml(read_regular_bytes(path, limit=_MAX_CONFIG_BYTES, what="config file").decode("utf-8"),
                          what=f"config file {path}")
    except UnicodeDecodeError:
        raise OptionError(f"the config file {path} is not UTF-8 text", hint="save it as UTF-8") from None
    except BadFile as bad:
        raise OptionError(bad.message, hint=bad.hint) from None
    return _read(path, data)


def _read(path: Path, data: dict[str, object]) -> StandingDefaults:
    top: dict[str, str] = {}
    profiles: dict[str, str] = {}
    for key, value in data.items():
        if key in TARGET_NAMES and isinstance(value, dict):
            for inner, text in value.items():
                profiles[key] = _text(path, f"{key}.{inner}", text, _TARGET_KEYS)
        elif key in _TOP_KEYS:
            top[key] = _text(path, key, value, _TOP_KEYS)
        else:
            known = [*_TOP_KEYS, *(f"[{name}] profile" for name in TARGET_NAMES)]
            raise OptionError(f"{path}: unknown setting {key!r}", hint=f"the config file takes: {', '.join(known)}")
    endpoint = top.get("endpoint_url")
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise OptionError(f"{path}: endpoint_url must be an http(s):// URL, not {endpoint!r}",
                          hint='write e.g. endpoint_url = "http://minio.internal:9000"')
    cache = top.get("cache")
    if cache is not None and not cache.startswith("s3://"):
        raise OptionError(f"{path}: cache must be an s3://bucket/prefix URL", hint='write e.g. cache = "s3://bucket/cache/"')
    for url in (endpoint, cache):
        if url is not None and "@" in url.split("/", 3)[2]:
            raise OptionError(f"{path}: a URL with credentials in it is refused (they would be shown and logged)",
                              hint="give credentials with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or an AWS profile")
    return StandingDefaults(path=path, endpoint_url=endpoint, cache=cache, profiles=profiles)


def _text(path: Path, key: str, value: object, allowed: Mapping[str, str]) -> str:
    name = key.rsplit(".", 1)[-1]
    if name not in allowed:
        raise OptionError(f"{path}: unknown setting {key!r}", hint=f"a target table takes: {', '.join(allowed)}")
    if not isinstance(value, str) or not value.strip():
        raise OptionError(f"{path}: {key} must be {allowed[name]}", hint=f'write {name} = "..."')
    return value.strip()


def endpoint_default(given: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """``--endpoint-url`` as given, else None where the environment names one (boto3 reads it),
    else the config file's."""
    env = os.environ if env is None else env
    if given is not None or any(env.get(name) for name in _ENDPOINT_ENV):
        return given
    return load_standing_defaults(env).endpoint_url


def cache_default(given: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """``--cache`` as given, else the config file's shared build cache."""
    return given if given is not None else load_standing_defaults(env).cache


def profile_default(target: str, given: str | None, env: Mapping[str, str] | None = None) -> tuple[str | None, Path | None]:
    """``--profile`` as given, else the config file's for ``target`` with the file it came from."""
    if given is not None:
        return given, None
    defaults = load_standing_defaults(env)
    name = defaults.profiles.get(target)
    return (name, defaults.path) if name is not None else (None, None)
