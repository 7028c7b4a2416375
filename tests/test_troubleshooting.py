"""docs/troubleshooting.md against the code, both ways.

* Every message a heading lists is one Sluice can print: its literal text (between the ``<...>``
  placeholders) is in the JVM's or the Python package's sources; a heading under "From Spark, the
  JVM and the cluster manager" quotes Spark, YARN, Kubernetes or the JVM instead, and what it
  quotes from Spark is in pyspark's jars.
* Every message the code raises (``raised_messages.sites``: exception constructions, Scala
  ``require``, Python ``raise``) is listed under a heading, or exempted below with its reason.

**Adding a message.** When this test names a message you added, either give it an entry in
docs/troubleshooting.md (a ``### `message with <placeholders>` `` heading, then its cause and fix),
or, if no user can meet it or its text only ever reaches a user inside a listed one, add its
literal start (as the failure prints it, ``<>`` for interpolations) to ``EXEMPT`` under the reason
that fits, or a new reason. A message built away from its ``throw`` (passed in a variable) goes
in ``PASSED_ON``, keyed by file name and the expression thrown.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Dict, List, Tuple

import raised_messages
from raised_messages import HOLE, Site

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "troubleshooting.md"
# Headings under this section quote Spark, YARN, Kubernetes or the JVM, not Sluice.
NOT_SLUICE = "## From Spark, the JVM and the cluster manager"

# A string literal continued on the next line: `"... " +\n  s"...` (Scala) or `"... "\n  f"...` (Python).
_CONTINUED = re.compile(r"\"\s*\+?\s*\n\s*[sf]?\"")
_PLACEHOLDER = re.compile(r"<[^>]*>")

# ---- Messages the code raises that troubleshooting.md does not list, each with its reason ----------------------

INVARIANT = (
    "A broken invariant of Sluice's own code (a bug, not a setting or the cluster): the stack trace goes into a bug "
    "report; there is nothing for a user to fix."
)
LIFECYCLE = (
    "Raised only while an executor's network stack starts or stops, to a caller inside Sluice; tasks never see it."
)
WIRE = (
    "A peer broke the wire protocol (a corrupt or foreign frame). The reader fails with a listed message "
    "(`Lost the connection to <producer>` or `Reading <channel> failed`) that carries this text as its detail."
)
DETAIL = "Only ever the detail inside a listed message (its cause or a clause of it), never a message of its own."
STORAGE = (
    "A map-output file or index that reads back wrong; the reader fails with `Reading <channel> failed` and "
    "Spark recomputes the output, as under `The index <path> is corrupt` (listed)."
)
PYTHON_ARGUMENT = (
    "A Python argument of the wrong type or range: the message names the argument and the value it got, "
    "as Python's own TypeError and ValueError do."
)
DEMO = "`sluice demo`'s own argument checks, which say what to pass instead."
NODE_SERVICE_DETAIL = (
    "A node shuffle service's reason for refusing a control message or a connection: it reaches the user only "
    "inside a listed message (`Executor <id> could not register with the Sluice shuffle service`, `The Sluice "
    "shuffle service at <host>:<port> (<key>) refused application`, `The Sluice server at <host>:<port> refused "
    "the connection of application`, `Result partition (<id>) not found`)."
)
SERVICE_COMMAND = (
    "`sluice shuffle-service`'s own argument checks (the daemon's command line), which name the argument and print "
    "the usage."
)

REPORT = (
    "An executor's metrics report, or the driver's reply, that the other side cannot read: both run the same Sluice "
    "jar, so only a bug gets here. The executor logs a warning once and keeps reporting; only the Sluice tab's "
    "figures are missing."
)

EXEMPT: Dict[str, Tuple[str, ...]] = {
    REPORT: (
        "Not a Sluice report or reply: <> bytes starting with 0x<>",
        "A Sluice report or reply cut short: <> bytes",
        "A Sluice report or reply with <> bytes after its end",
        "A Sluice report or reply with a <> of <>",
    ),
    INVARIANT: (
        "a spill threshold of <> bytes",
        "an unbounded spanning record budget never spills",
        "a read scheduler of <> buffers",
        "map-side combine without an aggregator",
        "no more shuffle records",
        "<> ended before the end of <>",
        "Map outputs are moved on the driver, not with <>",
        "unknown constant pool tag <>",
        "no code source",
        "pipelined shuffle <> was forgotten",
        "Unexpected message <>",
        "unreachable",
        "<> was handed a stored buffer: <>",
        "<> was handed an in-memory buffer; only stored buffers are packed",
        "Result partition <> is blocking: it is read by the server's read threads",
        "Result partition (<>) is pipelined: its subpartitions are requested one channel each",
        "Subpartition <> of <> is pipelined and already being read",
        "<> returned <> bytes for <>",
        "<> changed nothing",
        "<> does not decrypt what it encrypted",
        "no buffer of <> was begun",
        "<> is already complete",
        "subpartition <> of <> has no buffer <>",
        "a buffer of <> is begun and not ended",
        "<> was released once too often",
        "<> serves one subpartition per reader, not [<>, <>)",
        "<> has no subpartition <>",
        "<> has no subpartitions [<>, <>)",
        "Result partition (<>) is already finished",
        "Result partition <> is already registered",
        "Result partition (<>) gave its memory back",
        "<> is not complete yet; blocking partitions are read once finished",
        "<> has no read buffer for spilled local data",
        "the previous buffer was not released",
        "<>: the input gate is closed",
        "<>: Sluice serves shuffle data over its own transport, not through Spark's BlockManager",
        "<>: Sluice keeps no sort-shuffle data, index or checksum files",
        "Sluice needs a running SparkEnv",
        "<> is true, but Spark gave this executor no I/O encryption key",
        "map task <> of shuffle <> failed",
        "Spark's network pipeline has no <> handler",
        "A Sluice server serves no chunks",
        # require(...): preconditions of Sluice's own classes, whose arguments come from checked settings.
        "<> has id <>, listed as <>",
        "<> must be 0..65535, not <>",
        "<> must be at least 0, not <>",
        "<> is not under <>",
        "<>=<> gives <> segments of <> bytes",
        "keep at least one finished task",
        "a rate needs a window of at least one sample",
        "a histogram needs room for at least one value",
        "Sluice needs at least one local dir for blocking partitions",
        "an index cache of <> bytes",
        "channels are set before the gate is read",
        "a pipelined local channel reads one input",
        "a gate needs at least one channel in flight",
        "an unpacked channel reads one input",
        "pipelined partitions are not read packed",
        "bad credit window bounds",
        "channel <> reads no input",
        "Spark's I/O encryption key has <> bits",
        "migrated file number <>",
        "a buffer of <> needs room for at least one byte",
        "<> bytes do not fit the <>-byte buffer begun in <>",
        "a read scheduler of <> threads",
        "only an empty data buffer gives buffers back",
        "<> needs at least one subpartition",
        "a cache of <> open files",
        "a BufferBuilder has only one BufferConsumer",
        "<> takes <> exclusive segments, not <>",
        "a NetworkBufferPool needs at least one segment",
        "asked for <> segments",
        "bad buffer pool bounds [<>, <>] for <>",
        "the previous buffer still holds unread elements",
        "latency markers need a positive interval",
        "the output flusher needs a positive buffer timeout",
        "a periodic task needs a positive interval",
        "<> channels for <> subpartitions",
        "executor id '<>' is not 1 to <> bytes",
        "authenticated as application <>, serving <>",
        "no layout to find partition files with",
    ),
    LIFECYCLE: (
        "Reading <> from the fallback storage was interrupted",
        "Sluice's shuffle environment is stopped",
        "The network buffer pool is destroyed",
        "The Sluice connection manager is already started",
        "The Sluice connection manager is shut down",
        "The Sluice connection manager is not started",
        "The Sluice client factory is already started",
        "The Sluice client factory is shut down",
        "The Sluice server is already started",
        "The Sluice server is shut down",
        "The Sluice server is not started",
        "The Sluice server is shutting down",
        "The result partition manager is shut down",
        "The buffer pool of <> is destroyed",
        "<> was released while being written",
        "<> was released",
        "<> is still being written",
        "<> is closed",
        "Interrupted while waiting for the connection to the Sluice server",
        "Interrupted while connecting to <> for <>",
        "<> was interrupted while reading <>",
    ),
    WIRE: (
        "<> for unknown receiver <> from <>",
        "<> reported a failure of input <> to <>, which requested <>",
        "<>; closing the connection",
        "<>; refused",
        "<> requested a second partition for receiver <>",
        "<> does not read its error responses",
        "<> sent a buffer for <> beyond its credit",
        "<> sent <> of input <> to <>, which requested <>",
        "<> sent <> of input <> (<>) to <> after that input's end",
        "<> received <> number <> from <>, expected number <>",
        "This is a Sluice shuffle server; it only accepts the upgrade to the Sluice protocol",
        "A spilled buffer of <> bytes does not fit a <>-byte segment",
        "<> sent a compressed buffer of raw length <>, more than a segment",
        "a request for executor <>'s map outputs reached an executor's server",
        "a request reached a node shuffle service without naming the executor that wrote its map outputs",
    ),
    DETAIL: (
        "<>: corrupt compressed data (<>)",
        "<>: <>",
        "zstd: <>",
        "The Sluice server at <> closed the connection: <>",
        "<>: <> (reported by the Sluice server at <>)",
        "The connection to <> was closed",
        "Sending the partition request to <> failed",
        "Writing to <> failed",
        "Could not connect to <>: <>",
        "<>; waited <>ms (spark.sluice.network.bufferRequestTimeout) but the executor's other pools and gates",
        "sluice <>: <>",
        "sluice: <>",
        "<> (on the Spark Connect server: set these on its command line)",
        "the <> data source returned <> rows instead of one",
        "a global aggregate returned no row",
        "Could not move the map output of <> to this executor on the driver",
        "<> arrived without its index (<> must come first)",
        "<> is larger than a Sluice partition index can be",
        "Sluice's block resolver cannot receive <>",
        "Could not send <>: <>",
    ),
    STORAGE: (
        "an index of <> buffers is larger than 2 GiB",
        "the index of <> does not describe its <> bytes",
        "The index <> ends at <>, before the <> bytes read at <>",
        "The index file <> is unusable: <>",
    ),
    PYTHON_ARGUMENT: (
        "expected a pyspark.sql.SparkSession (classic, or a Spark Connect session), got <>",
        "sluice.configure expects a pyspark.sql.SparkSession.Builder",
        "prometheus must be True or False, got <>",
        "<> must be an int or None, got <>",
        "<> must be >= 0, got <>",
    ),
    DEMO: (
        "sluice demo: --rows and --partitions must be at least 1",
        "sluice demo: --keep-ui takes a positive number of seconds",
    ),
    NODE_SERVICE_DETAIL: (
        "a client authenticated as <> sent a message for application <>",
        "Unreadable node service message: <>",
        "The node shuffle service is stopping",
        "executor <> of application <> never registered with this node shuffle service",
        "a registration of <> local dirs",
        "unknown node service message type <>",
        "a reply of type <>",
        "not a Sluice node service message",
        "node service message version <>, this Sluice reads version <>",
        "a node service message that ends early",
        "a text of <> bytes",
        "cannot create <>",
    ),
    SERVICE_COMMAND: (
        "<>: <> is not absolute",
        "--conf <>: expected KEY=VALUE",
        "unknown argument <>",
        "unknown setting <> (see Sluice's docs/configuration.md)",
        "--properties-file <>: no such file",
        "sluice shuffle-service: <>",
        "sluice shuffle-service needs a Java 17 runtime",
        "pyspark at <> has no jars/ (pyspark-client cannot run the service)",
        "sluice compare: <>",
        "cannot read the event log <>: <>",
    ),
}

# Sites whose message is built away from the throw: "<file name>: <expression thrown>" -> where it is built.
PASSED_ON: Dict[str, str] = {
    "SluiceConf.scala: why": (
        "AtLeast.violation builds it: `Invalid value '<value>' for <key>: must be at least` (listed)"
    ),
    "CreditBasedPartitionRequestClientHandler.scala: o.describe": "an oversized frame's description (wire detail)",
    "NettyMessage.scala: what": "check(...) of a message's decode: a malformed frame's description (wire detail)",
    "NettyMessageDecoder.scala: what": "check(...) of the frame decoder: a malformed frame's description (wire detail)",
    "PartitionRequestClientFactory.scala: io.getMessage": "a failed connection attempt's own message, rethrown",
    "PartitionRequestQueue.scala: peer.readerLimitMessage": (
        "PeerLimits builds it: `Refused a partition request from <host>` (listed)"
    ),
    "SparkInternals.scala: location": (
        "Spark's FetchFailedException, carrying a channel's failure: `Reading <channel> failed` (listed)"
    ),
    "_jvm.py: str(error)": (
        "the error SluiceMetricsAccessor answers: `Sluice's plugin is not running in this driver` (listed)"
    ),
    "NettyProtocol.scala: why": (
        "a server's reason for refusing an upgrade: `The Sluice server at <host>:<port> refused the connection "
        "of application <app>: <why>` (listed)"
    ),
    "ApplicationRegistry.scala: why": (
        "a node service's reason for refusing a registration: `The Sluice shuffle service at <host>:<port> (<key>) "
        "refused application <app>: <why>` (listed)"
    ),
    "ShuffleServiceClient.scala: RemoteErrors.message(Option(e.getCause).getOrElse(e))": (
        "the node service's own reason, carried inside `The Sluice shuffle service at <host>:<port> (<key>)` (listed)"
    ),
    "BlockCodec.scala: SparkSettingRules.Codec.message(Map(SparkSettingRules.CodecKey -> value).get)": (
        "the codec rule's message: `Sluice cannot compress buffers with spark.io.compression.codec=<codec>` (listed)"
    ),
    "PartitionedFileCipher.scala: SparkSettingRules.Cipher.message(Map(TransformationKey -> String.valueOf(transformation)).get)": (  # noqa: E501
        "the cipher rule's message: `spark.io.crypto.cipher.transformation=<value> is not supported` (listed)"
    ),
    "TransportConfOverlay.scala: name": (
        "a ConfigProvider's answer for a key it lacks: Spark's TransportConf catches it and uses its default"
    ),
}


def sources() -> str:
    files = sorted((REPO / "jvm" / "src" / "main" / "scala").rglob("*.scala"))
    files += sorted((REPO / "python" / "sluice").glob("*.py"))
    return "\n".join(_CONTINUED.sub("", f.read_text(encoding="utf-8")) for f in files)


def headings(page: str) -> List[Tuple[str, bool]]:
    """(heading, whether it quotes Sluice) of every ``###`` heading of ``page``."""
    found, sluice = [], True
    for line in page.splitlines():
        if line.startswith("## "):
            sluice = line.strip() != NOT_SLUICE
        elif line.startswith("### "):
            found.append((line, sluice))
    return found


