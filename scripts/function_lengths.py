#!/usr/bin/env python3
"""Lists C++ functions longer than a limit (DESIGN: functions under ~120 lines).

usage: scripts/function_lengths.py LIMIT FILE...    e.g. scripts/function_lengths.py 120 src/ir/*.cpp

A heuristic, not a parser: comments, string and char literals are blanked, then a brace counter
treats a '{' as a function body when the text since the previous ';', '{' or '}' holds a ')' and
does not start with a control keyword, and no enclosing brace is already a function (lambdas and
local classes count toward their function). A function's length runs from its header's first line
to its closing brace. Prints `file:line: name N lines` for each function over LIMIT.
"""
import re
import sys

CONTROL = re.compile(r'^(if|for|while|switch|else|do|catch|try|namespace|struct|class|enum|union)\b')


def blank(src):
    keep_lines = lambda m: '\n' * m.group(0).count('\n')
    src = re.sub(r'//[^\n]*', '', src)
    src = re.sub(r'/\*.*?\*/', keep_lines, src, flags=re.S)
    src = re.sub(r'R"\((.*?)\)"', lambda m: '""' + keep_lines(m), src, flags=re.S)
    src = re.sub(r'"(\\.|[^"\\\n])*"', '""', src)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", src)


def functions(path):
    src = blank(open(path, encoding='utf-8').read())
    found, stack, header_start, line = [], [], 0, 1
    for i, c in enumerate(src):
        if c == '\n':
            line += 1
        elif c == '{':
            header = src[header_start:i].strip()
            in_function = any(is_fn for is_fn, _, _ in stack)
            is_fn = ')' in header and not CONTROL.match(header) and not in_function
            names = re.findall(r'([~\w:]+)\s*\(', header)
            stack.append((is_fn, line - header.count('\n'), names[0] if names else '?'))
            header_start = i + 1
        elif c == '}':
            if stack:
                is_fn, first, name = stack.pop()
                if is_fn:
                    found.append((line - first + 1, name, first))
            header_start = i + 1
        elif c == ';':
            header_start = i + 1
    return found


def main():
    limit = int(sys.argv[1])
    for path in sys.argv[2:]:
        for length, name, first in functions(path):
            if length > limit:
                print(f'{path}:{first}: {name} {length} lines')


if __name__ == '__main__':
    main()
