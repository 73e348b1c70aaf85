"""What a command runs inside: signals that unwind it, warnings as lines, a named stdout.

SIGINT and SIGTERM raise :class:`Interrupted`, which unwinds through the ``finally``
blocks that remove temporary files; Python warnings become one line each on stderr; a
failure to write to stdout is a :class:`~attnclust.cli._common.StdoutError`, not a data
file's error.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
import warnings

from ._common import StdoutError, as_options, say

# the exit status of a command stopped by a signal: 128 + its number, as shells report it
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Interrupted(BaseException):
    """SIGINT or SIGTERM: unwinds like ``KeyboardInterrupt`` (``finally`` blocks run)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def signals_raise_interrupted():
    """While the command runs, SIGINT and SIGTERM raise :class:`Interrupted`.

    The exception unwinds through the ``finally`` blocks that remove temporary files
    (a signal that arrives while outputs are being renamed takes effect once they all
    are, see :func:`attnclust._io.deferred_interrupts`). Later signals are ignored, so a
    second Ctrl-C cannot cut that cleanup short. A signal handled while a finalizer or a
    weakref callback runs raises there, where Python prints the exception and drops it:
    it is raised again where the command runs, and at the latest when the command
    returns. Outside the main thread (an embedding program), handlers cannot be installed
    and nothing changes.
    """
    from .. import _io

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired, again, inside = [], [], []

    def resend(signum):                 # the signal again, from a thread, a moment later
        timer = threading.Timer(0.001, _thread.interrupt_main, (signum,))
        timer.daemon = True
        again.append(timer)
        timer.start()

    def handler(signum, frame):
        if fired:
            return
        if inside:                      # in the hook below: raised here, it would be dropped
            resend(signum)
            return
        fired.append(signum)

        def stop():
            raise Interrupted(signum)
        _io.interrupt(stop)

    outer_hook = sys.unraisablehook

    def dropped(report):                # an exception Python cannot raise (a finalizer's)
        if isinstance(report.exc_value, Interrupted):
            inside.append(True)
            try:
                fired.clear()
                resend(report.exc_value.signum)
            finally:
                inside.clear()
        else:
            outer_hook(report)

    previous = {sig: signal.signal(sig, handler) for sig in EXIT_SIGNAL}
    sys.unraisablehook = dropped
    try:
        yield
    finally:
        for timer in again:
            timer.cancel()
        sys.unraisablehook = outer_hook
        for sig, old in previous.items():
            signal.signal(sig, old)
    if fired or again:                  # handled, but its exception never came through
        raise Interrupted(fired[0] if fired else again[-1].args[0])


@contextlib.contextmanager
def warnings_as_lines(command: str, quiet: bool):
    """Show each Python warning of the command as one line on stderr (none when quiet)."""
    def show(message, category, filename, lineno, file=None, line=None):
        if quiet:
            return
        text = " ".join(str(message).split())       # one line, whatever the message
        say(f"attnclust {command}: warning: {as_options(text, command)}")

    with warnings.catch_warnings():
        warnings.simplefilter("default")   # each distinct warning once per place
        warnings.showwarning = show
        yield


class NamedStdout:
    """A stdout whose write failures say they are stdout's (not a data file's).

    On the first failure stdout is pointed at /dev/null: otherwise the interpreter's
    own flush at exit fails again and prints a multi-line "Exception ignored" report.
    """

    def __init__(self, stream):
        self._stream = stream
        self.failure: StdoutError | None = None

    def _guard(self, method, *args):
        try:
            return getattr(self._stream, method)(*args)
        except OSError as exc:
            _drop_stdout(self._stream)
            self.failure = StdoutError(exc)
            raise self.failure from None

    def write(self, text):
        return self._guard("write", text)

    def flush(self):
        return self._guard("flush")

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def stdout_named():
    """While it runs, ``sys.stdout`` is a :class:`NamedStdout`; its last flush checked."""
    real = sys.stdout
    guarded = sys.stdout = NamedStdout(real)
    finished = False
    try:
        yield guarded
        finished = True
    finally:
        sys.stdout = real
        try:                     # a failure to write the last of the output is one too
            guarded.flush()
        except StdoutError:
            if finished:         # else another error (or --help's exit) is on its way
                raise


def _drop_stdout(stream) -> None:
    """Point the file descriptor of a stdout that failed at /dev/null.

    Otherwise the interpreter's own flush at exit fails again and prints a second,
    multi-line error ("Exception ignored in ... BrokenPipeError").
    """
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no real fd: skip
        target = stream.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, target)
        os.close(devnull)

