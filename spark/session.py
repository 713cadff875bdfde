"""The SparkSession logtide's jobs run in: local[*] by default, any master passed through.

Executors run the same Python as the driver (PYSPARK_PYTHON = this interpreter, or the packed
environment of `make spark-archive` on a cluster), so they import the installed, compiled logtide
and never a source tree that happens to be their working directory.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

JAVA_HINT = ("Spark needs a Java 17 runtime and none was found (no `java` on PATH, no JAVA_HOME): "
             "install one, e.g. `apt-get install openjdk-17-jre-headless`, or set JAVA_HOME")

# defaults that suit logtide's Arrow jobs; a caller's conf wins
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "262144",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.adaptive.enabled": "false",       # keep the page-ownership partitions as planned
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "1g",
    "spark.python.worker.reuse": "true",
    # not "spark.python.unix.domain.socket.enabled": it saves about 40 ms per job, but a Python
    # worker that finds its socket closed when the session stops then prints a BrokenPipeError
    # (docs/spark.md, "A 40 ms wait per task")
    # never import logtide from the working directory (a source tree has no compiled extension)
    "spark.executorEnv.PYTHONSAFEPATH": "1",
}


def java_available() -> bool:
    """True when a Java runtime can be found the way spark-submit looks for one."""
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return True
    return shutil.which("java") is not None


def check_java() -> None:
    """Raise SparkSetupError with one line saying what to install when Java is missing."""
    from logtide.spark.errors import SparkSetupError
    if not java_available():
        raise SparkSetupError(JAVA_HINT)


def _clean_pythonpath() -> None:
    """Drop PYTHONPATH entries holding another `logtide` folder than the one imported here (a
    source tree, e.g. when running from a checkout): Spark hands PYTHONPATH to every Python worker,
    and there it would shadow the installed, compiled package."""
    import logtide
    installed = os.path.realpath(os.path.dirname(os.path.dirname(logtide.__file__)))
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    keep = [p for p in parts
            if not os.path.isdir(os.path.join(p, "logtide")) or os.path.realpath(p) == installed]
    if keep != parts:
        if keep:
            os.environ["PYTHONPATH"] = os.pathsep.join(keep)
        else:
            del os.environ["PYTHONPATH"]


def get_session(master: str | None = None, app_name: str = "logtide", conf: dict | None = None,
                *, progress: bool = True, log_level: str | None = "ERROR"):
    """A SparkSession for logtide's jobs (the active one if there is one and master is None).

    master defaults to local[*]. conf entries override the defaults; `progress` shows Spark's
    console progress bar; `log_level` is set on a new session (logtide's jobs report failures as
    typed errors, so Spark's task-retry warnings are noise by default; None keeps Spark's level).
    """
    from logtide.spark.errors import SparkSetupError
    check_java()
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkSetupError("PySpark is not installed: `pip install logtide[spark]`") from None
    if master is None:
        active = SparkSession.getActiveSession()
        if active is not None:
            return active
    python = os.environ.get("LOGTIDE_SPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_PYTHON", python)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    _clean_pythonpath()
    # local-cluster executors work in SPARK_WORKER_DIR (default: inside the pip-installed pyspark)
    os.environ.setdefault("SPARK_WORKER_DIR", os.path.join(tempfile.gettempdir(), "logtide-spark-work"))
    settings = dict(DEFAULT_CONF)
    settings["spark.ui.showConsoleProgress"] = "true" if progress else "false"
    settings.update(conf or {})
    b = SparkSession.builder.master(master or "local[*]").appName(app_name)
    for k, v in settings.items():
        b = b.config(k, v)
    try:
        session = b.getOrCreate()
        if log_level:
            session.sparkContext.setLogLevel(log_level)
        return session
    except Exception as exc:  # the JVM did not start: say why in one line
        if "JAVA_HOME" in str(exc) or "Java gateway" in str(exc):
            first = str(exc).splitlines()[0]
            if not java_available():
                raise SparkSetupError(f"{JAVA_HINT} ({type(exc).__name__}: {first})") from None
            raise SparkSetupError(
                f"Spark's Java gateway exited during start-up although Java was found ({first}); "
                f"if grpc was imported before logtide, set GRPC_ENABLE_FORK_SUPPORT=0 before it is "
                f"(gRPC's fork handlers can abort the gateway's launcher)") from None
        raise


def _worker_ready(_):
    """Import what the replay tasks import; report this Python worker's pid."""
    import logtide.spark.page_lsns  # noqa: F401
    import logtide.spark.redo_task  # noqa: F401
    import logtide.spark.ref_exchange  # noqa: F401
    yield os.getpid()


def start_python_workers(spark, workers: int, tries: int = 5) -> int:
    """Start `workers` executor Python workers (spark.python.worker.reuse keeps them) with logtide's
    task modules imported, so that the first job's tasks do not pay the process start; returns how
    many distinct workers answered in the last try. Session set-up, not part of any job."""
    sc = spark.sparkContext
    seen = 0
    for _ in range(tries):
        seen = len(set(sc.parallelize(range(workers), workers).mapPartitions(_worker_ready).collect()))
        if seen >= workers:
            break
    return seen