def listed_messages(sluice: bool = True) -> List[str]:
    """The backquoted messages of the page's headings: Sluice's (or, with ``sluice=False``, the others)."""
    page = PAGE.read_text(encoding="utf-8")
    return [
        message for heading, own in headings(page) if own == sluice for message in re.findall(r"`([^`]+)`", heading)
    ]


def not_in(code: str, messages: List[str]) -> List[str]:
    """The literal fragments of ``messages`` (4 characters or more) that ``code`` does not hold."""
    missing = []
    for message in messages:
        for fragment in _PLACEHOLDER.split(message):
            if len(fragment.strip()) >= 4 and fragment not in code:
                missing.append(f"{fragment!r} of {message!r}")
    return missing


def matches(listed: str, message: str) -> bool:
    """Whether the listed ``message`` (placeholders ``<...>``) describes a raised one (interpolations
    as HOLE): every literal fragment of 4 characters or more is in it, in order."""
    fragments = [f for f in _PLACEHOLDER.split(listed) if len(f.strip()) >= 4]
    if not fragments:
        return False
    pattern = ".*?".join(re.escape(f) for f in fragments)
    return re.search(pattern, message, re.DOTALL) is not None


def exempted(site: Site) -> bool:
    """Whether an EXEMPT entry names the site's message: its start, or the whole message when the
    entry holds under 12 letters of its own (``<>: <>``, ``zstd: <>``)."""
    shown = site.shown
    for starts in EXEMPT.values():
        for start in starts:
            if shown == start or (len(start.replace("<>", "")) >= 12 and shown.startswith(start)):
                return True
    return False


