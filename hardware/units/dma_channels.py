"""DMA channels with a bounded number of requests in flight (``units.dma_channels``).

A DMA that keeps each stream on a channel of its own (the input feature map, the weights,
the output) can have only so many bursts outstanding per channel: as many as the
channel's read buffer holds, and no more than the memory port accepts. By Little's law
(Little, Operations Research 9(3), 1961: throughput = requests in flight / latency) a
channel then moves at most ``burst_bytes x in_flight / latency`` bytes per cycle,
whatever the port's bandwidth. Against a long-latency DRAM this, not the bandwidth, sets a
stream's pace: on an Ethos-U85-256 behind Vela's Ethos_U85_SYS_DRAM_Mid system (500-cycle
reads, 128-byte bursts, a 2 KB weight read buffer) a weight stream gets 16 bursts in
flight and 3.3 of the port's 12 bytes per cycle.

The formula is Vela 5.2's ``EthosU85Performance::ChannelBW``
(ethos_u85_performance.cpp): in flight = min(read buffer / burst, outstanding x 0.8), rate
= min(bandwidth, burst x in flight / latency x 0.8), where 0.8 is its utilisation of the
outstanding requests and of the resulting rate (``utilisation`` here); a write channel has
no read buffer, only the port's outstanding writes and their latency. A kernel's memory
time is then the larger of its bytes over the bandwidth and its busiest stream over its
channel's rate (``hardware.memory.transfer_cycles``), as Vela's access cycles are.

A convolution's or fully connected layer's per-output-channel parameters (bias, scale,
shift: regor's ``EncodeScales``, ``SCALE_ELEMENT_SIZE`` 10 bytes per channel) come on a
channel of their own whose read buffer holds 16 words (``channelRBs``' last entry on every
Ethos-U85 configuration): two 128-byte bursts in flight, 0.41 bytes per cycle against the
500-cycle DRAM. A layer with C output channels therefore takes at least 10 C / 0.41
cycles, ~24 per channel, whatever its size (regor's ``MeasureAccessCycles``, the Scales
group); on a small network this, not the MACs, sets many layers' time. Vela re-reads
them once per output block in the plane (``weightsRefetch``), and its blocks are what
the accumulator RAM holds (``hardware/output_blocks.py``: MobileNetV2 x0.35's 8 -> 48
expansion at 48x48 on the U85-256 takes 55 blocks, 64,450 cycles of scale words; Vela's
70,312 cycles for it imply 60).

The SRAM is a memory like the DRAM to the DMA: each of its streams has as many 64-byte
bursts in flight as its two ports accept (Sram_max_reads / _writes 8 each, x 0.8), each
32 cycles away (vela.ini Ethos_U85_SYS_DRAM_Mid), so a feature map staged in the SRAM
streams at 20.5 of the port's 32 bytes per cycle (Vela's SRAM access cycles: MobileNetV2
x0.35's 48x48x48 expansion writes 110,592 bytes in 5,400 cycles).
A DMA request moves a whole burst, and a burst is one contiguous run of memory. An input
the host wrote (the image a network starts from: unpadded, channels last) is read a block
at a time, and a block covers one slice of its channels: where the input's channels are
not the block's depth, each pixel is its own run of one block depth of elements, and each
run costs a burst (regor ``EstimateMemoryTransfer``: bytes x longest burst / run). regor
cuts such a convolution's input in depths of 16 when it runs it kernel-first
(hardware/kernel_first.py) and of 64 otherwise (``FindBlockConfig``'s IFM block depth),
so a 3-channel image through a 3x3 kernel takes a 128-byte burst per 16 bytes:
its read channel moves an eighth of its rate. The NPU's own maps are written in its
16-channel bricks (NHCWB16), whose runs are whole bricks: they lose nothing. Left out:
regor's re-reads of an input block's halo and per sub-kernel, which add a quarter or so
on a 3x3 stem.

Latencies are in nanoseconds, so a clock change (the sustained-load governor) re-prices
them as it does the DRAM's.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import MISSING

from hardware.bounds import AT_LEAST_1, POSITIVE, Range, bounded
from hardware.kernel_cost import WIDTHS, bytes_per_cycle, latency_cycles
from hardware.kernel_first import kernel_first
from hardware.memory import Channels
from hardware.output_blocks import blocks_in_plane
from hardware.profile_schema import HardwareProfile
from hardware.units import FEATURE_MAPS, DmaModel, register, section
from ops.work import HostInput, Work


@dataclass
class DmaChannelsSection:
    """The DMA's channels (Vela's vela.ini memory settings and regor's per-configuration
    read buffers, ``channelRBs``, in bytes: 16-byte words x 16)."""

    # bytes one DMA request moves (the memory's longest burst)
    burst_bytes: int = bounded(MISSING, AT_LEAST_1, plausible=(4, 4096))
    # requests the memory port accepts in flight, reads and writes
    outstanding_reads: int = bounded(MISSING, AT_LEAST_1, plausible=(1, 1024))
    outstanding_writes: int = bounded(MISSING, AT_LEAST_1, plausible=(1, 1024))
    # the reads' latency is ``dram.latency_ns``; writes are acknowledged sooner
    write_latency_ns: float = bounded(MISSING, POSITIVE, plausible=(1, 100000))
    # read buffer of each read channel: convolution input fetches, streamed operands
    # (elementwise passes, copies), weights
    feature_map_buffer_bytes: int = bounded(MISSING, AT_LEAST_1, plausible=(16, 1 << 20))
    stream_buffer_bytes: int = bounded(MISSING, AT_LEAST_1, plausible=(16, 1 << 20))
    weight_buffer_bytes: int = bounded(MISSING, AT_LEAST_1, plausible=(16, 1 << 20))
    # the per-output-channel parameters' channel: its read buffer and the bytes each
    # output channel's bias, scale and shift take
    scale_buffer_bytes: int = bounded(MISSING, AT_LEAST_1, plausible=(16, 1 << 20))
    scale_bytes_per_channel: int = bounded(MISSING, AT_LEAST_1, plausible=(1, 64))
    # the MAC engine's accumulator RAM: it sets the output blocks a layer is cut into,
    # each of which reads the layer's scale words again (hardware/output_blocks.py)
    accumulator_bytes: int = bounded(MISSING, AT_LEAST_1, plausible=(256, 1 << 24))
    # the SRAM's own port (vela.ini Sram_*): its burst, its requests in flight on all
    # its ports together, and its latency; its channels' read buffers are the DRAM's
    sram_burst_bytes: int = bounded(MISSING, AT_LEAST_1, plausible=(4, 4096))
    sram_outstanding_reads: int = bounded(MISSING, AT_LEAST_1, plausible=(1, 1024))
    sram_outstanding_writes: int = bounded(MISSING, AT_LEAST_1, plausible=(1, 1024))
    sram_latency_ns: float = bounded(MISSING, POSITIVE, plausible=(0.1, 10000))
    # the share of outstanding requests, and of the rate they give, actually achieved
    utilisation: float = bounded(0.8, Range(low=0, high=1, low_open=True))


def channel_rate(burst: int, in_flight_limit: float, outstanding: int, latency: float,
                 port: float, utilisation: float) -> float:
    """Little's law for one channel: bytes per cycle with min(``in_flight_limit``,
    ``outstanding`` x ``utilisation``) bursts of ``burst`` bytes in flight, each taking
    ``latency`` cycles, never above the ``port``'s bandwidth."""
    in_flight = min(in_flight_limit, outstanding * utilisation)
    return min(port, burst * in_flight / max(latency, 1e-9) * utilisation)


