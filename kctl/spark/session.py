"""The SparkSession kctl runs on, and running a job so that Ctrl-C cancels it.

How this works
--------------
``spark_session(master)`` sets the environment the measured facts call for
before the JVM starts: ``SPARK_LOCAL_IP=127.0.0.1`` and ``spark.driver.host`` on
loopback for local masters and standalone masters on this host (works offline), and
``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` to the running interpreter unless set
(otherwise tasks run the ``python3`` on PATH, which has no kctl). The driver JVM maps
an AppCDS archive of Spark's classes when it has one (``class_archive_options``).
kctl launches the driver JVM itself, in a session of its own (``_launch_driver_jvm``): a
signal to kctl's process group never reaches it, and it exits when kctl does, even SIGKILLed.
The UI and the console progress bar are off and log4j is quiet. A task is
never retried (``spark.task.maxFailures=1``): a retried load task would produce
its records twice, and a failure must fail the run with its own error.

``spark_session(master, end_at_exit=True)`` (``kctl analyze``, in a process of its own)
also ends the driver JVM it starts for a local master quickly when the process exits: the
JVM keeps its scratch files (``spark.local.dir``, ``java.io.tmpdir``) in one directory of
its own; at exit the SparkContext is stopped (tasks, Python workers, listeners), the JVM
killed and the directory removed. Left to itself the JVM would run its shutdown hooks
after the driver's exit (among them an ``rm -rf`` forked per temporary directory): 0.55 s
from the command's return to the end of its processes on a small machine, 0.25 s so.
Such a command ends with ``exit_now(spark)``: the atexit handlers run (that end among
them), and the process exits without the interpreter's teardown (0.15-0.2 s more).

``run_job(spark, fn)`` runs an action in a thread under a job group; the
calling thread waits, and a KeyboardInterrupt cancels the group (so Spark
kills the tasks) before it is re-raised, as ``JobInterrupted``. With ``on_stop``
(the load jobs: kctl/spark/load.py) a stop first calls it (the tasks are told to
finish) and waits up to ``stop_wait_s`` for the action to end on its own; only a job
still running then (or a second stop) is cancelled. ``JobInterrupted.completed`` says
which, with the action's value when it ended. A job failure comes back as a
``SparkJobError`` whose message is the task's own error when the task raised a
``TaskError`` (the line marked ``kctl-task-error:``), not the JVM stack.

``check_barrier_slots`` fails clearly when a barrier stage asks for more tasks
than the cluster has slots: Spark would otherwise wait for slots that never come.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from kctl.errors import ConfigError, KctlError
from kctl.load.stop import PARENT_STOPS, stops_held

T = TypeVar("T")
DEFAULT_MASTER = "local[*]"
TASK_ERROR_MARK = "kctl-task-error:"
_TASK_ERROR = re.compile(re.escape(TASK_ERROR_MARK) + r" ?(.*)")


class SparkJobError(KctlError):
    """A Spark job failed; the message is the failing task's error."""


class JobInterrupted(KeyboardInterrupt):
    """A stop (Ctrl-C, SIGTERM) while ``run_job`` waited. ``completed``: the action still
    ended on its own within the stop's wait, and ``value`` is what it returned; otherwise
    the job group was cancelled (its tasks killed) and ``value`` is None. A
    ``KeyboardInterrupt``, so callers that only stop go on catching that."""

    def __init__(self, completed: bool, value: Any = None) -> None:
        super().__init__()
        self.completed = completed
        self.value = value


