"""Paths under the allowed roots, with every symlink resolved: at validation and before each
destructive step of a sink."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from source_support.errors import ConfigError
from source_support.registry import Environment


@pytest.fixture()
def roots(tmp_path) -> tuple[Path, Path]:
    out, outside = tmp_path / "out", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    return out.resolve(), outside.resolve()


@pytest.fixture()
def env(tmp_path, roots) -> Environment:
    return Environment(allowed_roots=(roots[0],), base_dir=tmp_path)


def test_a_path_not_created_yet_resolves_through_its_existing_ancestors(env, roots):
    out, _ = roots
    (out / "real").mkdir()
    os.symlink(out / "real", out / "link")

    assert env.resolve_path("out/link/a/b", "sink.path") == out / "real" / "a" / "b"


def test_a_path_through_a_symlink_out_of_the_roots_is_refused_not_naming_where_it_leads(env, roots):
    out, outside = roots
    os.symlink(outside, out / "evil")

    with pytest.raises(ConfigError) as caught:
        env.resolve_path("out/evil/keep", "sink.path")

    assert caught.value.field == "sink.path"
    assert "leads (through a symlink)" in caught.value.reason
    assert str(outside) not in caught.value.reason  # where a link leads may be another's


@pytest.mark.parametrize("path", ["/proc/self/environ", "/proc/thread-self/status"])
def test_a_refused_proc_self_path_does_not_name_the_process(env, path):
    with pytest.raises(ConfigError) as caught:
        env.resolve_path(path, "source.path")

    assert path in caught.value.reason
    assert f"/{os.getpid()}" not in caught.value.reason


def test_allowed_roots_given_through_a_symlink_still_hold_their_paths(tmp_path, roots):
    out, _ = roots
    os.symlink(out, tmp_path / "out-link")
    env = Environment(allowed_roots=(tmp_path / "out-link",), base_dir=tmp_path)

    assert env.resolve_path(str(tmp_path / "out-link" / "x"), "sink.path") == out / "x"


def test_a_destructive_step_inside_the_roots_is_allowed(env, roots):
    out, _ = roots
    (out / "result").mkdir()

    env.check_destructive_target(out / "result")
    env.check_destructive_target(out / "new" / "result")


def test_a_destructive_step_through_a_symlink_made_after_validation_is_refused(env, roots):
    out, outside = roots
    (outside / "keep").mkdir()
    (outside / "keep" / "file.txt").write_text("precious")
    target = env.resolve_path("out/evil/keep", "sink.path")  # validated: out/evil did not exist
    os.symlink(outside, out / "evil")

    with pytest.raises(ConfigError, match="outside the allowed roots .*; nothing was replaced"):
        env.check_destructive_target(target)
    assert (outside / "keep" / "file.txt").read_text() == "precious"


def test_a_destructive_step_on_a_target_that_became_a_symlink_is_refused(env, roots):
    out, _ = roots
    (out / "elsewhere").mkdir()
    os.symlink(out / "elsewhere", out / "result")

    with pytest.raises(ConfigError, match="is now a symlink"):
        env.check_destructive_target(out / "result")


def test_a_destructive_step_on_a_root_is_refused(env, tmp_path):
    (tmp_path / "sub").mkdir()

    with pytest.raises(ConfigError, match="allowed root"):
        env.check_destructive_target(tmp_path / "sub" / ".." / "out")
