"""The kernel files that ship with convcli, installed as ``convcli.kernel_files``.

One TOML file per kernel; read them with :mod:`convcli.kernels`, and see
docs/kernels.md for the format and the list.
"""
