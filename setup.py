"""The optional C extension of convcli's native engine (everything else is in pyproject.toml).

The extension is optional: where it cannot be built (no C compiler), the
install still succeeds and convcli runs its numpy engines.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# Portable code: no -march=native. The AVX2 kernels are compiled beside the
# baseline ones (function target attributes) and chosen at import.
# -ffp-contract=off: every multiply and add rounds on its own, so that both
# levels give the same bits.
UNIX_FLAGS = ["-std=c11", "-O3", "-ffp-contract=off", "-fno-trapping-math", "-Wno-psabi"]


class OptionalBuildExt(build_ext):
    """build_ext with the flags of the compiler at hand."""

    def build_extensions(self):
        if self.compiler.compiler_type == "unix":
            for extension in self.extensions:
                extension.extra_compile_args = UNIX_FLAGS
        super().build_extensions()


setup(
    ext_modules=[
        Extension(
            "convcli.layers._engine._native",
            sources=["convcli/layers/_engine/_native.c"],
            depends=[
                "convcli/layers/_engine/_native_kernels.h",
                "convcli/layers/_engine/_native_deflate.h",
            ],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
