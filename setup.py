"""Build of the optional C parts (everything else is in pyproject.toml): the core of
opctx.context.references and the CJK segmentation of opctx.dag._search.

Each extension is ``optional``: where no C compiler is available the install still
succeeds and its module runs its pure-Python path (same results, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "opctx.context._refscan",
            sources=["opctx/context/_refscan.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "opctx.dag._segment",
            sources=["opctx/dag/_segment.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