def passed_on_key(site: Site) -> str:
    return f"{Path(site.path).name}: {site.expression}"


def unaccounted(all_sites: List[Site], listed: List[str]) -> List[Site]:
    """The sites whose message is neither listed nor exempted nor passed on from a known place."""
    own = set(raised_messages.own_exception_classes(all_sites))
    left = []
    for site in all_sites:
        if site.message is None:
            forwarding = bool(site.declares)  # an exception class passing its caller's message up
            if forwarding or site.exception.split(".")[-1] in own or passed_on_key(site) in PASSED_ON:
                continue
        elif site.declares and site.message.startswith(HOLE):
            continue  # an exception class adding to its caller's message, which its callers' sites carry
        elif any(matches(m, site.message) for m in listed) or exempted(site):
            continue
        left.append(site)
    return left


def test_every_listed_message_is_in_the_code() -> None:
    messages = listed_messages()
    assert len(messages) >= 50, messages
    missing = not_in(sources(), messages)
    assert not missing, "\n".join(missing)


def test_every_raised_message_is_listed_or_exempted() -> None:
    all_sites = raised_messages.sites()
    assert len(all_sites) >= 200, len(all_sites)  # the scanner found the code's messages
    left = unaccounted(all_sites, listed_messages())
    assert not left, (
        "Messages raised in the code but not in docs/troubleshooting.md (add an entry with cause and fix), "
        "nor exempted in tests/test_troubleshooting.py (EXEMPT or PASSED_ON, with a reason):\n"
        + "\n".join(f"  {s.path}:{s.line} {s.exception}: {s.shown or s.expression!r}" for s in left)
    )


