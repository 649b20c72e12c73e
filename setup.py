"""Build lines of the one compiled module; everything else is in pyproject.toml.

``dsan._rowkernel`` (dsan/_rowkernel.c) is the C twin of :func:`dsan.rowkernel.fill_py`.
It is optional: without a C compiler the build skips it and the Python twin serves (same
bits). ``-ffp-contract=off``: no fused multiply-adds, which would round differently from
the Python twin.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "dsan._rowkernel",
            ["dsan/_rowkernel.c"],
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=True,
        )
    ]
)
