"""The test-case reducer behind `tessel-reduce`: shrink a module while an interestingness test keeps
saying yes, like llvm-reduce and mlir-reduce.

Each round runs every strategy (strategies.py) delta-debugging style: first on all of its sites at once,
then on chunks of half the size, down to single sites; a chunk whose candidate is interesting is kept.
Rounds repeat until one changes nothing. Every candidate is verified, printed, parsed back and verified
again before the test sees it, and a text tested once is never tested again. Sites are visited in module
order and ids are handed out in walk order, so the same input and test give the same output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from ..ir.diagnostics import DiagnosticError
from ..ir.parser import parse_module
from ..ir.printer import to_text
from ..ir.verifier import verify, verify_or_raise
from .edit import clone, erase_dead, number
from .strategies import Strategy, Work, default_strategies

Interesting = Callable[[str], bool]


class NotInteresting(Exception):
    """The input itself is not interesting: there is nothing to keep while reducing."""


@dataclass
class Event:
    """Progress: `kind` is "start", "test" (before each test), "accept" or "done"."""

    kind: str
    strategy: str
    ops: int
    lines: int
    tests: int
    round: int = 0


@dataclass
class Result:
    text: str
    initial_ops: int
    initial_lines: int
    ops: int
    lines: int
    tests: int
    rounds: int
    accepted: list[Event] = field(default_factory=list)


def count_ops(w: Work) -> int:
    return sum(1 for _ in w.module.walk())


def count_lines(text: str) -> int:
    return text.count("\n")


class Reducer:
    def __init__(self, interesting: Interesting, strategies: list[Strategy] | None = None,
                 on_event: Callable[[Event], None] | None = None, max_rounds: int = 100):
        self.interesting = interesting
        self.strategies = strategies if strategies is not None else default_strategies()
        self.on_event = on_event or (lambda e: None)
        self.max_rounds = max_rounds
        self.seen: set[bytes] = set()
        self.tests = 0
        self.round = 0
        self.accepted: list[Event] = []

    def run(self, data: bytes | str, filename: str = "<input>") -> Result:
        module = parse_module(data, filename)
        verify_or_raise(module)
        self.cur = Work(module, number(module))
        self.text = to_text(module)
        self.seen.add(_digest(self.text))
        initial_ops, initial_lines = count_ops(self.cur), count_lines(self.text)
        self.tests += 1
        if not self.interesting(self.text):
            raise NotInteresting("the input is not interesting")
        self._event("start", "input")
        self.auto_dce = self._try_dce()
        while self.round < self.max_rounds:
            self.round += 1
            changed = False
            for s in self.strategies:
                changed |= self._ddmin(s)
            if not changed:
                break
        self._event("done", "")
        return Result(self.text, initial_ops, initial_lines, count_ops(self.cur), count_lines(self.text),
                      self.tests, self.round, self.accepted)

    # ------------------------------------------------------------------------------------------------
    def _try_dce(self) -> bool:
        """Erase dead ops once; when what remains is still interesting, every later candidate drops its
        dead ops too (most tests do not care about dead code; those that do keep it)."""
        module, ids = clone(self.cur.module, self.cur.ids)
        w = Work(module, ids)
        if not erase_dead(w.module):
            return True
        return self._consider(w, "erase-dead")

    def _ddmin(self, s: Strategy) -> bool:
        sites = s.sites(self.cur)
        if not sites:
            return False
        chunk, progress = len(sites), False
        while True:
            tried: set = set()
            while True:
                chosen = [x for x in s.sites(self.cur) if x not in tried][:chunk]
                if not chosen:
                    break
                module, ids = clone(self.cur.module, self.cur.ids)
                w = Work(module, ids)
                ok = s.apply(w, chosen)
                if ok and self.auto_dce:
                    erase_dead(w.module)
                accepted = ok and self._consider(w, s.NAME)
                progress |= accepted
                if not (accepted and s.REPEATABLE):
                    tried.update(chosen)
            if chunk == 1:
                return progress
            chunk = (chunk + 1) // 2

    def _consider(self, w: Work, strategy: str) -> bool:
        """Test a candidate; keep it when it is valid, new and interesting."""
        if verify(w.module):
            return False
        text = to_text(w.module)
        key = _digest(text)
        if key in self.seen:
            return False
        self.seen.add(key)
        try:  # what the test reads must parse and verify, not just the structure we built
            if verify(parse_module(text, "<candidate>", register_source=False)):
                return False
        except DiagnosticError:
            return False
        self.tests += 1
        self._event("test", strategy)
        if not self.interesting(text):
            return False
        self.cur, self.text = w, text
        self.accepted.append(self._event("accept", strategy))
        return True

    def _event(self, kind: str, strategy: str) -> Event:
        e = Event(kind, strategy, count_ops(self.cur), count_lines(self.text), self.tests, self.round)
        self.on_event(e)
        return e


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def reduce_module(data: bytes | str, interesting: Interesting, *, drop_locs: bool = False,
                  on_event: Callable[[Event], None] | None = None, filename: str = "<input>",
                  max_rounds: int = 100) -> Result:
    """Shrink the module in `data` while `interesting(text)` holds; raises NotInteresting when the input
    is not, DiagnosticError when it does not parse or verify."""
    return Reducer(interesting, default_strategies(drop_locs), on_event, max_rounds).run(data, filename)