class TaskError(RuntimeError):
    """Raised inside a task to fail the job with this message (found again on the driver)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{TASK_ERROR_MARK} {message.replace(chr(10), ' | ')}")


def require_pyspark() -> None:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise ConfigError("this command needs PySpark: pip install 'kctl[spark]'") from None


#: The driver JVM's log4j2 config: errors only, and not a failed task's (the driver's
#: executor in local mode logs its stack trace, the scheduler that it aborts the job):
#: the job's failure reaches kctl, which says it in one line (``job_error_message``).
_LOG4J = ("rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\n"
          "appender.console.type = Console\nappender.console.name = console\n"
          "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
          "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n\n"
          "logger.spark.name = org.apache.spark\nlogger.spark.level = error\n"
          "logger.executor.name = org.apache.spark.executor.Executor\nlogger.executor.level = off\n"
          "logger.taskset.name = org.apache.spark.scheduler.TaskSetManager\n"
          "logger.taskset.level = off\n")


def _quiet_log4j() -> str:
    """The path of ``_LOG4J``, written once (named by its content, so a changed config is
    a new file)."""
    import hashlib
    import tempfile
    digest = hashlib.sha256(_LOG4J.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"kctl-log4j2-{os.getuid()}-{digest}.properties")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(_LOG4J)
        os.replace(tmp, path)
    return path


#: The master URL forms Spark 4 accepts (SparkContext.createTaskScheduler and its cluster
#: managers): local, local[N|*], local[N|*,F], local-cluster[N,C,M], spark://host:port[,...],
#: yarn, k8s://... (Mesos is gone in Spark 4).
_MASTER_FORMS = (
    re.compile(r"local"),
    re.compile(r"local\[([0-9]+|\*)\]"),
    re.compile(r"local\[([0-9]+|\*)\s*,\s*([0-9]+)\]"),
    re.compile(r"local-cluster\[\s*([0-9]+)\s*,\s*([0-9]+)\s*,\s*([0-9]+)\s*\]"),
    re.compile(r"spark://[^/,]+:[0-9]+(,[^/,]+:[0-9]+)*"),
    re.compile(r"yarn"),
    re.compile(r"k8s://.+"),
)


def check_master(master: str | None) -> None:
    """Refuses a ``--master`` Spark would refuse, before a JVM starts (Spark's answer is a
    Java stack trace seconds later)."""
    if master is None:
        return
    m = next((m for f in _MASTER_FORMS if (m := f.fullmatch(master))), None)
    if m is None:
        raise ConfigError(f"--master {master!r}: not a Spark master URL; expected local, local[N], "
                          "local[*], local-cluster[N,C,M], spark://host:port, yarn or k8s://...")
    if master.startswith("local[") and m.group(1) == "0":
        raise ConfigError(f"--master {master!r}: a local master needs at least 1 thread")


def spark_session(master: str | None = None, *, app_name: str = "kctl",
                  end_at_exit: bool = False) -> Any:
    """The active SparkSession, or a new one on ``master`` (``local[*]`` by default).
    ``end_at_exit``: a new local session is ended quickly when the process exits (above)."""
    require_pyspark()
    check_master(master)
    master = master or DEFAULT_MASTER
    loopback = master.startswith("local") or _loopback_master(master)
    if loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Tasks run this interpreter unless the user names another (a cluster's executors may
    # keep kctl elsewhere, e.g. a packed environment shipped with spark.archives).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    log4j = _quiet_log4j()
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"
    if master.startswith("local"):
        # The JVM only schedules here (the work is in Python tasks): the C1 JIT and the
        # serial GC halve a cold start on a small, busy machine (measured 39 s -> 20 s).
        java_opts += " -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    archive = class_archive_options()
    # A JVM that dumps the class archive must exit its own way (the dump is made then).
    scratch = None
    if end_at_exit and master.startswith("local") and "ArchiveClassesAtExit" not in archive:
        import tempfile
        scratch = tempfile.mkdtemp(prefix="kctl-spark-")
        java_opts += f" -Djava.io.tmpdir={scratch}"
    driver_opts = f"{java_opts} {archive}".strip()
    options = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.task.maxFailures": "1",
        "spark.stage.maxConsecutiveAttempts": "1",
        # A barrier stage with too few slots fails after 3 checks, 1 s apart,
        # instead of Spark's default 40 x 15 s of silence.
        "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "3",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.shuffle.partitions": "8",
        "spark.driver.extraJavaOptions": driver_opts,
        "spark.executor.extraJavaOptions": java_opts,
    }
    if loopback:
        # The driver, the master and the executors are on this host: the executors reach
        # the driver on loopback, whatever the host name resolves to.
        options["spark.driver.host"] = "127.0.0.1"
    if scratch is not None:
        options["spark.local.dir"] = scratch
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    # py4j logs a Ctrl-C that lands inside one of its calls as an error with a traceback
    # (then cleans up and the KeyboardInterrupt goes on): the stop is kctl's to report.
    logging.getLogger().addFilter(_not_py4j_interrupt)
    try:
        # Taken in the middle, a stop cut py4j's calls to a half-started JVM: Java and py4j
        # tracebacks on stderr, and a JVM could outlive kctl. Held, it goes the usual way
        # (KeyboardInterrupt, the session ended at exit) once the JVM and context are up.
        with stops_held():
            _launch_driver_jvm(options)
            spark = builder.getOrCreate()
    except BaseException:
        if scratch is not None:
            import shutil
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    spark.sparkContext.setLogLevel("ERROR")
    if scratch is not None:
        import atexit
        global _ends_at_exit
        atexit.register(_end_now, spark, scratch)
        _ends_at_exit = spark
    return spark


#: The line every driver JVM of Spark 4 prints first on stderr: Spark's launcher adds
#: ``--add-modules=jdk.incubator.vector`` to the driver's command line (JavaModuleOptions,
#: with no way to leave it out), for the BLAS of MLlib (dev.ludovic.netlib's VectorBLAS, the
#: only user of the module in Spark's jars), which kctl never calls. The module stays (an
#: MLlib user of the same session keeps it); only the line is not passed on.
JVM_INCUBATOR_WARNING = b"WARNING: Using incubator modules: jdk.incubator.vector"


def _launch_driver_jvm(options: dict[str, str]) -> None:
    """Starts the driver JVM as pyspark would (its ``launch_gateway``, with these settings
    as ``--conf``), but with its stderr on a pipe that ``forward_jvm_stderr`` passes on to
    this process's stderr, all but ``JVM_INCUBATOR_WARNING``, and in a session of its own;
    the SparkContext then takes this JVM (pyspark keeps the gateway of the process in
    ``SparkContext._gateway``, and launches one only when it has none: a private handle,
    with no public one). Nothing is launched when the process has a JVM already (a session
    made before, pyspark's shell).

    A session of its own: a signal to kctl's process group (a terminal's Ctrl-C, ``kill
    -TERM -PGID``, systemd's ``KillMode=control-group`` stopping kctl) reaches kctl and not
    the JVM, whose SIGTERM would run its shutdown hooks, stopping the SparkContext under the
    run's stop (its tasks killed, kctl failing with the JVM's error); kctl stops the job
    its own way. The JVM never outlives kctl: it reads its stdin, a pipe from kctl
    (pyspark's), and exits at its end (Spark's ``PythonGatewayServer``), so when kctl exits
    or is killed (SIGKILL) it stops its SparkContext (tasks, pyspark's daemon and Python
    workers) in its shutdown hooks and exits; ``end_at_exit`` kills it sooner (above)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:  # noqa: SLF001
        return
    conf = SparkConf()
    for key, value in options.items():
        conf.set(key, value)
    # The pipe is read from before the launch: a JVM that fails to start says why there.
    read_fd, write_fd = os.pipe()
    threading.Thread(target=forward_jvm_stderr, args=(os.fdopen(read_fd, "rb"),),
                     name="kctl-jvm-stderr", daemon=True).start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_fd, "start_new_session": True})
    finally:
        os.close(write_fd)              # the JVM has its own; the reader ends when it exits
    with SparkContext._lock:                                        # noqa: SLF001
        SparkContext._gateway = gateway                             # noqa: SLF001
        SparkContext._jvm = gateway.jvm                             # noqa: SLF001


