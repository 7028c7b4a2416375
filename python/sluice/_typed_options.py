"""The keyword arguments of ``sluice.configure`` and ``sluice.spark_conf``, typed (generated from
io.sluice.config.SluiceOptions by ``dev/gen-config``; do not edit by hand).

Sizes are bytes as an int, or a string with a unit (``"32k"``, ``"64m"``); durations are
milliseconds as an int, a ``datetime.timedelta``, or a string with a unit (``"10ms"``, ``"5s"``).
"""

from __future__ import annotations

import datetime
from typing import Literal, TypedDict, Union


class SluiceOptions(TypedDict, total=False):
    """Sluice's options by their Python names; see docs/configuration.md for each."""

    segment_size: Union[int, str]
    """``spark.sluice.memory.segmentSize``, default ``32k``."""

    network_memory: Union[int, str]
    """``spark.sluice.network.memory``, default ``64m``."""

    sort_buffer_size: Union[int, str]
    """``spark.sluice.memory.sortBufferSize``, default ``16m``."""

    record_spill_threshold: Union[int, str]
    """``spark.sluice.memory.recordSpillThreshold``, default ``5m``."""

    buffers_per_channel: int
    """``spark.sluice.network.buffersPerChannel``, default ``2``."""

    floating_buffers_per_gate: int
    """``spark.sluice.network.floatingBuffersPerGate``, default ``8``."""

    max_credit_window: int
    """``spark.sluice.network.maxCreditWindow``, default ``64``."""

    max_channels_in_flight_per_gate: int
    """``spark.sluice.network.maxChannelsInFlightPerGate``, default ``128``."""

    max_required_buffers_per_gate: int
    """``spark.sluice.network.maxRequiredBuffersPerGate``, default ``16``."""

    max_buffers_per_subpartition: int
    """``spark.sluice.network.maxBuffersPerSubpartition``, default ``10``."""

    buffer_request_timeout: Union[int, str, datetime.timedelta]
    """``spark.sluice.network.bufferRequestTimeout``, default ``5min``."""

    buffer_timeout: Union[int, str, datetime.timedelta]
    """``spark.sluice.bufferTimeout``, default ``100ms``."""

    idle_flush_interval: Union[int, str, datetime.timedelta]
    """``spark.sluice.idleFlushInterval``, default ``1ms``."""

    credit_based: bool
    """``spark.sluice.network.creditBased``, default ``true``."""

    port: int
    """``spark.sluice.network.port``, default ``0``."""

    server_threads: int
    """``spark.sluice.network.serverThreads``, default ``0``."""

    client_threads: int
    """``spark.sluice.network.clientThreads``, default ``0``."""

    connect_timeout: Union[int, str, datetime.timedelta]
    """``spark.sluice.network.connectTimeout``, default ``0ms``."""

    request_timeout: Union[int, str, datetime.timedelta]
    """``spark.sluice.network.requestTimeout``, default ``2min``."""

    heartbeat_timeout: Union[int, str, datetime.timedelta]
    """``spark.sluice.network.heartbeatTimeout``, default ``0ms``."""

    max_frame_length: Union[int, str]
    """``spark.sluice.network.maxFrameLength``, default ``1m``."""

    max_connections_per_peer: int
    """``spark.sluice.network.maxConnectionsPerPeer``, default ``128``."""

    max_readers_per_peer: int
    """``spark.sluice.network.maxReadersPerPeer``, default ``32768``."""

    max_open_partition_files: int
    """``spark.sluice.network.maxOpenPartitionFiles``, default ``4096``."""

    index_cache_size: Union[int, str]
    """``spark.sluice.network.indexCacheSize``, default ``32m``."""

    read_threads: int
    """``spark.sluice.network.readThreads``, default ``0``."""

    read_memory: Union[int, str]
    """``spark.sluice.network.readMemory``, default ``0b``."""

    metrics_report_interval: Union[int, str, datetime.timedelta]
    """``spark.sluice.metrics.reportInterval``, default ``1s``."""

    latency_tracking_interval: Union[int, str, datetime.timedelta]
    """``spark.sluice.latencyTracking.interval``, default ``0ms``."""

    latency_tracking_granularity: Literal["single", "operator", "subtask"]
    """``spark.sluice.latencyTracking.granularity``, default ``operator``."""

    backpressure_num_samples: int
    """``spark.sluice.backpressure.numSamples``, default ``100``."""

    backpressure_delay_between_samples: Union[int, str, datetime.timedelta]
    """``spark.sluice.backpressure.delayBetweenSamples``, default ``50ms``."""

    backpressure_refresh_interval: Union[int, str, datetime.timedelta]
    """``spark.sluice.backpressure.refreshInterval``, default ``1min``."""

    service_enabled: bool
    """``spark.sluice.service.enabled``, default ``false``."""

    service_port: int
    """``spark.sluice.service.port``, default ``7338``."""

    service_host: str
    """``spark.sluice.service.host``, default ````."""

    service_fallback_to_executor: bool
    """``spark.sluice.service.fallbackToExecutor``, default ``false``."""

    service_application_timeout: Union[int, str, datetime.timedelta]
    """``spark.sluice.service.applicationTimeout``, default ``5min``."""

    service_allowed_dirs: str
    """``spark.sluice.service.allowedDirs``, default ````."""

    service_recovery_dir: str
    """``spark.sluice.service.recoveryDir``, default ````."""
