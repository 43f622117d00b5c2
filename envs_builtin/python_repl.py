"""The REPL that runs INSIDE the python sandbox. Standard library only: it runs under the
system ``/usr/bin/python3``, not under the toolkit's virtual environment.

``python_sandbox.py`` starts it as ``python3 -I -c STUB SOURCE CONFIG``. Protocol:

* commands: one JSON object per line on the original stdin, which is moved to a private fd;
  user code reads ``/dev/null`` on fd 0. Each carries a random ``id``;
* answers: one JSON object per line on a separate pipe (``config["answer_fd"]``), never
  inherited by child processes, so printing cannot corrupt it. Each starts with the ``id`` of
  its command (the host drops lines without it), the first with ``config["ready_id"]``;
* cell output: whatever reaches fd 1/2 (also from child processes); after each cell the REPL
  writes the host's per-cell marker there so the host knows where the cell's output ends.

Limits are set before any user code runs (soft == hard, so user code cannot raise them), except
RLIMIT_CPU whose soft limit follows each cell (the hard limit is the lifetime budget). None of
this binds user code, which runs in this process: the host enforces the limits that matter
(cgroup, CPU backstop, wall clock, killing a cell's processes) and starts a new sandbox for
each task.
"""

import builtins
import io
import json
import linecache
import os
import resource
import signal
import sys
import types
from _ast import Expr, Expression, PyCF_ONLY_AST  # what ast.parse uses, without importing ast

# ``traceback`` is imported when a cell fails: a sandbox starts faster without it (one starts
# for each task).

FILENAME = "<agentfly-repl>"  # our own frames; hidden from tracebacks
MAIN_PID = os.getpid()


class State:
    namespace = {}
    in_cell = False
    cell_number = 0
    cpu_seconds = 0.0
    stdout = stderr = None  # the REPL's own console streams, restored after each cell
    output_room = 0  # characters the cell may still print through sys.stdout/err
    dropped_chars = 0
    reserve = None  # freed on MemoryError so that the traceback can still be formatted


def cpu_used():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fix_limit(kind, value):
    """Set soft == hard == value (never above the inherited hard limit)."""
    _, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, value))


def processes_of_my_uid():
    uid, count = os.getuid(), 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                count += os.stat("/proc/" + name).st_uid == uid
            except OSError:
                pass
    return count


def set_limits(config):
    fix_limit(resource.RLIMIT_AS, config["memory_mb"] << 20)
    fix_limit(resource.RLIMIT_FSIZE, config["file_mb"] << 20)
    fix_limit(resource.RLIMIT_NOFILE, config["max_open_files"])
    fix_limit(resource.RLIMIT_CORE, 0)
    # RLIMIT_NPROC counts every process of this uid (in this user namespace): allow ours on top
    fix_limit(resource.RLIMIT_NPROC, processes_of_my_uid() + config["max_processes"])
    fix_limit(resource.RLIMIT_CPU, int(config["cpu_total"]))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write fails with EFBIG instead


def detach_keyring():
    """Join a new, empty session keyring, so that the host's (inherited) is out of reach.

    Whoever holds a keyring may read the keys in it whatever its uid (possessor permissions).
    Where the kernel has no keyrings the call fails, and there is nothing to detach from.
    """
    number = {"x86_64": 250, "aarch64": 219, "riscv64": 219}.get(os.uname().machine)
    try:
        import ctypes

        if number is not None:
            ctypes.CDLL(None).syscall(number, 1, None)  # KEYCTL_JOIN_SESSION_KEYRING, no name
    except Exception:
        pass


def set_process_flags():
    """Die with the host (bubblewrap's --die-with-parent, for the fallback); adopt orphaned
    descendants (so the host finds them under us); not dumpable, so the processes a cell
    starts cannot read our memory or open our fds through /proc."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None).prctl
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
        prctl(4, 0)  # PR_SET_DUMPABLE
    except Exception:
        pass


def reap_children():
    """Collect the exit status of children the host killed after the last cell."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def on_cpu_limit(signum, frame):
    if State.in_cell:
        raise TimeoutError(f"the cell used more than {State.cpu_seconds:g} s of CPU time")


def on_interrupt(signum, frame):
    if State.in_cell:
        raise KeyboardInterrupt


def arm_cpu_limit(seconds):
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(cpu_used() + seconds) + 2  # backstop for the cell's child processes too
    resource.setrlimit(resource.RLIMIT_CPU, (min(soft, hard), hard))
    signal.setitimer(signal.ITIMER_PROF, seconds)


def disarm_cpu_limit():
    signal.setitimer(signal.ITIMER_PROF, 0)


def strip_frames(exception):
    """Keep only user-code frames in a TracebackException and its chained exceptions."""
    import traceback

    seen = set()
    pending = [exception]
    while pending:
        item = pending.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        kept = [frame for frame in item.stack if frame.filename != FILENAME]
        item.stack = traceback.StackSummary.from_list(kept)
        pending += [item.__cause__, item.__context__]


