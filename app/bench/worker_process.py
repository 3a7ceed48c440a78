"""A bench worker in a Python process of its own, spoken to in JSON lines.

Parts that must measure a process apart from the bench's own (its memory, its threads,
its app home) start a worker module with ``python -m``: commands go in as JSON lines on
its stdin, answers come back as stdout lines starting with the worker's marker (anything
else it prints is ignored), and its stderr goes to a log file the error names.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any


class WorkerProcess:
    """One worker process; ``ready`` holds its first answer (sent once it is set up).

    Args:
        module: The worker's module, run with ``python -m``.
        config: Its configuration, passed as one JSON argument.
        marker: The prefix of its answer lines.
        log_path: Where its stderr goes.
        env: Its environment.
        name: What errors call it.
        quit_timeout: Seconds it gets to stop after ``quit`` before it is killed.
        program: The command that starts it, in place of ``python -m module`` (a
            script run by another Python: llama-cpp-python's venv has no MLX).
    """

    def __init__(
        self,
        module: str,
        config: Mapping[str, Any],
        *,
        marker: str,
        log_path: Path,
        env: Mapping[str, str],
        name: str,
        quit_timeout: float,
        program: Sequence[str] | None = None,
    ):
        self.name = name
        self._marker = marker
        self._quit_timeout = quit_timeout
        self._log = log_path.open("w")
        self.process = subprocess.Popen(
            [*(program or (sys.executable, "-m", module)), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=dict(env),
        )
        self.ready = self._read()

    @property
    def _stdin(self) -> IO[str]:
        assert self.process.stdin is not None, "opened with stdin=PIPE"
        return self.process.stdin

    def _read(self) -> dict:
        assert self.process.stdout is not None, "opened with stdout=PIPE"
        for line in self.process.stdout:
            if line.startswith(self._marker):
                return json.loads(line[len(self._marker) :])
        self.process.wait()
        raise RuntimeError(
            f"the {self.name} worker exited with code {self.process.returncode}; "
            f"see {self._log.name}"
        )

    def ask(self, **command: Any) -> dict:
        """Send one command; return the worker's answer to it."""
        self._stdin.write(json.dumps(command) + "\n")
        self._stdin.flush()
        return self._read()

    def close(self) -> None:
        """Ask the worker to quit (kill it if it does not) and close its log."""
        try:
            if self.process.poll() is None:
                self._stdin.write(json.dumps({"op": "quit"}) + "\n")
                self._stdin.flush()
                self._stdin.close()
                self.process.wait(timeout=self._quit_timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            self._log.close()
