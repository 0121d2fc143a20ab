"""The fallback CPU, the NPU <-> CPU link, and layout conversions (all in seconds).

Host time is a roofline (Williams et al., CACM 2009): the slower of its arithmetic at the
sustained GFLOP/s and its memory traffic at the host bandwidth. The arithmetic includes
``host.transcendental_ns`` per exp / tanh / erf a kernel evaluates: a vendor runtime's
fallback kernels evaluate them element by element, each converted from the NPU's layout
and precision and back, far from the vectorised polynomial ``gflops`` prices (0 where the
host is that polynomial). A transfer over the link
pays bytes / bandwidth plus a fixed synchronisation (cache maintenance, interrupt, wake-up).
A layout conversion (NCHW <-> NHWC) is a full copy: every byte read once and written once.
"""

from __future__ import annotations

from hardware.profile_schema import Host, Link


def arithmetic_seconds(flops: int, host: Host, transcendentals: int = 0) -> float:
    return flops / (host.gflops * 1e9) + transcendentals * host.transcendental_ns * 1e-9


def memory_seconds(nbytes: int, host: Host) -> float:
    return nbytes / (host.bandwidth_gbps * 1e9)


def host_seconds(flops: int, nbytes: int, host: Host, transcendentals: int = 0) -> float:
    return max(arithmetic_seconds(flops, host, transcendentals), memory_seconds(nbytes, host))


def link_seconds(nbytes: int, link: Link) -> float:
    return nbytes / (link.bandwidth_gbps * 1e9) + link.sync_us * 1e-6


def layout_conversion_seconds(nbytes: int, bandwidth_gbps: float) -> float:
    return 2 * nbytes / (bandwidth_gbps * 1e9)
