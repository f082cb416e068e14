"""Starting and stopping the local JVM services (Apache Kafka nodes, a Kafka Connect worker).

One place for how a JVM is launched: log4j2 to a file, output to a file and never an inherited
pipe (a JVM must not hold a caller's stdout open), and dying with the thread that started it.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from .embedded_broker import DIE_WITH_PARENT

# Small and quick to start: these JVMs live for one test session or one benchmark.
JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k")

LOG_CONFIG = """\
rootLogger.level=INFO
rootLogger.appenderRef.file.ref=file
appender.file.type=File
appender.file.name=file
appender.file.fileName={path}
appender.file.layout.type=PatternLayout
appender.file.layout.pattern=[%d] %p %m (%c)%n
"""


def write_log_config(config_path: Path, log_path: Path, levels: dict[str, str] | None = None) -> Path:
    """A log4j2 configuration writing everything to `log_path`; `levels` sets named loggers' levels."""
    lines = [LOG_CONFIG.format(path=log_path)]
    for i, (name, level) in enumerate((levels or {}).items()):
        lines.append(f"logger.l{i}.name={name}\nlogger.l{i}.level={level}\n")
    config_path.write_text("".join(lines))
    return config_path


def java_command(classpath: str, main: str, *args: str, heap: str, log_config: Path,
                 options: tuple[str, ...] = JVM_OPTIONS, properties: dict[str, str] | None = None) -> list[str]:
    """The command line of one JVM: heap, options, log4j2 configuration and system properties."""
    system = [f"-D{name}={value}" for name, value in (properties or {}).items()]
    return ["java", f"-Xmx{heap}", *options, f"-Dlog4j2.configurationFile={log_config}", *system,
            "-cp", classpath, main, *args]


def launch(command: list[str], output: Path) -> subprocess.Popen:
    """Start a JVM with its stdout and stderr appended to `output`, no stdin, dying with its parent."""
    with open(output, "ab") as out:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=DIE_WITH_PARENT)


def run(command: list[str], output: Path, timeout_s: float) -> int:
    """Run a JVM to its end (output to `output`); its exit code."""
    with open(output, "wb") as out:
        return subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout_s).returncode


def stop(processes: list[subprocess.Popen], grace_s: float = 20.0) -> None:
    """SIGTERM every live process (resuming a paused one first), then SIGKILL those still alive
    after `grace_s`; all are reaped."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
    for process in processes:
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
