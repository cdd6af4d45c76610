"""The importer's two builds, as wheels (IMPORTER_BUILD; README, "Two builds of the importer").

A pure wheel (IMPORTER_BUILD=pure) holds no compiled module and is tagged
py3-none-any. A compiled wheel (IMPORTER_BUILD=compiled; skipped, with the
reason, where no C compiler works) holds mypyc's extension module for every
importer module but __init__, __main__ and build_info, with their one shared
library, beside the sources, and is tagged for this interpreter and platform.
Each is installed (--no-deps) into a throwaway virtual environment that
borrows this environment's numpy and mypy_extensions (nothing is downloaded;
mypy is absent) and imports and dumps a model with external data there:
`importer.BUILD` names the build, and the two builds' dump, summary and
check are the same bytes. Without a working compiler, `auto` builds the pure
wheel and says so, and `compiled` fails and says why. An sdist carries
setup.py and the backend, and a wheel builds from it. Wheels are built once
for each content of the build context (tests/support/wheel_builds.py, usually
ahead of the tests by tools/prebuild_wheels.py): the compiled one takes about a
minute on 2 cores.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest
from build_backend import NOT_COMPILED, compiler_problem
from support.paths import REPO
from support.wheel_builds import Wheels, build_environment, copy_build_context, pip_wheel

BUILDS = ("pure", "compiled")
SAMPLE = REPO / "testdata" / "samples" / "external" / "model.onnx"
RUNTIME = ("numpy", "mypy_extensions")  # the distributions `import importer` needs beyond the standard library
NO_COMPILER = "/nonexistent/cc"  # CC for a machine without a C compiler
PROBE = (
    "import json, importer, importer.wire; "
    "print(json.dumps({'build': importer.BUILD, 'package': importer.__file__, 'wire': importer.wire.__file__}))"
)


def wheel_of(wheels: Wheels, build: str) -> Path:
    if build == "compiled" and (problem := compiler_problem()) is not None:
        pytest.skip(f"the compiled build cannot be made here: {problem}")
    return wheels(build)


def wheel_tag(archive: zipfile.ZipFile) -> tuple[str, str]:
    """The WHEEL file's Tag and Root-Is-Purelib."""
    (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/WHEEL")]
    fields = dict(line.split(": ", 1) for line in archive.read(name).decode().splitlines() if ": " in line)
    return fields["Tag"], fields["Root-Is-Purelib"]


def test_the_pure_wheel_has_no_compiled_module(wheels: Wheels) -> None:
    wheel = wheel_of(wheels, "pure")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert wheel_tag(archive) == ("py3-none-any", "true")
    assert not [n for n in names if n.endswith((".so", ".pyd"))]
    sources = {f"importer/{path.name}" for path in (REPO / "importer").glob("*.py")}
    assert sources | {"importer/op_schemas.json.gz"} <= set(names)


def test_the_compiled_wheel_holds_the_compiled_importer(wheels: Wheels, report: list[str]) -> None:
    wheel = wheel_of(wheels, "compiled")
    suffix = EXTENSION_SUFFIXES[0]  # this interpreter's own, e.g. .cpython-311-x86_64-linux-gnu.so
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        tag, purelib = wheel_tag(archive)
    interpreter = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert tag.startswith(f"{interpreter}-{interpreter}-") and not tag.endswith("-any") and purelib == "false", tag
    sources = sorted((REPO / "importer").glob("*.py"))
    compiled = {f"importer/{path.stem}{suffix}" for path in sources if path.name not in NOT_COMPILED}
    assert compiled | {f"importer/_native__mypyc{suffix}"} <= names
    assert not {f"importer/{Path(name).stem}{suffix}" for name in NOT_COMPILED} & names
    extensions = {n for n in names if n.endswith((".so", ".pyd"))}
    assert extensions == compiled | {f"importer/_native__mypyc{suffix}"}, "compiled modules outside the importer"
    assert {f"importer/{path.name}" for path in sources} <= names, "the sources ship beside their compiled modules"
    assert {n.split("/")[0] for n in names} == {"importer", "service", "onnx_import_service-0.1.0.dist-info"}
    report.append(f"builds: compiled wheel built in {wheels.seconds.get('compiled', 0):.0f} s ({wheel.stat().st_size / 1e6:.1f} MB, {tag})")


def test_a_compiled_wheel_from_the_compile_cache_holds_the_very_modules(wheels: Wheels, tmp_path: Path) -> None:
    """IMPORTER_COMPILE_CACHE (tools/compile_cache.py): a build of sources already compiled copies
    their modules, compiling none, and its wheel is the compiled wheel, module for module. The
    cache is tools/dev.sh's, where the wheels were built into it; without one, this test fills
    a cache of its own first (about a minute)."""
    compiled = wheel_of(wheels, "compiled")
    cache = os.environ.get("IMPORTER_COMPILE_CACHE") or str(tmp_path / "compile-cache")
    environment = build_environment("compiled", IMPORTER_COMPILE_CACHE=cache)
    source = copy_build_context(tmp_path / "src")
    if "IMPORTER_COMPILE_CACHE" not in os.environ:
        assert pip_wheel(source, tmp_path / "first", environment).returncode == 0
    result = pip_wheel(source, tmp_path / "wheels", environment, "--verbose")
    assert result.returncode == 0, result.stderr[-4000:]
    assert "modules copied from" in result.stderr + result.stdout and "gcc" not in result.stdout, result.stdout[-4000:]
    (copied,) = (tmp_path / "wheels").glob("*.whl")
    with zipfile.ZipFile(compiled) as made, zipfile.ZipFile(copied) as taken:
        assert made.namelist() == taken.namelist()
        modules = [name for name in made.namelist() if name.endswith(".so")]
        assert modules and all(made.read(name) == taken.read(name) for name in modules)


@pytest.fixture(scope="module")
def installed() -> dict[str, Path]:
    """build -> the python of a throwaway venv holding that wheel (python_of makes it on first use)."""
    return {}


def venv_with(wheel: Path, folder: Path) -> Path:
    """A new venv (no pip) holding the wheel alone, with this environment's copies of
    what `import importer` needs (RUNTIME) on its path through a .pth file."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder / "venv")], check=True, capture_output=True, timeout=120)
    python = folder / "venv" / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    borrowed = folder / "borrowed"  # those alone: not this environment's importer, mypy or anything else
    borrowed.mkdir()
    for name in RUNTIME:
        distribution = importlib.metadata.distribution(name)
        tops = {Path(str(f)).parts[0] for f in distribution.files or []}
        for top in tops - {"..", "__pycache__"}:
            if not top.endswith(".dist-info"):
                (borrowed / top).symlink_to(Path(str(distribution.locate_file(top))))
    Path(site, "borrowed.pth").write_text(f"{borrowed}\n")
    install = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(python), "install", "--quiet", "--no-deps"]
    result = subprocess.run([*install, "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    return python


def run_in(python: Path, *arguments: str) -> str:
    """`python -P ...` from a folder outside the checkout, with no PYTHONPATH: the venv's importer only."""
    environment = build_environment("unused")
    result = subprocess.run(
        [str(python), "-P", *arguments], capture_output=True, text=True, timeout=120, cwd=python.parent, env=environment
    )
    assert result.returncode == 0, f"{arguments}: exit {result.returncode}\n{result.stderr[-4000:]}"
    return result.stdout


def python_of(build: str, wheels: Wheels, installed: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    if build not in installed:
        installed[build] = venv_with(wheel_of(wheels, build), tmp_path_factory.mktemp(f"venv-{build}"))
    return installed[build]


@pytest.mark.parametrize("build", BUILDS)
def test_each_wheel_installs_and_imports_a_model(
    build: str, wheels: Wheels, installed: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    python = python_of(build, wheels, installed, tmp_path_factory)
    probe = json.loads(run_in(python, "-c", PROBE))
    venv = python.parent.parent
    assert probe["build"] == build
    assert Path(probe["package"]).is_relative_to(venv) and Path(probe["wire"]).is_relative_to(venv), probe
    assert probe["wire"].endswith(tuple(EXTENSION_SUFFIXES)) == (build == "compiled"), probe
    dump = run_in(python, "-m", "importer", "dump", str(SAMPLE))
    assert json.loads(dump)["format"] == "onnx-dump/1", dump[:500]


def test_both_builds_dump_the_same_bytes(wheels: Wheels, installed: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> None:
    dumps = {}
    for build in BUILDS:
        python = python_of(build, wheels, installed, tmp_path_factory)
        dumps[build] = [run_in(python, "-m", "importer", command, str(SAMPLE)) for command in ("dump", "summary", "check")]
    assert dumps["compiled"] == dumps["pure"]


def test_auto_without_a_compiler_builds_the_pure_wheel(tmp_path: Path) -> None:
    source = copy_build_context(tmp_path / "src")
    result = pip_wheel(source, tmp_path / "wheels", build_environment("auto", CC=NO_COMPILER), "--verbose")
    assert result.returncode == 0, result.stderr[-4000:]
    (wheel,) = (tmp_path / "wheels").glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    assert "note: IMPORTER_BUILD=auto: building the pure-Python importer, as no working C compiler" in result.stdout + result.stderr


def test_an_sdist_carries_the_build_and_builds(tmp_path: Path) -> None:
    """The sdist has setup.py and the backend (pyproject.toml's backend-path), and a wheel builds from it."""
    source = copy_build_context(tmp_path / "src")
    environment = build_environment("pure", PYTHONPATH=str(source / "tools"))
    command = [sys.executable, "-c", f"import build_backend; print(build_backend.build_sdist({str(tmp_path / 'sdist')!r}))"]
    made = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=source, env=environment)
    assert made.returncode == 0, made.stderr[-4000:]
    sdist = tmp_path / "sdist" / made.stdout.split()[-1]
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[-1] for name in archive.getnames()}
    backend = {"setup.py", "MANIFEST.in", "tools/build_backend.py", "tools/compile_cache.py"}
    assert {"pyproject.toml", "importer/op_schemas.json.gz", *backend} <= names
    result = pip_wheel(sdist, tmp_path / "wheels", build_environment("pure"))
    assert result.returncode == 0, result.stderr[-4000:]
    (wheel,) = (tmp_path / "wheels").glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ("compiled", "IMPORTER_BUILD=compiled: no working C compiler"),
        ("fast", "IMPORTER_BUILD='fast': use one of compiled, pure, auto"),
    ],
)
def test_a_build_that_cannot_be_made_fails_saying_why(build: str, message: str, tmp_path: Path) -> None:
    source = copy_build_context(tmp_path / "src")
    result = pip_wheel(source, tmp_path / "wheels", build_environment(build, CC=NO_COMPILER), "--verbose")
    output = result.stdout + result.stderr
    assert result.returncode != 0 and message in output, output[-4000:]
    assert not list((tmp_path / "wheels").glob("*.whl"))
    assert "Collecting mypy" not in output, "mypy is fetched only for a build that can be made"


def test_the_editable_checkout_is_the_build_it_says(report: list[str]) -> None:
    """This session's importer: its BUILD agrees with where its modules come from."""
    import importer
    import importer.wire

    compiled = str(importer.wire.__file__).endswith(tuple(EXTENSION_SUFFIXES))
    assert ("compiled" if compiled else "pure") == importer.BUILD
    report.append(f"builds: this session tests the {importer.BUILD} build ({Path(str(importer.__file__)).parent})")
    if os.environ.get("IMPORTER_EXPECT_BUILD"):
        assert os.environ["IMPORTER_EXPECT_BUILD"] == importer.BUILD