def test_every_exemption_is_still_raised() -> None:
    """An exemption whose message no longer exists is removed, so the list stays the code's."""
    all_sites = raised_messages.sites()
    shown = [s.shown for s in all_sites if s.message is not None]
    stale = [start for starts in EXEMPT.values() for start in starts if not any(m.startswith(start) for m in shown)]
    assert not stale, stale
    keys = {passed_on_key(s) for s in all_sites if s.message is None}
    assert not set(PASSED_ON) - keys, set(PASSED_ON) - keys
    # No message is both listed and exempted: the page is where a listed message's reason lives.
    listed = listed_messages()
    both = [s.shown for s in all_sites if s.message and exempted(s) and any(matches(m, s.message) for m in listed)]
    assert not both, both


def test_the_check_notices_a_message_that_is_not_in_the_code() -> None:
    code = sources()
    assert not_in(code, ["Could not connect to the Sluice server at <host>:<port>"]) == []
    assert not_in(code, ["Could not connect to the Sluice cluster at <host>"]) == [
        "'Could not connect to the Sluice cluster at ' of 'Could not connect to the Sluice cluster at <host>'"
    ]


def test_the_check_notices_a_raised_message_that_is_not_listed(tmp_path: Path) -> None:
    """The scanner reads interpolated, concatenated and multi-line messages of both languages, and a
    new one is reported until it is listed."""
    scala = tmp_path / "jvm" / "src" / "main" / "scala" / "io" / "sluice" / "Example.scala"
    scala.parent.mkdir(parents=True)
    scala.write_text(
        'class Example {\n  def f(n: Int): Unit =\n    throw new IllegalStateException(s"Frobbed ${n + 1} widgets " +\n'
        '      s"on $host: raise spark.sluice.frob")\n  require(n > 0, "n must be positive")\n'
        "  def g(e: Exception) = new java.io.IOException(e.getMessage, e)\n}\n",
        encoding="utf-8",
    )
    python = tmp_path / "python" / "sluice" / "example.py"
    python.parent.mkdir(parents=True)
    python.write_text('def f(x):\n    raise ValueError(f"bad {x!r}: " + "use another")\n', encoding="utf-8")
    found = raised_messages.sites(tmp_path)
    assert [(s.exception, s.shown, s.expression) for s in found] == [
        ("IllegalStateException", "Frobbed <> widgets on <>: raise spark.sluice.frob", found[0].expression),
        ("IllegalArgumentException (require)", "n must be positive", '"n must be positive"'),
        ("java.io.IOException", "", "e.getMessage"),
        ("ValueError", "bad <>: use another", 'f"bad {x!r}: " + "use another"'),
    ]
    assert [s.shown for s in unaccounted(found, ["bad <value>: use another"])] == [
        "Frobbed <> widgets on <>: raise spark.sluice.frob",
        "n must be positive",
        "",
    ]
    assert matches("Frobbed <n> widgets on <host>", found[0].message or "")
    assert not matches("Frobbed <n> gadgets on <host>", found[0].message or "")
    assert not matches("Frobbed <n> widgets <x> near <host>", found[0].message or "")