@register
class DmaChannelsModel(DmaModel):
    name = "dma_channels"
    Section = DmaChannelsSection

    @staticmethod
    def channels(profile: HardwareProfile, reads: str, work: Work, precision: str
                 ) -> Channels:
        s: DmaChannelsSection = section(profile, "dma_channels")
        port, read_latency = bytes_per_cycle(profile), latency_cycles(profile)
        write_latency = s.write_latency_ns * 1e-9 * profile.frequency_mhz * 1e6

        def read(buffer: int) -> float:
            return channel_rate(s.burst_bytes, buffer / s.burst_bytes, s.outstanding_reads,
                                read_latency, port, s.utilisation)

        buffer = s.feature_map_buffer_bytes if reads == FEATURE_MAPS else \
            s.stream_buffer_bytes
        sram_port = profile.sram.bandwidth_bytes_per_cycle
        sram_latency = s.sram_latency_ns * 1e-9 * profile.frequency_mhz * 1e6
        useful = 1.0 if work.host_input is None else \
            run_share(work.host_input, WIDTHS[precision][0], s.burst_bytes)
        return Channels(a=read(buffer) * useful, b=read(s.weight_buffer_bytes),
                        c=channel_rate(s.burst_bytes, float("inf"), s.outstanding_writes,
                                       write_latency, port, s.utilisation),
                        fixed=output_channels(work) * s.scale_bytes_per_channel
                        * blocks_in_plane(work, s.accumulator_bytes)
                        / read(s.scale_buffer_bytes),
                        sram_read=channel_rate(s.sram_burst_bytes,
                                               buffer / s.sram_burst_bytes,
                                               s.sram_outstanding_reads, sram_latency,
                                               sram_port, s.utilisation),
                        sram_write=channel_rate(s.sram_burst_bytes, float("inf"),
                                                s.sram_outstanding_writes, sram_latency,
                                                sram_port, s.utilisation))


def input_block_depth(host: HostInput) -> int:
    """The depth regor cuts a convolution's input into (ethos_u85.cpp ``FindBlockConfig``):
    16 where it runs the convolution kernel-first (hardware/kernel_first.py), 64
    otherwise."""
    return 16 if kernel_first(host.channels, host.taps) else 64


def run_share(host: HostInput, element_bytes: int, burst: int) -> float:
    """The useful share of each burst reading an input the host wrote: one block depth of
    elements per burst where the input's channels are not the block's depth (regor
    ``EstimateMemoryTransfer``, NHWC reads); a whole burst where they are (the block's
    pixels are then contiguous)."""
    depth = input_block_depth(host)
    if host.channels == depth:
        return 1.0
    return min(1.0, depth * element_bytes / burst)


def output_channels(work: Work) -> int:
    """Output channels whose bias and scale a kernel reads: those of a layer with weights
    (convolution, depthwise, fully connected); 0 for anything else (elementwise passes,
    pooling, a product of two activations carry theirs in registers)."""
    if work.gemm is None or not work.weight_elems:
        return 0
    return work.gemm.n * work.gemm.groups