def forward_jvm_stderr(stream: Any, out_fd: int = 2) -> None:
    """The driver JVM's stderr (and its children's: Spark's Python workers, log4j), line by
    line to ``out_fd`` (this process's stderr, where the JVM wrote before), less
    ``JVM_INCUBATOR_WARNING``. Reads to the end even when ``out_fd`` fails, so the JVM never
    blocks on a full pipe. Lines the JVM writes after this process has exited are lost (a
    daemon thread): at error level, the JVM's shutdown writes none."""
    writable = True
    with stream:
        for line in iter(stream.readline, b""):
            if not writable or line.rstrip(b"\r\n") == JVM_INCUBATOR_WARNING:
                continue
            view = memoryview(line)
            try:
                while view:
                    view = view[os.write(out_fd, view):]
            except OSError:
                writable = False                # stderr closed: drain, pass nothing on


def _not_py4j_interrupt(record: Any) -> bool:
    return record.getMessage() != "KeyboardInterrupt while sending command."


#: The session this process ends at its exit (``end_at_exit``), if any.
_ends_at_exit: Any = None


def exit_now(spark: Any) -> None:
    """Ends the process now, status 0, when ``spark`` is a session it ends at exit
    (``spark_session(end_at_exit=True)`` made it): a command whose work is done calls it
    last. As a normal exit does, the other non-daemon threads are waited for and every
    atexit handler runs (the session's end among them); stdout and stderr are flushed. What
    is skipped is the interpreter's teardown, freeing one by one the objects of a process
    that holds PySpark, pyarrow and kctl, which the OS frees at once: 0.15 s on a small
    machine. Returns for any other session (one that was active already, as in tests)."""
    if spark is None or spark is not _ends_at_exit:
        return
    import atexit
    current = threading.current_thread()
    for t in threading.enumerate():
        if t is not current and not t.daemon:
            t.join()
    atexit._run_exitfuncs()                                         # noqa: SLF001
    status = 0
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):                       # a reader that went away
            status = 1
    os._exit(status)


