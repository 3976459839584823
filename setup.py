"""Build the C scanner; everything else is configured in pyproject.toml.

Building from source needs a C compiler; without one the build stops with one line naming
the missing compiler (and the way out: a prebuilt wheel) instead of a setuptools traceback.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NO_COMPILER = ("proftab: building the C scanner (src/proftab/io/_kineto.c) needs a C compiler, and {what}; "
               "install one (Debian/Ubuntu: apt-get install gcc python3-dev; macOS: xcode-select --install; "
               "Windows: Visual Studio Build Tools) or install a prebuilt wheel: "
               "pip install --only-binary proftab proftab")


class BuildExt(build_ext):
    """`build_ext` that checks for the compiler first and fails in one line without one."""

    def build_extensions(self) -> None:
        """Build, after making sure the compiler exists."""
        if self.compiler.compiler_type == "unix":
            cc = (os.environ.get("CC") or (self.compiler.compiler_so or ["cc"])[0]).split()[0]
            if shutil.which(cc) is None:
                sys.exit(NO_COMPILER.format(what=f"{cc!r} is not on PATH"))
        try:
            super().build_extensions()
        except Exception as exc:  # noqa: BLE001 - the compiler's own failure, made one line
            if "command" in str(exc) and ("not found" in str(exc) or "failed" in str(exc)):
                sys.exit(NO_COMPILER.format(what=f"running it failed ({str(exc).strip()})"))
            raise


# the scanner uses only the stable ABI of CPython 3.11 (the buffer protocol entered it in 3.11):
# one cp311-abi3 wheel serves every CPython >= 3.11; free-threaded builds have no stable ABI
STABLE_ABI = not sysconfig.get_config_var("Py_GIL_DISABLED")

setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "proftab.io._kineto",
            sources=["src/proftab/io/_kineto.c"],
            extra_compile_args=[] if sys.platform == "win32" else ["-O3", "-std=c11", "-Wall", "-Wno-unused-function"],
            define_macros=[("Py_LIMITED_API", "0x030B0000")] if STABLE_ABI else [],
            py_limited_api=STABLE_ABI,
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp311"}} if STABLE_ABI else {},
)