def format_error(exc, limit):
    try:
        import traceback

        summary = traceback.TracebackException.from_exception(exc)
        strip_frames(summary)
        text = "".join(summary.format()).rstrip("\n")
    except (MemoryError, ImportError):
        text = f"{type(exc).__name__}: {exc}"
    if len(text) > limit:
        text = "[traceback truncated]\n" + text[-limit:]
    return text


def run_cell(code, value_limit, output_limit):
    """Run one cell; the value of a final expression is returned as its repr."""
    State.cell_number += 1
    State.output_room, State.dropped_chars = output_limit, 0
    filename = f"<cell {State.cell_number}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    answer = {"value": None, "error": None, "error_type": None, "dropped_chars": 0}
    try:
        tree = compile(code, filename, "exec", PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # no stack: the error is in the cell's text
        import traceback

        answer["error"] = "".join(traceback.format_exception_only(exc)).rstrip("\n")
        answer["error_type"] = type(exc).__name__
        return answer
    try:
        last = None
        if tree.body and isinstance(tree.body[-1], Expr):
            last = Expression(tree.body.pop().value)
        body = compile(tree, filename, "exec", dont_inherit=True)
        final = compile(last, filename, "eval", dont_inherit=True) if last else None
        State.in_cell = True
        arm_cpu_limit(State.cpu_seconds)
        try:
            exec(body, State.namespace)
            value = eval(final, State.namespace) if final else None
            if value is not None:
                State.namespace["_"] = value
                text = repr(value)
                if len(text) > value_limit:
                    more = len(text) - value_limit
                    text = f"{text[:value_limit]}... [repr truncated: {more} more characters]"
                answer["value"] = text
        finally:
            State.in_cell = False
            disarm_cpu_limit()
    except BaseException as exc:  # the cell's errors are observations, SystemExit included
        exit_if_forked(1)
        State.reserve = None
        answer["error"] = format_error(exc, value_limit)
        answer["error_type"] = type(exc).__name__
    exit_if_forked(0)
    return answer


def exit_if_forked(status):
    """A process forked by the cell ends with it: it must never answer the host."""
    if os.getpid() != MAIN_PID:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(status)


class Console(io.TextIOWrapper):
    """fd 1/2 for the REPL's prints: past the cell's output cap, text is counted, not written
    (so a print loop costs the sandbox CPU time, not the host a flood of bytes)."""

    def write(self, text):
        room = State.output_room
        if len(text) > room:
            State.dropped_chars += len(text) - max(room, 0)
            text = text[: max(room, 0)]
        State.output_room -= len(text)
        return super().write(text) if text else 0


def console(fd):
    raw = io.FileIO(fd, "w", closefd=False)
    stream = io.BufferedWriter(raw)
    return Console(stream, encoding="utf-8", errors="backslashreplace", line_buffering=True)


def end_output(out_fd, marker):
    """Restore fds 0-2 and sys.stdin/out/err, flush, and mark the end of the cell's output."""
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    for stream in {sys.stdout, sys.stderr, State.stdout, State.stderr}:
        try:
            stream.flush()
        except Exception:
            pass
    if State.stdout.closed:
        State.stdout = console(1)
    if State.stderr.closed:
        State.stderr = console(2)
    sys.stdout, sys.stderr = State.stdout, State.stderr
    if sys.stdin is None or sys.stdin.closed:  # exit() closes it
        sys.stdin = open(0, closefd=False)  # fd 0 is /dev/null
    write_all(out_fd, marker)


def fresh_namespace():
    """A new ``__main__`` module (so that pickle finds classes defined in cells)."""
    module = types.ModuleType("__main__")
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    return module.__dict__


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main():
    detach_keyring()
    config = json.loads(sys.argv[1])
    sys.argv = [""]
    answer_fd = config["answer_fd"]
    os.set_inheritable(answer_fd, False)
    commands = os.fdopen(os.dup(0), "rb")  # os.dup: not inherited by child processes
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    out_fd = os.dup(1)
    State.stdout, State.stderr = console(1), console(2)
    sys.stdout, sys.stderr = State.stdout, State.stderr
    State.cpu_seconds = config["cpu_seconds"]
    State.namespace = fresh_namespace()
    set_limits(config)
    set_process_flags()
    signal.signal(signal.SIGXCPU, on_cpu_limit)
    signal.signal(signal.SIGPROF, on_cpu_limit)
    signal.signal(signal.SIGINT, on_interrupt)
    os.chdir(config["home"])
    State.reserve = bytearray(4 << 20)

    def answer(command_id, message):
        write_all(answer_fd, (json.dumps({"id": command_id, **message}) + "\n").encode())

    answer(config["ready_id"], {"ready": True, "version": sys.version.split()[0]})
    for line in commands:
        command = json.loads(line)
        op, command_id = command.get("op"), command.get("id")
        reap_children()
        if op == "exec":
            limit = config["max_value_chars"]
            result = run_cell(command["code"], limit, limit + 1)
            end_output(out_fd, command["marker"].encode())
            result["dropped_chars"] = State.dropped_chars
            if State.reserve is None:
                try:
                    State.reserve = bytearray(4 << 20)
                except MemoryError:
                    pass
            answer(command_id, result)
        else:
            answer(command_id, {"pong": True})


if __name__ == "__main__":
    main()
