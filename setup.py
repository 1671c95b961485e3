"""Build of the optional C core of opctx.context.references (everything else is in pyproject.toml).

The extension is ``optional``: where no C compiler is available the install still
succeeds and ``opctx.context.references`` runs its pure-Python path (same results, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "opctx.context._refscan",
            sources=["opctx/context/_refscan.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
