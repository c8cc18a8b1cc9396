"""Ctrl-C (and SIGTERM) at the commit point of an ``--overwrite`` build (issue 42, item 5).

Replacing an output takes three steps (old -> aside, new -> output, remove aside). A Ctrl-C aimed
at the last second of a build once ended it with exit 130 and "interrupted" while the output had
already been replaced, a ``.<out>.old-<pid>-*`` folder left beside it. Here the signal is sent
deterministically from inside each step (the real function wrapped to signal this process right
before or right after it runs), and the invariant is checked at every point: either the old
artifact is byte-identical and the build exits 130, or the new one is in place and the build
reports success; never both, and nothing hidden is left beside the output.
"""

from __future__ import annotations

import importlib
import os
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli_process import run_lmi_build

BUILD = ("hf", "--model", "demo:tiny-llama")
NEW_OPTION = ("-o", "option.max_rolling_batch_size=8")  # the new artifact differs from the old one


def _fresh_env(demo_cache: Path, cache: Path) -> dict[str, str]:
    """An lmi-build cache holding only the session's demo model (hard-linked): each build packages
    and stores afresh, never restoring another test's artifact."""
    shutil.copytree(demo_cache / "demo", cache / "demo", copy_function=os.link)
    return {**os.environ, "LMI_BUILD_CACHE": str(cache)}


@pytest.fixture(scope="module")
def old_artifact(_session_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    old = tmp_path_factory.mktemp("commit") / "old"
    env = _fresh_env(_session_cache, tmp_path_factory.mktemp("commit-cache"))
    done = run_lmi_build(*BUILD, "--output", str(old), env=env)
    assert done.returncode == 0, done.stderr
    yield old


@pytest.fixture
def env(_session_cache: Path, tmp_path: Path) -> dict[str, str]:
    return _fresh_env(_session_cache, tmp_path / "cache")


def _resolve(where: str) -> tuple[Any, str]:
    """The object holding the attribute ``where`` names (``lmi_build.core.fs.os.rename``: the os module
    as lmi_build.core.fs sees it) and the attribute's name."""
    parts = where.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner: Any = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:-1]:
            owner = getattr(owner, attribute)
        return owner, parts[-1]
    raise LookupError(where)


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def hidden_siblings(output: Path) -> list[str]:
    return sorted(p.name for p in output.parent.iterdir() if p.name.startswith(f".{output.name}."))


def _signalling(original: Callable[..., Any], applies: Callable[..., bool], when: str, signum: int,
                fired: list[bool]) -> Callable[..., Any]:
    """``original``, except that its first call for which ``applies`` holds signals this process
    right before (``when="before"``) or right after it."""
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        hit = not fired and applies(*args, **kwargs)
        if hit and when == "before":
            fired.append(True)
            os.kill(os.getpid(), signum)
        result = original(*args, **kwargs)
        if hit and when == "after":
            fired.append(True)
            os.kill(os.getpid(), signum)
        return result

    return wrapped


def _name(path: Any) -> str:
    return os.path.basename(os.fspath(path))


# (what is wrapped, the call it applies to, before/after, whether the new artifact is then in place)
POINTS: list[tuple[str, str, Callable[..., bool], str, bool]] = [
    ("rename-aside-before", "lmi_build.core.fs.os.rename", lambda src, dst: ".old-" in _name(dst), "before", False),
    ("rename-aside-after", "lmi_build.core.fs.os.rename", lambda src, dst: ".old-" in _name(dst), "after", False),
    ("rename-in-before", "lmi_build.core.fs.os.rename", lambda src, dst: ".staging-" in _name(src), "before", True),
    ("rename-in-after", "lmi_build.core.fs.os.rename", lambda src, dst: ".staging-" in _name(src), "after", True),
    ("remove-old-before", "lmi_build.core.fs.shutil.rmtree",
     lambda path, **kw: ".old-" in _name(path), "before", True),
    ("remove-old-after", "lmi_build.core.fs.shutil.rmtree",
     lambda path, **kw: ".old-" in _name(path), "after", True),
    ("cache-store", "lmi_build.artifact.cache.link_tree", lambda *a, **kw: True, "before", True),
    ("report", "lmi_build.cli.build_cmd._report", lambda *a, **kw: True, "before", True),
]


# Every point with Ctrl-C; SIGTERM (which cleans up as Ctrl-C does, exit 143) at one point each side.
CASES = [(*point, signal.SIGINT) for point in POINTS] + [
    (*point, signal.SIGTERM) for point in POINTS if point[0] in ("rename-aside-after", "cache-store")]


@pytest.mark.parametrize(("point", "where", "applies", "when", "replaced", "signum"), CASES,
                         ids=[f"{case[0]}-{case[-1].name}" for case in CASES])
def test_an_interrupt_at_the_commit_point_never_both_fails_and_replaces(
        old_artifact: Path, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str,
        where: str, applies: Callable[..., bool], when: str, replaced: bool, signum: int) -> None:
    out = tmp_path / "out"
    shutil.copytree(old_artifact, out)
    before = tree(out)
    owner, name = _resolve(where)
    fired: list[bool] = []
    monkeypatch.setattr(owner, name, _signalling(getattr(owner, name), applies, when, signum, fired))
    result = run_lmi_build(*BUILD, *NEW_OPTION, "--output", str(out), "--overwrite", env=env)
    monkeypatch.undo()
    assert fired, f"the signal was never sent at {point}"
    assert hidden_siblings(out) == [], result.stderr
    assert "Traceback" not in result.stderr
    if replaced:
        assert result.returncode == 0, result.stderr
        assert tree(out) != before
        assert "max_rolling_batch_size=8" in (out / "serving.properties").read_text()
        assert "interrupted" not in result.stdout + result.stderr.replace("interrupted after the artifact", "")
    else:
        assert result.returncode == 128 + signum, result.stderr
        assert tree(out) == before, "the old artifact changed although the build was interrupted"


def test_an_interrupt_before_a_publish_names_the_finished_artifact(
        env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --publish the interrupted publish fails the build (130), saying the artifact is in
    place and complete and how to publish it, not "work directories removed; rerun"."""
    import lmi_build.building.pipeline as pipeline

    out = tmp_path / "out"
    fired: list[bool] = []
    monkeypatch.setattr(pipeline, "_check_publish_target", lambda settings: None)  # no bucket needed to stop first
    monkeypatch.setattr(pipeline, "_maybe_publish",
                        _signalling(pipeline._maybe_publish, lambda *a, **kw: True, "before", signal.SIGINT, fired))
    result = run_lmi_build(*BUILD, *NEW_OPTION, "--output", str(out), "--publish", "s3://bucket/prefix/", env=env)
    monkeypatch.undo()
    assert fired
    assert result.returncode == 130, result.stderr
    assert "is complete and verified" in result.stderr and f"lmi-build publish {out} s3://bucket/prefix/" in result.stderr
    assert (out / "lmi-build.json").is_file() and hidden_siblings(out) == []


def test_only_the_commands_output_holds_interrupts_to_the_end(tmp_path: Path) -> None:
    """A directory replaced on the way (a checkpoint in the work directory) is no commit of the
    output: Ctrl-C right after it still interrupts (it once held every later Ctrl-C of a build)."""
    from lmi_build.core.fs import commit_scope, staged_directory

    target = tmp_path / "checkpoint"
    target.mkdir()
    (target / "old").write_text("old")
    with pytest.raises(KeyboardInterrupt), commit_scope() as scope:
        with staged_directory(target) as staging:
            (staging / "new").write_text("new")
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at the next bytecode boundary
            pass
    assert scope.committed is None and (target / "new").is_file()
