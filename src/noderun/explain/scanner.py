"""Stream a log file once, in constant memory, and yield the lines that match a signature.

One combined regular expression (RE2: a DFA, linear time, grep-class speed) finds candidate
lines in large chunks; only those lines are then attributed to a signature with Python's ``re``.
"""

from __future__ import annotations

import codecs
import dataclasses
import datetime
import io
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from noderun.explain.signatures import SIGNATURES, THREAD_EXCEPTION, Signature, Tier

CHUNK = 4 << 20
MAX_LINE = 16 << 20  # a "line" longer than this is cut: memory stays bounded
LOOKBACK = 2048  # bytes before a hit searched for the timestamp of its log record
BINARY_PROBE = 8192
TAIL_WINDOW = 1 << 16  # the last line of a file is looked for in its last 64 KiB

try:  # RE2 when installed (a core dependency); Python's re otherwise, slower but identical
    import re2 as _re2  # type: ignore[import-not-found,import-untyped,unused-ignore]
except ImportError:  # pragma: no cover - exercised by tests through the `engine` seam
    _re2 = None

_ISO = re.compile(rb"(\d{4})-(\d\d)-(\d\d)[T _](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?")
# what launchers and log collectors put before a process's own line: ANSI colour codes, srun
# --label's "3: ", torchrun's "[rank3]:"/"[default3]:", mpirun --tag-output's "[1,3]<stderr>:",
# pdsh's and deepspeed's "host: ", Ray's "(RayWorker pid=12)"/"(pid=12)", docker compose's
# "name | ", an ISO timestamp (container and CI logs; the CRI log format's "… stderr F "),
# loggers' record headers and collectors' tags (below); up to three of them. Anchored
# signatures and the quoted-source test look past them
PREFIX = (
    r"(?:\x1b\[[0-9;]*[A-Za-z] ?|\s*\d{1,5}: |\[(?:rank|default)\d+\]:\s*|"
    r"\[\d+,\d+\]<std(?:out|err)>:\s*|\((?:[\w-]+ )?pid=\d+(?:, ip=[\d.]+)?\)\s*|"
    r"(?:localhost|[A-Za-z0-9._-]*[0-9-][A-Za-z0-9._-]*): |[\w.-]+\s*\| |"
    r"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\]?:? "
    r"(?:std(?:out|err) [FP] )?|"
    + r"|".join(
        (
            # the record headers of the loggers that print a rank's lines: glog/c10 (torch's
            # C++ side, "E0923 14:51:44.734884 1234 file.cpp:833] "), Python logging's
            # BASIC_FORMAT ("ERROR:name:"), vLLM/sglang's ("ERROR 08-10 23:02:36 [file.py:898] "),
            # bracketed fields (DeepSpeed/axolotl "[ERROR] [module:47] [PID:1672] [RANK:0] ")
            r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6}\s+\d+ [\w./-]+:\d+\] ",
            # c10's own bracketed form ("[E1106 12:00:00.123456789 ProcessGroupNCCL.cpp:1484] ",
            # older "[W socket.cpp:436] ")
            r"\[[IWEF](?:\d{4} \d\d:\d\d:\d\d\.\d+)?(?: \d+)? [\w./-]+:\d+\] ",
            r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:",
            r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
            r"\[[\w./-]+:\d+\] ",
            r"(?:\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL|PID:\d+|RANK:\d+|[\w.]+:\d+)\]\s*)+",
            # collectors' and launchers' tags: kubectl logs --prefix, torchx's "[trainer0|0]:",
            # NeMo-Run's "job/0 " before "[default0]:", Lightning's "[rank: 1] ", syslog/journald
            r"\[pod/[\w.-]+/[\w.-]+\] ",
            r"\[[\w-]+\|\d+\]:",
            r"[\w.-]+/\d+ \[default\d+\]:",
            r"\[rank: \d+\] ",
            r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.-]+ [\w.-]+(?:\[\d+\])?: ",
            # a tqdm progress bar the next record was printed after (no newline between them:
            # "{desc}: 46%|####6 | 31/67 [29:02<35:12, 58.67s/it]")
            r"[^|\n]*\d+%\|[^|\n]*\| *[\d.]+[kMG]?/[\d.?]+[kMG]? \[[^\]\n]*\]",
        )
    )
    + r")"
)
_PREFIXES = re.compile(f"^(?:{PREFIX}){{1,3}}")
_ANCHOR = re.compile(r"(?:(?<=^)|(?<=[(|]))\^")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_QUOTED_SOURCE = re.compile(r"^(\S+\|\s?)?(?:" + PREFIX + r"){0,3}\s+(raise\b|File \")")
EVIDENCE_CHARS = 500  # an evidence line longer than this is cut around the words that matched
_WRAP_MIN = 60  # a line this long that stops mid-sentence may have been wrapped by its poster
# a source line a traceback quotes under its "File …" line: a call, an assignment, a statement
_CODE_LINE = re.compile(
    r"^(return|raise|yield|await|assert|del|import|from|if|elif|else|for|while|with|try|"
    r"except|def|class|self\.)\b|^[A-Za-z_][\w.\[\]]*\s*\(|^[A-Za-z_][\w.,\s]*\s=\s"
)
_RECORD_START = re.compile(
    r"^(\s|\[|\(|<|\d{4}-|[IWEF]\d{4} |Traceback|File |During handling|The above|"
    r"[A-Za-z_][\w.]*(Error|Exception|Warning)\b|\S+:\d+:\d+ \[\d+\]|\S+: )"
)
# NCCL (src/plugin/*.cc) looks for optional net/tuner/profiler plugins and says at INFO level
# that none was found ("cannot open shared object file: No such file or directory"), then
# uses its internal implementation: never evidence of anything
_NCCL_NO_PLUGIN = re.compile(
    r"NCCL INFO .*Plugin.*(cannot open shared object file|No plugin found|returned 2 :)"
)
# an info-level record (NCCL INFO, logging's INFO): never a failure by generic words alone
# (a healthy NCCL teardown prints `comm 0x… rank 3 nranks 32 … - Abort COMPLETE`)
# (a level marker, not a setting: "run with NCCL_DEBUG=INFO for details" is no INFO record)
_INFO_LEVEL = re.compile(r"\bNCCL INFO\b|(^|[\s\[\]|:(-])INFO\b(?!=)")
# nccl-tests' column header (src/common.cu: "#  size  count  type  redop  root  time  algbw
# busbw  error …", "#wrong" since 2.13): names a column, reports nothing; its "#" is often
# lost when the output is pasted as markdown
_TEST_TABLE_HEADER = re.compile(r"\bsize\s+count\s+type\b.*\balgbw\s+busbw\s+(error|#wrong)\b")
# the last line of a Python traceback: the exception's type and message
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)(:|$)")
# NCCL (include/debug.h) reports failures at WARN level; its INFO lines are progress, retries
# ("Call to connect returned Connection refused, retrying") and teardown: never a failure
_NCCL_INFO = re.compile(r"\bNCCL INFO\b")
_GLOG = re.compile(rb"\b[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,6})")
# torch's exception for a NCCL result code (c10d NCCLUtils: "NCCL error in: …, <what the code
# means>, NCCL version …") goes on over lines: "ncclXxxError: <ncclGetErrorString>", then
# "Last error:" and, on the same or the next line, NCCL's last WARN text (ncclGetLastError):
# that text says why, so it is read (and shown) with the line that starts the message
_NCCL_MESSAGE = re.compile(r"NCCL error\b|^nccl[A-Z]\w*Error\b")
_NCCL_MESSAGE_GOES_ON = re.compile(r"^(nccl[A-Z]\w*Error\b|Last error:)")
# NCCL's WARN lines carry their thread ("host:pid:tid [dev] file:line NCCL WARN …"); a failed
# CUDA or system call's WARN (CUDACHECK's "Cuda failure '…'", SYSCHECK's) is followed by the WARN
# of its caller that says what it was doing ("Failed to CUDA calloc N bytes"): one record
_NCCL_WARN_THREAD = re.compile(r"(\S+:\d+:\d+) \[\d+\] \S*\s*NCCL WARN ")
_NCCL_WARN_GAP = 3  # lines looked at past a WARN for its caller's (blank and INFO lines)
# torchelastic's ChildFailedError lists the other failures ("Failures:") before the one it
# takes for the root cause ("Root Cause (first observed failure):"): an entry of the former
# yields to one of the latter within the same second (findings.Ranker)
_SECTIONS_BACK = 8192


