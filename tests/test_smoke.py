import numpy as np

import convcli


def test_tutorial_functions_importable_from_top_level():
    names = [
        "zero_pad", "conv_single_step", "conv_forward", "pool_forward",
        "conv_backward", "create_mask_from_window", "distribute_value", "pool_backward",
    ]
    for name in names:
        assert callable(getattr(convcli, name))


def test_conv_single_step_published_value():
    np.random.seed(1)
    a_slice_prev = np.random.randn(4, 4, 3)
    W = np.random.randn(4, 4, 3)
    b = np.random.randn(1, 1, 1)
    Z = convcli.conv_single_step(a_slice_prev, W, b)
    assert type(Z) is np.float64
    assert np.isclose(Z, -6.999089450680221, rtol=1e-13)