def _end_now(spark: Any, scratch: str) -> None:
    """At the driver's exit: the SparkContext stopped (tasks, Python workers, listeners and
    event log closed), then its JVM, which has nothing left to do or save, killed, and its
    scratch directory removed. ``Runtime.halt`` takes 0.3 s more than a kill here, and
    ``SparkSession.stop()`` also waits up to a second for the Python accumulator server's
    polling loop, a thread that ends with this process anyway. Private handles: PySpark
    has no public one on the driver JVM's process."""
    import shutil
    # py4j logs a command that fails on a connection the JVM dropped as an error, with
    # its traceback, to the root logger (then returns an error to its caller, which
    # handles it): once in a full test run such a line was printed at this end (which
    # command, not found). Nothing of it is the user's to read: the JVM is ended anyway.
    logging.getLogger().addFilter(_not_py4j_send_failure)
    sc = spark.sparkContext
    proc = getattr(sc._gateway, "proc", None)                       # noqa: SLF001
    accumulators = getattr(sc, "_accumulatorServer", None)
    try:
        if sc._jsc is not None:                                     # noqa: SLF001
            sc._jsc.stop()                                          # noqa: SLF001
    except Exception:  # noqa: BLE001 - the JVM may be gone already; it is killed either way
        pass
    if accumulators is not None:
        # Its connection from the JVM ends with the kill: an end, not an error to print.
        accumulators.server_shutdown = True
        accumulators.handle_error = lambda *_: None
    # Python objects that stand for JVM objects tell the JVM when they are collected, and
    # some may be collected after this, as the interpreter ends: a gateway client that is
    # not connected sends nothing.
    client = getattr(sc._gateway, "_gateway_client", None)         # noqa: SLF001
    if client is not None:
        client.is_connected = False
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
    shutil.rmtree(scratch, ignore_errors=True)


def _not_py4j_send_failure(record: Any) -> bool:
    return record.getMessage() != "Exception while sending command."