@dataclasses.dataclass(frozen=True)
class Hit:
    """A log line attributed to a signature; ``time`` is epoch seconds when the log had one."""

    path: Path
    line: int
    text: str
    signature: Signature
    time: float | None
    # an entry of torchelastic's "Failures:" section (not its "Root Cause" one)
    secondary: bool = False


def prefixed(pattern: str) -> str:
    """``pattern`` with each line-start anchor allowed to stand before a launcher's prefix."""
    anchor = f"^(?:{PREFIX}){{0,3}}"
    return _ANCHOR.sub(lambda _: anchor, pattern)


def strip_prefix(text: str) -> str:
    """The line as its process printed it: without ANSI codes and launchers' prefixes."""
    return _PREFIXES.sub("", _ANSI.sub("", text), count=1)


def evidence_text(text: str, pattern: str) -> str:
    """The evidence as shown: without ANSI codes; a long line (pasted with its line breaks
    lost, several records in one) is cut around the words that matched, not at its start."""
    line = _ANSI.sub("", text).strip()
    if len(line) <= EVIDENCE_CHARS:
        return line
    match = re.search(prefixed(pattern), line)
    if match is None or match.end() <= EVIDENCE_CHARS:
        return line[:EVIDENCE_CHARS]
    start = max(0, match.start() - EVIDENCE_CHARS // 5)
    return line[start : start + EVIDENCE_CHARS]


def _wrapped(line: str) -> bool:
    """A line that stops mid-sentence at a poster's wrap width (60 characters or more)."""
    stripped = line.rstrip()
    return len(stripped) >= _WRAP_MIN and not stripped.endswith((".", "!", "?", "***"))


def continuation(buf: bytes, stop: int, end: int, first: str) -> str:
    """The lines after a hit that continue it (a message wrapped by whoever pasted it: the
    next line starts lowercase or with a digit, no record of its own), joined with spaces.
    Under a hit that starts its line, an indented line is such a wrap too (a poster's or a
    launcher's hanging indent), unless it reads as code (a traceback's source line)."""
    parts: list[str] = []
    line = first
    hanging = not first[:1].isspace()
    while _wrapped(line) and stop < end and len(parts) < 4:
        nxt = buf.find(b"\n", stop + 1, end)
        nxt = end if nxt < 0 else nxt
        following = buf[stop + 1 : nxt].decode("utf-8", "replace").rstrip("\r")
        lead = following.lstrip()
        if not lead or not lead[:1].isalnum() or lead[:1].isupper():
            break
        if following[:1].isspace():
            if not hanging or _CODE_LINE.match(lead) or _RECORD_START.match(lead):
                break
        elif _RECORD_START.match(following):
            break
        parts.append(following.strip())
        line, stop = following, nxt
    return " ".join(parts)


def nccl_message(buf: bytes, stop: int, end: int, first: str) -> str:
    """The lines after ``first`` that go on with torch's exception for a NCCL result code
    (``ncclXxxError: …``, ``Last error:`` and NCCL's last WARN text), joined with spaces."""
    if not _NCCL_MESSAGE.search(strip_prefix(first).strip()):
        return ""
    parts: list[str] = []
    detail = False  # "Last error:" stood alone: its text is the next line
    while stop < end and len(parts) < 4:
        nxt = buf.find(b"\n", stop + 1, end)
        nxt = end if nxt < 0 else nxt
        line = strip_prefix(buf[stop + 1 : nxt].decode("utf-8", "replace")).strip()
        stop = nxt
        if detail:
            if line:
                parts.append(line)
            break
        if not _NCCL_MESSAGE_GOES_ON.match(line):
            break
        parts.append(line)
        if line.startswith("Last error:"):
            if line.rstrip() != "Last error:":
                break
            detail = True
    return " ".join(parts)


def nccl_caller(buf: bytes, stop: int, end: int, first: str) -> str:
    """The WARN of the same NCCL thread that follows a WARN (within a few blank or INFO
    lines): the caller saying what the failed call was for."""
    thread = _NCCL_WARN_THREAD.search(first)
    if thread is None:
        return ""
    for _ in range(_NCCL_WARN_GAP):
        if stop >= end:
            return ""
        nxt = buf.find(b"\n", stop + 1, end)
        nxt = end if nxt < 0 else nxt
        line = _ANSI.sub("", buf[stop + 1 : nxt].decode("utf-8", "replace")).strip()
        stop = nxt
        if not line or (thread.group(1) in line and "NCCL INFO" in line):
            continue
        after = _NCCL_WARN_THREAD.search(line)
        return line if after is not None and after.group(1) == thread.group(1) else ""
    return ""


def _secondary(buf: bytes, start: int) -> bool:
    """The line at ``start`` is inside torchelastic's "Failures:" section."""
    window = buf[max(0, start - _SECTIONS_BACK) : start]
    return window.rfind(b"Failures:") > window.rfind(b"Root Cause (first observed failure)")


def combined_pattern(table: Sequence[Signature]) -> str:
    return "(?m)" + "|".join(f"(?:{prefixed(s.pattern)})" for s in table)


def compile_combined(table: Sequence[Signature], engine: str = "auto") -> Any:
    """The candidate finder: ``engine`` is ``re2``, ``re``, or ``auto`` (re2 when present)."""
    pattern = combined_pattern(table)
    if engine == "re2" or (engine == "auto" and _re2 is not None):
        if _re2 is None:
            raise RuntimeError("google-re2 is not installed")
        options = _re2.Options()
        options.max_mem = 256 << 20
        return _re2.compile(pattern.encode(), options)
    return re.compile(pattern.encode())


_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def is_binary(path: Path) -> bool:
    """NUL bytes near the start: not a text log (UTF-16 with its BOM is text)."""
    with open(path, "rb") as handle:
        head = handle.read(BINARY_PROBE)
    return not head.startswith(_UTF16_BOMS) and b"\0" in head


def _chunks(handle: BinaryIO) -> Iterator[bytes]:
    """The file in chunks of UTF-8 (a UTF-16 log is decoded on the way), constant memory."""
    head = handle.read(2)
    if head in _UTF16_BOMS:  # the BOM is read: the rest has its byte order
        order = "utf-16-le" if head == codecs.BOM_UTF16_LE else "utf-16-be"
        text = io.TextIOWrapper(handle, encoding=order, errors="replace", newline="")
        while chunk := text.read(CHUNK // 2):
            yield chunk.encode("utf-8", "replace")
        return
    yield head + handle.read(CHUNK - len(head))  # chunks stay aligned to CHUNK
    while data := handle.read(CHUNK):
        yield data


def timestamp(text: bytes, year: int) -> float | None:
    """Epoch seconds of the last ISO-8601 or glog (``E1122 10:20:05.123``) stamp in ``text``."""
    best: datetime.datetime | None = None
    last = _last_match(_ISO, text)  # only the last stamp counts: convert that one alone
    if last is not None:
        y, mo, d, h, mi, s, frac = last.groups()
        best = _make(int(y), mo, d, h, mi, s, frac)
    if best is None and (last := _last_match(_GLOG, text)) is not None:
        mo, d, h, mi, s, frac = last.groups()
        best = _make(year, mo, d, h, mi, s, frac)
    return best.timestamp() if best else None


def _last_match(pattern: re.Pattern[bytes], text: bytes) -> re.Match[bytes] | None:
    found = None
    for found in pattern.finditer(text):  # noqa: B007 - the loop keeps the last one
        pass
    return found


def _make(year: int, *parts: bytes | None) -> datetime.datetime | None:
    mo, d, h, mi, s = (int(p) if p else 0 for p in parts[:5])
    micro = int((parts[5] or b"0").ljust(6, b"0")[:6])
    try:
        return datetime.datetime(year, mo, d, h, mi, s, micro)  # naive: logs use local time
    except ValueError:
        return None


def _ignored(buf: bytes, start: int) -> bool:
    """The exception line at ``start`` ends a traceback that Python printed under "Exception
    ignored in: …" (an exception in __del__ or at interpreter exit, which does not stop the
    process) or "Error in atexit._run_exitfuncs:" (an exit handler that raised): the
    traceback's lines are indented or "Traceback …"; look back over them only."""
    window = buf[max(0, start - LOOKBACK) : start].splitlines()
    for line in reversed(window):
        raw = strip_prefix(line.decode("utf-8", "replace"))
        text = raw.strip()
        if text.startswith(("Exception ignored in", "Error in atexit._run_exitfuncs")):
            return True
        if not (raw[:1].isspace() or text.startswith("Traceback (most recent call last)")):
            return False
    return False


# the outermost frame of a traceback printed by a thread that is not the program's main thread:
# threading.Thread's entry (threading.py _bootstrap_inner / run) and multiprocessing's queue
# feeder thread (queues.py _feed, which prints the error it caught: BrokenPipeError when the
# reading end went away)
_THREAD_FRAME = re.compile(
    r'File "[^"]*(?:threading\.py", line \d+, in (?:_bootstrap_inner|_bootstrap|run)|'
    r'multiprocessing[/\\]queues\.py", line \d+, in _feed)\b'
)


# tiers of what a caught-and-retried failure looks like: a lost peer (a consequence), an
# exception's bare type (generic), an unknown error word; a root cause's own line is kept
_RETRIABLE = (Tier.CONSEQUENCE, Tier.LAST_RESORT)


def _background(buf: bytes, start: int) -> bool:
    """The exception line at ``start`` ends a traceback a background thread printed: Python's
    threading.excepthook heads it "Exception in thread NAME:", or its outermost frame is a
    thread's entry (``_THREAD_FRAME``). Such a thread ends; the process goes on."""
    window = buf[max(0, start - LOOKBACK) : start].splitlines()
    outermost = ""
    for line in reversed(window):
        raw = strip_prefix(line.decode("utf-8", "replace"))
        text = raw.strip()
        if text.startswith("Exception in thread "):
            return True
        if text.startswith("File "):
            outermost = text
        elif text.startswith("Traceback (most recent call last)"):
            return bool(_THREAD_FRAME.match(outermost))
        elif not raw[:1].isspace():
            return False
    return False


class Scanner:
    """Finds signature lines in files; one instance per table, reusable across files."""

    def __init__(self, table: Sequence[Signature] = SIGNATURES, engine: str = "auto") -> None:
        self.table = tuple(table)
        self.finder = compile_combined(self.table, engine)
        self.line_patterns = [(re.compile(prefixed(s.pattern)), s) for s in self.table]
        # per file scanned: its last non-empty line (1-based number, text); one line per file
        self.last_lines: dict[Path, tuple[int, str]] = {}
        # a line announcing its own retry outranks a lost peer or a bare exception on it
        self.retried = next((s for s in self.table if s.cause == "retried"), None)
        self.retry_pattern = re.compile(self.retried.pattern) if self.retried else None

    def classify(self, text: str) -> Signature | None:
        """The first signature (in table order) matching one line; source code quoted in a
        traceback (``raise X``, ``File "..."``) is not evidence."""
        if _QUOTED_SOURCE.match(text) or _NCCL_NO_PLUGIN.search(text):
            return None
        for pattern, signature in self.line_patterns:
            if pattern.search(text):
                if signature.tier is Tier.LAST_RESORT and (
                    _INFO_LEVEL.search(text) or _TEST_TABLE_HEADER.search(text)
                ):
                    return None
                if signature.tier is not Tier.SIGN and _NCCL_INFO.search(text):
                    return None  # NCCL says what failed with WARN; INFO is progress and retries
                if (
                    self.retried is not None
                    and self.retry_pattern is not None
                    and (signature.generic or signature.tier in _RETRIABLE)
                    and self.retry_pattern.search(text)
                ):
                    return self.retried  # the program caught it (a lost peer, an exception)
                return signature
        return None

    def scan(self, path: Path) -> Iterator[Hit]:
        """Every matching line of ``path`` with its 1-based line number; constant memory.
        Its last non-empty line is kept in ``last_lines``."""
        year = datetime.datetime.fromtimestamp(os.stat(path).st_mtime, datetime.UTC).year
        lines_before = 0  # newlines in the chunks already done
        carry = b""
        with open(path, "rb", buffering=0) as handle:
            chunks = _chunks(handle)
            while True:
                data = next(chunks, b"")
                buf = carry + data if carry else data
                if not buf:
                    return
                cut = buf.rfind(b"\n") + 1
                if not data:
                    cut = len(buf)  # last line without a newline
                elif cut == 0 and len(buf) < MAX_LINE:
                    carry = buf
                    continue
                elif cut == 0:
                    cut = len(buf)
                yield from self._scan_block(path, buf, cut, lines_before, year)
                self._keep_last_line(path, buf, cut, lines_before)
                lines_before += buf.count(b"\n", 0, cut)
                carry = buf[cut:]

    def _keep_last_line(self, path: Path, buf: bytes, end: int, lines_before: int) -> None:
        offset = max(0, end - TAIL_WINDOW)  # a small copy: never the whole chunk
        body = buf[offset:end].rstrip()
        if not body:
            return
        start = offset + body.rfind(b"\n") + 1
        number = lines_before + buf.count(b"\n", 0, start) + 1
        text = buf[start : offset + len(body)].decode("utf-8", "replace").strip()[:300]
        self.last_lines[path] = (number, text)

    def _scan_block(
        self, path: Path, buf: bytes, end: int, lines_before: int, year: int
    ) -> Iterator[Hit]:
        counted_to, line_no = 0, lines_before + 1
        match = self.finder.search(buf, 0, end)
        while match:
            start = buf.rfind(b"\n", 0, match.start()) + 1
            stop = buf.find(b"\n", match.start(), end)
            stop = end if stop < 0 else stop
            line_no += buf.count(b"\n", counted_to, start)
            counted_to = start
            raw = buf[start:stop]
            text = raw.decode("utf-8", "replace").rstrip("\r")
            signature = self.classify(text)
            message = nccl_message(buf, stop, end, text) if signature is not None else ""
            if message:  # what NCCL's last WARN says decides the cause
                signature = self.classify(f"{text} {message}") or signature
            if (
                signature is not None
                and (signature.generic or _EXCEPTION_LINE.match(strip_prefix(text)))
                and _ignored(buf, start)
            ):
                signature = None  # an exception Python reported and ignored (at exit, in __del__)
            if (
                signature is not None
                and signature.tier is not Tier.WARNING
                and _EXCEPTION_LINE.match(strip_prefix(text))
                and _background(buf, start)
            ):
                signature = THREAD_EXCEPTION  # a background thread's: the process went on
            if signature is not None:
                stamp = timestamp(raw, year) or timestamp(
                    buf[max(0, start - LOOKBACK) : start], year
                )
                more = message or continuation(buf, stop, end, text)
                if more and not message and signature.generic:
                    # a message its poster wrapped says why on its next lines: read it whole
                    whole = self.classify(f"{text} {more}")
                    if whole is not None and not whole.generic:
                        signature = whole
                shown = evidence_text(text, signature.pattern)
                more = more or nccl_caller(buf, stop, end, text)
                if more:
                    shown = f"{shown} {more}"[: 2 * EVIDENCE_CHARS]
                secondary = signature.run_failed and _secondary(buf, start)
                yield Hit(path, line_no, shown, signature, stamp, secondary)
            if stop >= end:
                return
            match = self.finder.search(buf, stop + 1, end)
