"""Read a batch script the way bash does, far enough to see which commands it starts.

Bash's own order: a line ending in ``\\`` continues, a quote or ``$(`` left open continues onto
the next line, ``<<EOF`` takes the following lines as the command's input, ``;``, ``&``, ``&&``,
``||`` and ``|`` separate commands, ``#`` starts a comment only at the start of a word. Then each
command's words are expanded: ``$NAME`` inside double quotes or unquoted is replaced by the
variable's value (unquoted values are split into words again), single quotes and ``\\$`` keep the
text as it is. A value is expanded once, when it is assigned or used; bash never expands the
result again, except where a new shell (``bash -c STRING``, a heredoc fed to ``bash``) reads it.

What this module gives the rules: every simple command as its expanded words, with the line it
starts on and the per-task variables (``$SLURM_PROCID`` …) the batch shell replaced by its own
value on the way. Values it cannot know (command substitution, variables from the environment)
become ``UNKNOWN`` inside a word, never a guess.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

UNKNOWN = "\x00?\x00"
# variables that differ between the tasks of one srun step; in the batch shell they hold the
# batch task's own values (0 on the first node)
PER_TASK = frozenset({"SLURM_PROCID", "SLURM_NODEID", "SLURM_LOCALID"})
_MARK = "\x01"  # \x01NAME\x01: the batch shell's own value of a per-task variable
_MARKED = re.compile("\x01([A-Z_]+)(?:@[0-9]+)?\x01")
_MARKED_UNLINED = re.compile("\x01([A-Z_]+)\x01")
_MARKED_LINE = re.compile("\x01[A-Z_]+@([0-9]+)\x01")


def batch_mark(name: str) -> str:
    return f"{_MARK}{name}{_MARK}"


def mark_line(value: str, line: int) -> str:
    """The batch-shell markers in a variable's value, tagged with the line that set it."""
    return _MARKED_UNLINED.sub(lambda m: f"{_MARK}{m.group(1)}@{line}{_MARK}", value)


def display(text: str) -> str:
    """A word as a user would read it (the batch shell's per-task values shown as 0)."""
    return _MARKED.sub("0", text).replace(UNKNOWN, "…")


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?(\+?)=(.*)$", re.S)
_KEYWORDS = frozenset({"then", "do", "else", "elif", "if", "while", "until", "!", "{", "(", "time"})
_CLOSERS = frozenset({"fi", "done", "}", ")", "esac", ";;"})


@dataclasses.dataclass(frozen=True)
class Heredoc:
    body: str
    quoted: bool  # <<'EOF': the body is taken literally; <<EOF: the batch shell expands it
    line: int


@dataclasses.dataclass(frozen=True)
class RawCommand:
    """One simple command (or pipeline stage) as written: its text and where it starts."""

    line: int
    text: str
    heredocs: tuple[Heredoc, ...] = ()


@dataclasses.dataclass(frozen=True)
class Word:
    text: str

    @property
    def batch_vars(self) -> frozenset[str]:
        """Per-task variables the batch shell replaced by its own value inside this word."""
        return frozenset(_MARKED.findall(self.text))

    @property
    def batch_lines(self) -> frozenset[int]:
        """Lines of the assignments that put a batch-shell value into this word."""
        return frozenset(int(n) for n in _MARKED_LINE.findall(self.text))

    @property
    def known(self) -> bool:
        return UNKNOWN not in self.text and _MARK not in self.text


@dataclasses.dataclass
class Var:
    value: str | None  # None: unknown
    exported: bool = False
    array: tuple[str, ...] | None = None


def split_commands(text: str, first_line: int = 1) -> list[RawCommand]:
    """The script's simple commands in order, continuations joined, heredoc bodies attached."""
    lines = text.split("\n")
    out: list[RawCommand] = []
    buf: list[str] = []
    start = first_line
    state = _ScanState()
    i = 0
    while i < len(lines):
        number = first_line + i
        if not buf:
            start = number
        pieces, cont, docs = state.scan(lines[i])
        i += 1
        if cont and pieces[-1].endswith("\\"):
            pieces[-1] = pieces[-1][:-1]  # backslash-newline inside double quotes: removed
        bodies: list[Heredoc] = []
        for delimiter, quoted in docs:
            body, j = _read_heredoc(lines, i, delimiter)
            bodies.append(Heredoc(body, quoted, first_line + i))
            i = j
        for k, piece in enumerate(pieces):
            buf.append(piece)
            if k < len(pieces) - 1 or not (cont or state.open()):
                joined = "".join(buf).strip()
                if joined:
                    out.append(RawCommand(start, joined, tuple(bodies)))
                    bodies = []
                buf = []
                start = number
        if bodies and out:
            last = out[-1]
            out[-1] = RawCommand(last.line, last.text, last.heredocs + tuple(bodies))
        if buf and state.open() and not cont:
            buf.append("\n")
    if buf and "".join(buf).strip():
        out.append(RawCommand(start, "".join(buf).strip()))
    return out


