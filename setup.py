"""Build script for the one compiled module; everything else is declared in pyproject.toml.

``data.tokenization._fast_wordpiece`` (``data/tokenization/_fast_wordpiece.c``, CPython C API only) is the
engine of ``tokenization.FastFullTokenizer``. It is optional at run time: if it
was not built, the tokenizer uses its pure-Python path (same output).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("data.tokenization._fast_wordpiece", ["data/tokenization/_fast_wordpiece.c"],
                  extra_compile_args=["-O3"], optional=True),
    ],
)
