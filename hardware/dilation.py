"""How an array whose hardware dilates by at most 2 runs a wider dilation.

Arm's Vela (``tflite_graph_optimiser.py``, ``fixup_dilation_gt2``) dilates the kernel
itself: zeros are written between the taps, the hardware dilation (1 or 2) takes an even
factor's 2, and the array computes every tap of the larger kernel, the zeros included. A
k-tap axis at dilation d becomes (k - 1) x d / h + 1 taps at hardware dilation h (h = 2
for an even d, else 1). So a 3x3 convolution at dilation 4 costs the array 5x5 = 25 taps,
at dilation 8 9x9 = 81, where its useful MACs stay those of 9 taps.
"""

from __future__ import annotations


def expanded_taps(kernel: tuple[int, ...], dilation: tuple[int, ...], hardware_max: int
                  ) -> tuple[int, ...]:
    """Taps per axis the array computes; the kernel itself where ``hardware_max`` is 0
    (any dilation in hardware) or the dilation is within it."""
    out = []
    for k, d in zip(kernel, dilation, strict=True):
        if not hardware_max or d <= hardware_max:
            out.append(k)
            continue
        hw = 2 if d % 2 == 0 and hardware_max >= 2 else 1
        out.append((k - 1) * (d // hw) + 1)
    return tuple(out)
