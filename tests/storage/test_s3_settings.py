"""The S3 variables (README, "Environment"): a value that is not a finite number within the range
is one error naming the variable and the range, never an OverflowError (issue 42 item 9)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lmi_build.core.errors import PublishError
from lmi_build.storage.bounded import list_seconds, min_rate, read_timeout_s
from lmi_build.storage.transfer import max_bandwidth
from tests.cli_process import run_lmi_build

READERS: dict[str, Callable[[], float | int | None]] = {
    "LMI_BUILD_S3_TIMEOUT": read_timeout_s, "LMI_BUILD_S3_MIN_RATE": min_rate,
    "LMI_BUILD_S3_LIST_TIMEOUT": list_seconds, "LMI_BUILD_S3_MAX_BANDWIDTH": max_bandwidth,
}


@pytest.mark.parametrize("value", ["inf", "1e400", "nan", "-1", "0", "soon", "1" + "0" * 400])
@pytest.mark.parametrize("name", list(READERS))
def test_an_unusable_value_names_the_variable_and_its_range(monkeypatch: pytest.MonkeyPatch, name: str,
                                                            value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(PublishError, match=rf"^{name}=.* from \S+ to \S+$") as raised:
        READERS[name]()
    assert len(str(raised.value)) < 200


@pytest.mark.parametrize(("name", "value", "expected"), [("LMI_BUILD_S3_TIMEOUT", "2.5", 2.5),
                                                         ("LMI_BUILD_S3_MIN_RATE", "500", 500.0),
                                                         ("LMI_BUILD_S3_LIST_TIMEOUT", "3", 3.0),
                                                         ("LMI_BUILD_S3_MAX_BANDWIDTH", "1048576", 1048576)])
def test_a_value_in_range_is_taken(monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: float) -> None:
    monkeypatch.setenv(name, value)
    assert READERS[name]() == expected


def test_an_infinite_timeout_is_one_line_at_the_command_line() -> None:
    result = run_lmi_build("verify", "s3://bucket/model", "--json", env={"LMI_BUILD_S3_TIMEOUT": "inf",
                                                                       "AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "OverflowError" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "LMI_BUILD_S3_TIMEOUT='inf'" in lines[0] and "from 0.1 to 86400" in lines[0], lines


def test_clients_share_the_parsed_service_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each client read and parsed S3's ~5 MB of model JSON again (0.15-0.4 CPU-s: a pull, publish,
    each of verify's three clients); the loader is the process's, credentials stay each client's."""
    from lmi_build.storage.client import s3_client

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first")
    first = s3_client("http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second")
    second = s3_client("http://127.0.0.1:9")
    assert first._loader is second._loader
    assert first._request_signer._credentials.access_key == "first"
    assert second._request_signer._credentials.access_key == "second"
