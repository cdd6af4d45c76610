"""The importer's extension modules: compiled with mypyc when tools/build_backend.py chooses
the compiled build (IMPORTER_BUILD), none for the pure one; copied from the compile cache
instead where IMPORTER_COMPILE_CACHE holds them (tools/compile_cache.py). pyproject.toml
holds everything else."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))
from build_backend import GROUP, chosen_build, compiled_sources, metadata_only
from compile_cache import CompileCache


def cached_build_ext(cache: CompileCache, stored: bool) -> type[build_ext]:
    """setuptools' build_ext, copying each module from the cache when it holds them, else storing what it built."""

    class CachedBuildExt(build_ext):
        def build_extension(self, ext: Any) -> None:
            target = Path(self.get_ext_fullpath(ext.name))
            if stored:
                cache.copy(ext.name, target)
                return
            super().build_extension(ext)
            self.built[ext.name] = target

        def run(self) -> None:
            self.built: dict[str, Path] = {}
            try:
                super().run()
                if stored:
                    copied = f"{len(self.extensions)} modules copied from {cache.entry.name[:12]}"
                    print(f"compile cache: {copied}, none compiled", file=sys.stderr)
                elif self.built:
                    cache.store(self.built)
            finally:
                cache.release()

    return CachedBuildExt


def extensions() -> tuple[list[Any], dict[str, Any]]:  # setuptools' Extensions (mypyc's are setuptools' or distutils')
    """mypyc's modules for importer/ (one shared library, importer/_native__mypyc) and the
    build_ext that caches them, or none."""
    if chosen_build() != "compiled" or metadata_only.get():
        return [], {}
    cache = CompileCache.from_environment(compiled_sources())
    if cache is not None and cache.claim():
        return [Extension(name, sources=[]) for name in cache.module_names()], {"build_ext": cached_build_ext(cache, stored=True)}
    try:
        from mypyc.build import mypycify
    except ImportError as error:
        raise SystemExit(f"IMPORTER_BUILD=compiled needs mypyc (mypy) in the build environment: {error}") from error
    # mypy's settings are pyproject.toml's [tool.mypy] (strict); the paths named here replace its
    # `files`; its cache stays in build/, beside mypyc's C, away from the checkout's .mypy_cache.
    options = ["--config-file", "pyproject.toml", "--cache-dir", "build/mypy-cache"]
    modules = mypycify([*options, *compiled_sources()], opt_level="3", group_name=GROUP)
    return modules, ({"build_ext": cached_build_ext(cache, stored=False)} if cache is not None else {})


modules, commands = extensions()
setup(ext_modules=modules, cmdclass=commands)
