"""convcli: convolution and pooling on images, from the command line or Python.

The tutorial's eight layer functions keep their names, signatures and caches::

    from convcli import (zero_pad, conv_single_step, conv_forward, pool_forward,
                         conv_backward, create_mask_from_window, distribute_value,
                         pool_backward)

"Convolution" here is cross-correlation (the kernel is not flipped), as in
the tutorial and in PyTorch.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from .conv import (
    conv_backward,
    conv_forward,
    conv_single_step,
    depthwise_conv_backward,
    depthwise_conv_forward,
)
from .padding import PAD_MODES, pad_images, zero_pad
from .pooling import (
    POOL_MODES,
    create_mask_from_window,
    distribute_value,
    pool_backward,
    pool_forward,
)

try:
    __version__ = version("convcli")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

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
