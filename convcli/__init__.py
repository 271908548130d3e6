"""convcli: convolution and pooling on images, from the command line or Python.

The tutorial's eight layer functions keep their names, signatures and caches::

    from convcli import (zero_pad, conv_single_step, conv_forward, pool_forward,
                         conv_backward, create_mask_from_window, distribute_value,
                         pool_backward)

"Convolution" here is cross-correlation (the kernel is not flipped), as in
the tutorial and in PyTorch.
"""

from __future__ import annotations

TYPE_CHECKING = False  # as typing.TYPE_CHECKING, without importing typing

# The names below are imported on first use (PEP 562), so that the command
# line starts by importing nothing heavy: a Ctrl-C while numpy, Pillow and
# click load is then caught by convcli.__main__.main (no traceback).
_EXPORTS = {
    "conv_backward": "layers.conv",
    "conv_forward": "layers.conv",
    "conv_single_step": "layers.conv",
    "depthwise_conv_backward": "layers.depthwise",
    "depthwise_conv_forward": "layers.depthwise",
    "PAD_MODES": "layers.padding",
    "pad_images": "layers.padding",
    "zero_pad": "layers.padding",
    "POOL_MODES": "layers.pooling",
    "create_mask_from_window": "layers.pooling",
    "distribute_value": "layers.pooling",
    "pool_backward": "layers.pooling",
    "pool_forward": "layers.pooling",
}

if TYPE_CHECKING:
    from .layers.conv import conv_backward, conv_forward, conv_single_step
    from .layers.depthwise import depthwise_conv_backward, depthwise_conv_forward
    from .layers.padding import PAD_MODES, pad_images, zero_pad
    from .layers.pooling import (
        POOL_MODES,
        create_mask_from_window,
        distribute_value,
        pool_backward,
        pool_forward,
    )


def __getattr__(name: str):
    if name in _EXPORTS:
        from importlib import import_module

        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name == "__version__":
        from ._version import __version__ as value
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, "__version__"})


__all__ = [
    "PAD_MODES",
    "POOL_MODES",
    "conv_backward",
    "conv_forward",
    "conv_single_step",
    "create_mask_from_window",
    "depthwise_conv_backward",
    "depthwise_conv_forward",
    "distribute_value",
    "pad_images",
    "pool_backward",
    "pool_forward",
    "zero_pad",
]
