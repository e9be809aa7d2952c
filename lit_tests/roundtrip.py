"""%roundtrip FILE: parse and print every `// -----` chunk of FILE that parses, then parse and print the
result again; the two printouts must be byte-identical. Chunks that fail to parse (negative cases) are
skipped. Exit 1 with a diff when a chunk does not round-trip."""

import difflib
import sys

from tessel.cli.common import split_chunks
from tessel.ir.diagnostics import DiagnosticError
from tessel.ir.parser import parse_module
from tessel.ir.printer import to_text


def main(path: str) -> int:
    text = open(path, encoding="utf-8").read()
    bad = 0
    for chunk, offset in split_chunks(text):
        try:
            first = to_text(parse_module(chunk, path, line_offset=offset))
        except DiagnosticError:
            continue
        second = to_text(parse_module(first, "<printed>"))
        if first != second:
            bad += 1
            sys.stderr.write(f"{path}:{offset + 1}: chunk does not round-trip:\n")
            sys.stderr.writelines(difflib.unified_diff(first.splitlines(True), second.splitlines(True)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