def _read_heredoc(lines: list[str], i: int, delimiter: str) -> tuple[str, int]:
    body: list[str] = []
    while i < len(lines):
        if lines[i].lstrip("\t").rstrip() == delimiter:
            return "\n".join(body), i + 1
        body.append(lines[i])
        i += 1
    return "\n".join(body), i


# what closes each nesting the scanner tracks outside quotes
_CLOSER = {"`": "`", "((": "))", "$(": ")", "(": ")", "=(": ")", "${": "}"}


@dataclasses.dataclass
class _ScanState:
    """Quote and substitution nesting carried from one physical line to the next."""

    stack: list[str] = dataclasses.field(default_factory=list)  # "'", '"', "$(", "`", "${", "(("

    def open(self) -> bool:
        return bool(self.stack)

    def scan(self, line: str) -> tuple[list[str], bool, list[tuple[str, bool]]]:
        """(pieces split at separators, continued by a trailing backslash, heredocs opened)."""
        pieces: list[str] = []
        cur: list[str] = []
        docs: list[tuple[str, bool]] = []
        i, n = 0, len(line)
        while i < n:
            ch = line[i]
            top = self.stack[-1] if self.stack else ""
            if top == "'":
                cur.append(ch)
                if ch == "'":
                    self.stack.pop()
                i += 1
                continue
            if ch == "\\":
                if i + 1 == n:
                    if top:
                        cur.append(ch)  # inside quotes: the newline stays escaped
                    return self._finish(pieces, cur), True, docs
                cur.append(line[i : i + 2])
                i += 2
                continue
            if top == '"':
                if ch == '"':
                    self.stack.pop()
                elif line.startswith("$(", i):
                    self.stack.append("$(")
                    cur.append("$(")
                    i += 2
                    continue
                elif ch == "`":
                    self.stack.append("`")
                cur.append(ch)
                i += 1
                continue
            if (
                ch == "#"
                and top in ("", "$(", "=(")
                and (not cur or cur[-1][-1:].isspace() or cur[-1][-1:] in ";&|(")
            ):
                break
            token = self._nest(line, i, top, cur)
            if token:
                cur.append(token)
                i += len(token)
                continue
            if top == "" and line.startswith("<<", i) and not line.startswith("<<<", i):
                match = re.match(r"<<(-?)\s*(['\"]?)([^\s'\";&|<>)]+)\2", line[i:])
                if match:
                    docs.append((match.group(3), bool(match.group(2))))
                    cur.append(match.group(0))
                    i += len(match.group(0))
                    continue
            if top == "" and ch in ";&|":
                if ch == "&" and (line.startswith("&>", i) or (cur and cur[-1][-1:] in "<>")):
                    cur.append(ch)
                    i += 1
                    continue
                pieces.append("".join(cur))
                cur = []
                i += 2 if line[i : i + 2] in ("&&", "||", ";;") else 1
                continue
            cur.append(ch)
            i += 1
        return self._finish(pieces, cur), False, docs

    def _nest(self, line: str, i: int, top: str, cur: list[str]) -> str:
        """The quote or bracket that opens or closes at ``line[i]``, pushed or popped ("": none)."""
        closer = _CLOSER.get(top)
        if closer and line.startswith(closer, i):
            self.stack.pop()
            return closer
        ch = line[i]
        if ch in "'\"`":
            opened = token = ch
        elif line.startswith("$((", i):
            opened, token = "((", "$(("
        elif line.startswith(("$(", "${"), i):
            opened = token = line[i : i + 2]
        elif ch == "(" and top in ("$(", "((", "=("):
            opened = token = "("
        elif ch == "(" and top == "" and cur and cur[-1].endswith("="):
            opened, token = "=(", "("  # an array: NAME=(…)
        else:
            return ""
        self.stack.append(opened)
        return token

    @staticmethod
    def _finish(pieces: list[str], cur: list[str]) -> list[str]:
        return [*pieces, "".join(cur)]


