"""Build the C scanner; everything else is configured in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "proftab.io._kineto",
            sources=["src/proftab/io/_kineto.c"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wno-unused-function"],
        )
    ]
)
