"""``sluice-bench`` (also ``sluice bench``): benchmarks a user can rerun, Sluice against Spark's
own shuffles. A tool beside Sluice, in its own distribution (``pip install ./bench``), with its
own jar of JVM classes (``sluice_bench/jars/sluice-bench.jar``). Sluice does not depend on it:
``sluice bench`` hands over to :func:`sluice_bench.cli.main` when it is installed.

One module per question: ``batch`` (a shuffle-heavy job and TPC-H SF1 against the sort
shuffle; with ``--short``, short queries: ``short``), ``transport`` (throughput per buffer
timeout, and against iperf3), ``latency``
(Real-Time Mode against Spark's streaming shuffle), ``memory`` (peak network memory against
the budget), ``scale`` (data size, partitions, connections), ``cluster`` (the batch jobs
on dev/cluster's multi-host test cluster per link rate, and the links' use) and ``allocation``
(executor-seconds of a bursty job under dynamic allocation on dev/cluster, with Spark's and
Sluice's node shuffle services and with shuffle tracking). ``batch`` and ``scale`` take
``--service``: a third contender whose map outputs Sluice's node shuffle service serves. Each alternates
its contenders (A B A B ...) over several rounds, each run a separate Spark application in its
own process, and writes a JSON result and a PNG chart (into ``docs/benchmarks/`` unless told otherwise).
"""

BENCHMARKS = ("batch", "transport", "latency", "memory", "scale", "cluster", "allocation")

__all__ = ["BENCHMARKS"]