class Expander:
    """Word splitting and parameter expansion of one shell (the batch shell or a task's)."""

    def __init__(self, env: Mapping[str, Var], *, batch: bool, positional: tuple[str, ...] = ()):
        self.env = env
        self.batch = batch
        self.positional = positional
        self.used: set[str] = set()  # names this shell read

    def words(self, text: str) -> list[Word]:
        out: list[Word] = []
        cur: list[str] = []
        has_word = False
        i, n = 0, len(text)

        def flush() -> None:
            nonlocal cur, has_word
            if has_word:
                out.append(Word("".join(cur)))
            cur, has_word = [], False

        while i < n:
            ch = text[i]
            if ch in " \t\n":
                flush()
                i += 1
                continue
            if ch == "\\":
                if i + 1 < n and text[i + 1] == "\n":
                    i += 2
                    continue
                cur.append(text[i + 1 : i + 2])
                has_word = True
                i += 2
                continue
            if ch == "'" or text.startswith("$'", i):
                start = text.index("'", i) + 1
                end = text.find("'", start)
                end = n if end < 0 else end
                cur.append(text[start:end])
                has_word = True
                i = end + 1
                continue
            if ch == '"':
                has_word = True
                i += 1
                while i < n and text[i] != '"':
                    c = text[i]
                    if c == "\\" and i + 1 < n and text[i + 1] in '$`"\\\n':
                        if text[i + 1] != "\n":
                            cur.append(text[i + 1])
                        i += 2
                        continue
                    if c in "$`":
                        value, i = self._dollar(text, i, quoted=True)
                        if isinstance(value, tuple):  # "${A[@]}" / "$@": one word per element
                            for k, element in enumerate(value):
                                if k:
                                    flush()
                                    has_word = True
                                cur.append(element)
                        elif value is not None:
                            cur.append(value)
                        continue
                    cur.append(c)
                    i += 1
                i += 1
                continue
            if ch in "$`":
                value, i = self._dollar(text, i, quoted=False)
                if value is None:
                    continue
                if isinstance(value, tuple):  # "${ARRAY[@]}"-like: separate words
                    parts = list(value)
                else:
                    parts = value.split()
                    if value[:1].isspace() and cur:
                        flush()
                if not parts:
                    continue
                cur.append(parts[0])
                has_word = True
                for part in parts[1:]:
                    flush()
                    cur.append(part)
                    has_word = True
                if value[-1:].isspace() if isinstance(value, str) else False:
                    flush()
                continue
            cur.append(ch)
            has_word = True
            i += 1
        flush()
        return out

    def _dollar(
        self, text: str, i: int, *, quoted: bool
    ) -> tuple[str | tuple[str, ...] | None, int]:
        """Expand the ``$…`` or backquote at ``i``: (value, next index)."""
        if text[i] == "`":
            end = _matching(text, i + 1, "`")
            return UNKNOWN + self._scan_vars(text[i + 1 : end]), end + 1
        if text.startswith("$((", i):
            end = _matching_parens(text, i + 1)
            return UNKNOWN + self._scan_vars(text[i + 3 : end], bare=True), end + 1
        if text.startswith("$(", i):
            end = _matching_parens(text, i + 1)
            return UNKNOWN + self._scan_vars(text[i + 2 : end]), end + 1
        if text.startswith("${", i):
            end = _matching(text, i + 2, "}")
            return self._braced(text[i + 2 : end], quoted), end + 1
        match = _NAME.match(text, i + 1)
        if match:
            return self._lookup(match.group(0)), match.end()
        nxt = text[i + 1 : i + 2]
        if nxt.isdigit():
            k = int(nxt)
            return (self.positional[k - 1] if 0 < k <= len(self.positional) else ""), i + 2
        if nxt in ("@", "*"):
            if quoted and nxt == "@":
                return tuple(self.positional), i + 2
            return " ".join(self.positional), i + 2
        if nxt in ("#", "?", "$", "!", "-"):
            return UNKNOWN, i + 2
        return "$", i + 1

    def _braced(self, inner: str, quoted: bool) -> str | tuple[str, ...] | None:
        match = _NAME.match(inner)
        if inner.startswith("#") or not match:
            return UNKNOWN
        name, rest = match.group(0), inner[match.end() :]
        var = self.env.get(name)
        if rest.startswith("["):
            self.used.add(name)
            index = rest[1 : rest.find("]")] if "]" in rest else ""
            if var is not None and var.array is not None:
                if index in ("@", "*"):
                    return tuple(var.array) if quoted and index == "@" else " ".join(var.array)
                if index.isdigit() and int(index) < len(var.array):
                    return var.array[int(index)]
            return UNKNOWN
        for op in (":-", ":=", "-", "="):
            if rest.startswith(op):
                value = self._lookup(name, missing_ok=True)
                if value is None or value == "":
                    default = Expander(self.env, batch=self.batch, positional=self.positional)
                    words = default.words(rest[len(op) :])
                    self.used |= default.used
                    return " ".join(w.text for w in words)
                return value
        if rest.startswith((":+", "+")):
            value = self._lookup(name, missing_ok=True)
            return UNKNOWN if value else ""
        if rest:  # ${x:0:9}, ${x%%pat} …: derived from the value, not the value
            value = self._lookup(name)
            return (
                ""
                if value == ""
                else UNKNOWN + "".join(batch_mark(n) for n in _MARKED.findall(value or ""))
            )
        return self._lookup(name)

    def _lookup(self, name: str, missing_ok: bool = False) -> str | None:
        self.used.add(name)
        var = self.env.get(name)
        if var is not None:
            return UNKNOWN if var.value is None else var.value
        if name in PER_TASK:
            return batch_mark(name) if self.batch else UNKNOWN
        if missing_ok:
            return None
        return UNKNOWN

    def _scan_vars(self, inner: str, bare: bool = False) -> str:
        """Markers of the per-task variables a substitution the batch shell runs reads."""
        if not self.batch:
            return ""
        found = set()
        for name in PER_TASK:
            if name in self.env:
                continue
            prefix = r"(?<![A-Za-z0-9_\\])\$?" if bare else r"\$"
            pattern = prefix + rf"\{{?({name})\b"
            for match in re.finditer(pattern, inner):
                if inner[max(0, match.start() - 1)] != "\\" or match.start() == 0:
                    found.add(name)
        # single-quoted parts of a command substitution are not expanded: drop them
        if "'" in inner and not bare:
            unquoted = re.sub(r"'[^']*'", "", inner)
            found = {n for n in found if re.search(rf"\$\{{?{n}\b", unquoted)}
        return "".join(batch_mark(n) for n in sorted(found))