def _loopback_master(master: str) -> bool:
    """spark://127.0.0.1:7077, spark://localhost:7077 (a standalone master on this host)."""
    from urllib.parse import urlsplit
    try:
        host = urlsplit(master).hostname or ""
    except ValueError:
        return False
    return host == "localhost" or host.startswith("127.") or host == "::1"


#: A dumped class archive is taken into use once it has not changed for this long (the
#: JVM that dumps it at exit may outlive the Python process that started it).
_ARCHIVE_SETTLE_S = 30


def class_archive_options() -> str:
    """JVM options for an application class-data-sharing archive of the driver's classes
    (AppCDS): the first run dumps the classes Spark loaded into
    ``~/.cache/kctl/spark-<pyspark>-<java and jars>.jsa`` (about 160 MB) when its JVM exits; later
    runs map it, which takes about 2 s off the driver's start and first job on a small
    machine (benchmarks/analyze.py). A dump goes to a file of its own and is renamed
    into place by a later run, so concurrent runs never share a half-written archive; the
    JVM checks the archive (``VerifySharedSpaces``) and runs without it when it does not
    match (``-Xshare:auto``). ``KCTL_SPARK_CDS=0`` turns this off."""
    import hashlib
    import shutil
    import time
    from pathlib import Path
    if os.environ.get("KCTL_SPARK_CDS", "1") == "0":
        return ""
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")
                        if os.environ.get("JAVA_HOME") else None)
    if java is None:
        return ""
    import pyspark
    java = os.path.realpath(java)
    # The archive holds classes from the class path it was dumped with: a JVM with another
    # pyspark (another virtualenv) finds it does not match and runs without it.
    jars = os.path.realpath(os.path.join(os.path.dirname(pyspark.__file__), "jars"))
    key = hashlib.sha256(f"{java}:{os.stat(java).st_mtime_ns}:{jars}".encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kctl"
    final = cache / f"spark-{pyspark.__version__}-{key}.jsa"
    quiet = "-Xlog:disable -Xlog:all=error:stderr"
    try:
        if not final.exists():
            for dumped in sorted(cache.glob(final.name + ".dump-*")):
                if time.time() - dumped.stat().st_mtime > _ARCHIVE_SETTLE_S and dumped.stat().st_size:
                    os.replace(dumped, final)
                    break
        if final.exists():
            # Two first runs close together both dump: the later dump is never used.
            for dumped in cache.glob(final.name + ".dump-*"):
                if time.time() - dumped.stat().st_mtime > _ARCHIVE_SETTLE_S:
                    dumped.unlink(missing_ok=True)
            return f"-XX:SharedArchiveFile={final} -XX:+VerifySharedSpaces -Xshare:auto {quiet}"
        if any(cache.glob(final.name + ".dump-*")):
            return ""               # another run's dump is settling
        cache.mkdir(parents=True, exist_ok=True)
        return f"-XX:ArchiveClassesAtExit={final}.dump-{os.getpid()} {quiet}"
    except OSError:
        return ""


def available_slots(spark: Any) -> int:
    """Task slots the cluster offers now (cores / spark.task.cpus)."""
    sc = spark.sparkContext
    cpus = int(sc.getConf().get("spark.task.cpus", "1"))
    return max(1, sc.defaultParallelism // max(1, cpus))


def check_barrier_slots(spark: Any, tasks: int) -> None:
    if tasks < 1:
        raise ConfigError(f"--tasks must be at least 1, not {tasks}")
    slots = available_slots(spark)
    if tasks > slots:
        master = spark.sparkContext.master
        raise ConfigError(
            f"--tasks {tasks} needs {tasks} task slots running at once, but {master} offers {slots}: "
            f"all load tasks start together (a barrier stage), so give --tasks {slots} or fewer, "
            "or a master with more cores (e.g. --master 'local[8]')")


def job_error_message(exc: BaseException) -> str:
    """One line for a Spark/Py4J exception: the task's own error, else the innermost Java
    cause with a message (``ClassNotFoundException: Class ...S3AFileSystem not found``,
    ``RuntimeException: file:/x is not a Parquet file. ...``: Py4J's own first line only
    names the call, ``An error occurred while calling o49.load.``), else its first line."""
    text = str(exc)
    m = _TASK_ERROR.search(text)
    if m:
        return m.group(1).strip()
    if (cause := _java_root_cause(exc)) is not None:
        return cause
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("at ", "File ", "Traceback")):
            return line[:500]
    return type(exc).__name__


def _java_root_cause(exc: BaseException) -> str | None:
    """``Name: message`` of the innermost cause with a message of a ``Py4JJavaError``'s
    Java exception (None for other exceptions, or when the JVM cannot be asked)."""
    java = getattr(exc, "java_exception", None)
    found = None
    try:
        for _ in range(20):             # a cause chain is short; a cycle is not followed
            if java is None:
                break
            message = java.getMessage()
            if message:
                found = f"{java.getClass().getSimpleName()}: {' '.join(str(message).split())}"
            java = java.getCause()
    except Exception:  # noqa: BLE001 - the gateway may be gone; the caller has a fallback
        return found
    return found[:500] if found else None


def run_job(spark: Any, action: Callable[[], T], *, description: str = "kctl",
            on_wait: Callable[[], None] | None = None,
            on_stop: Callable[[], None] | None = None, stop_wait_s: float = 0.0) -> T:
    """Runs ``action`` (which triggers Spark jobs) in a thread under a job group;
    Ctrl-C in the calling thread cancels the group and raises ``JobInterrupted``.
    ``on_wait`` is called about every 0.05 s while the job runs (the caller's chance
    to render progress, and to take reports while the stop is waited for). With
    ``on_stop``, a stop calls it, then waits up to ``stop_wait_s`` for the action to
    end by itself before cancelling; a second stop cancels at once."""
    sc = spark.sparkContext
    group = f"kctl-{uuid.uuid4().hex[:8]}"
    box: dict[str, Any] = {}
    # Waited on instead of Thread.join: a KeyboardInterrupt inside join (Python 3.11) can
    # mark a thread that still runs as stopped, so the stop's wait would end at once.
    done = threading.Event()

    def target() -> None:
        try:
            sc.setJobGroup(group, description, interruptOnCancel=True)
            box["value"] = action()
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = e
        finally:
            done.set()

    from pyspark import InheritableThread
    t = InheritableThread(target=target, name="kctl-spark-job", daemon=True)
    t.start()
    try:
        while not done.wait(0.05):
            if on_wait is not None:
                on_wait()
    except KeyboardInterrupt:
        if on_stop is not None:
            _wait_after_stop(done, on_stop, on_wait, stop_wait_s)
            if done.is_set() and "value" in box:
                raise JobInterrupted(True, box["value"]) from None
        sc.cancelJobGroup(group)
        done.wait(30)
        raise JobInterrupted(False) from None
    if "error" in box:
        e = box["error"]
        if isinstance(e, KctlError):
            raise e
        raise SparkJobError(job_error_message(e)) from e
    return box["value"]


def _wait_after_stop(done: threading.Event, on_stop: Callable[[], None],
                     on_wait: Callable[[], None] | None, stop_wait_s: float) -> None:
    """The stop's wait: ``on_stop``, then until the job's thread is ``done``,
    ``stop_wait_s`` passes or a second stop (Ctrl-C, SIGTERM: a ``KeyboardInterrupt``, or
    ``PARENT_STOPS.again`` under load/stop.py's ``later_stops_hurry``) comes."""
    import time
    try:
        on_stop()
        deadline = time.monotonic() + stop_wait_s
        while not done.wait(0.05) and time.monotonic() < deadline and not PARENT_STOPS.again.is_set():
            if on_wait is not None:
                on_wait()
    except KeyboardInterrupt:
        pass                    # a second stop: the job is cancelled now
