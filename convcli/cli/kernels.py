"""``convcli kernels``: the named kernels, one kernel's grid, or what it does."""

from __future__ import annotations

import click


@click.command("kernels")
@click.argument("name", required=False)
@click.option(
    "--check",
    is_flag=True,
    help="Say what the kernel does instead: sum, separable, symmetry, centre.",
)
def kernels_cmd(name, check):
    """List the named kernels, or print one kernel's grid.

    The grid of 'convcli kernels NAME' is itself a valid kernel file. NAME may
    also be NAME:ANGLE or a kernel file. With --check, it says what the kernel
    does: its sum (1 keeps levels, 0 shows edges), whether it is separable
    (rank 1), its symmetries and its centre.

    \b
    Examples:
      convcli kernels
      convcli kernels sobel-x:90 > my-kernel.txt
      convcli kernels --check my-kernel.txt
    """
    from ..app.stdio import write_text
    from ..kernels import (
        KernelError,
        describe_kernel,
        format_kernel_grid,
        list_kernels,
        parse_kernel_spec,
    )

    if name is None and check:
        raise click.UsageError("--check needs a kernel: give its NAME or file")
    if name is None:
        kernels = list_kernels()
        width = max(len(k.name) for k in kernels)
        lines = []
        for k in kernels:
            size = f"{k.size[0]}x{k.size[1]}"
            aliases = f" (also: {', '.join(k.aliases)})" if k.aliases else ""
            lines.append(f"{k.name:<{width}}  {size:>5}  {k.description}{aliases}\n")
        write_text("".join(lines))
        return
    try:
        kernel = parse_kernel_spec(name)
    except KernelError as exc:
        raise click.BadParameter(str(exc), param_hint="NAME") from None
    if check:
        write_text(describe_kernel(kernel) + "\n")
        return
    size = f"{kernel.size[0]}x{kernel.size[1]}"
    heading = f"# {kernel.name} ({size}): {kernel.description}".rstrip(": ")
    write_text(f"{heading}\n{format_kernel_grid(kernel)}\n")


COMMAND = kernels_cmd
"""What ``convcli`` adds of this module (:func:`convcli.cli.main.main`)."""