def test_the_refusals_and_setting_errors_are_all_listed() -> None:
    """The messages a user meets first (bad settings, refused Spark settings, the version check)."""
    listed = " ".join(listed_messages())
    for prefix in (
        "Unknown Sluice option",
        "Invalid value",
        "Unknown Sluice setting",
        "cannot run with",
        "was built for Spark",
        "cannot run on Spark",
        "Sluice cannot compress buffers",
        "in Spark's fallback storage, but this executor has none",
        "sluice.configure cannot switch on Sluice",
        "A SparkContext is already running",
        "must be at least",
        "could not bind",
        "This JVM cannot encrypt",
    ):
        assert prefix in listed, prefix


def spark_jar_strings() -> bytes:
    """The class files of pyspark's Spark jars, concatenated (their constant pools hold Spark's messages)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    chunks = []
    for jar in sorted(jars.glob("spark-*.jar")):
        with zipfile.ZipFile(jar) as z:
            chunks += [z.read(n) for n in z.namelist() if n.endswith(".class")]
    return b"\n".join(chunks)


def test_messages_quoted_from_spark_are_spark_s() -> None:
    """The section on Spark's, the JVM's and the cluster managers' messages: what it attributes to
    Spark (a heading ending in "(Spark)") is in Spark's own classes."""
    page = PAGE.read_text(encoding="utf-8")
    spark = [h for h, own in headings(page) if not own and h.rstrip().endswith("(Spark)")]
    assert len(spark) >= 3, spark
    classes = spark_jar_strings()
    missing = [
        f"{fragment!r} of {heading!r}"
        for heading in spark
        for message in re.findall(r"`([^`]+)`", heading)
        for fragment in _PLACEHOLDER.split(message)
        if len(fragment.strip()) >= 4 and fragment.encode("utf-8") not in classes
    ]
    assert not missing, "\n".join(missing)