def _matching(text: str, i: int, close: str) -> int:
    depth = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if close == "}" and text.startswith("${", i):
            depth += 1
            i += 2
            continue
        if ch == close:
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return len(text)


def _matching_parens(text: str, i: int) -> int:
    """Index of the ``)`` closing the ``(`` at ``i`` (quotes inside skipped)."""
    depth = 0
    quote = ""
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"':
                i += 1
        elif ch == "\\":
            i += 1
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(text)


def strip_keywords(words: list[Word]) -> list[Word]:
    """The simple command inside ``if``/``then``/``do``/``{`` … prefixes; [] for closers."""
    i = 0
    while i < len(words) and words[i].text in _KEYWORDS:
        i += 1
    rest = words[i:]
    head = rest[0].text if rest else ""
    if head in _CLOSERS or head in ("for", "case", "select", "function") or head.endswith("()"):
        return []
    return rest


def assignment(word: str) -> tuple[str, str, bool] | None:
    """(name, raw value text, append) of a ``NAME=value`` word as written, else None."""
    match = _ASSIGN.match(word)
    if not match or match.group(2):
        return None
    return match.group(1), match.group(4), bool(match.group(3))


def raw_words(text: str) -> list[str]:
    """A command's words as written (quotes kept, nothing expanded)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text[i] in " \t\n":
            i += 1
            continue
        end = max(_word_end(text, i), i + 1)
        out.append(text[i:end])
        i = end
    return out


def _word_end(text: str, i: int) -> int:
    """Index just past the shell word starting at ``i`` (quotes and substitutions kept)."""
    n = len(text)
    while i < n and text[i] not in " \t\n":
        ch = text[i]
        if ch == "\\":
            i += 2
        elif ch == "'":
            end = text.find("'", i + 1)
            i = n if end < 0 else end + 1
        elif ch == '"':
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text.startswith("$(", i):
                    i = _matching_parens(text, i + 1)
                i += 1
            i += 1
        elif text.startswith("$(", i):
            i = _matching_parens(text, i + 1) + 1
        elif text.startswith("${", i):
            i = _matching(text, i + 2, "}") + 1
        elif ch == "`":
            i = _matching(text, i + 1, "`") + 1
        elif ch == "(" and text[i - 1 : i] == "=":
            i = _matching_parens(text, i) + 1
        else:
            i += 1
    return min(i, n)
