#!/usr/bin/env python3
"""Holds the sizes the house keeps (run by CI through ctest's `sizes` test).

  scripts/check_sizes.py [ROOT]

Product code is every .cc, .h and .cu file outside tests/ and build
folders. It fails, naming each offender, when
  - a function body (opened at namespace or class scope) spans more than
    MAX_FUNCTION_LINES lines, from its name's line to its closing brace;
  - a file has more than MAX_FILE_LINES lines;
  - a folder's own product files (not its subfolders') have more than
    MAX_FOLDER_LINES lines together, or than its entry in FOLDER_ALLOWANCE.
A lambda or a local class inside a function counts toward that function.
"""
import os
import re
import subprocess
import sys

MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 800  # server/worker_core.cc is the largest (753)
MAX_FOLDER_LINES = 5000
# Folders over MAX_FOLDER_LINES until they are split, held where they stand so
# that they do not grow (none today).
FOLDER_ALLOWANCE = {}
SOURCE = re.compile(r"\.(cc|h|cu)$")
SKIP_DIRS = ("tests/", "build")


def product_files(root):
    try:
        listed = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                                check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a checkout: walk it
        listed = []
        for d, dirs, files in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
            listed += [os.path.relpath(os.path.join(d, f), root) for f in files]
    return sorted(f for f in listed if SOURCE.search(f) and not f.startswith(SKIP_DIRS))


def blank_out(text):
    """`text` with comments, string and character literals and preprocessor
    lines replaced by spaces (newlines kept), so braces in them do not count."""
    pattern = re.compile(
        r'//[^\n]*|/\*.*?\*/|R"([^(\s]*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|'
        r"(?<![0-9A-Za-z_])'(?:\\.|[^'\\\n])+'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*",
        re.S | re.M)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|try)\s*$")
SCOPE = re.compile(r"\b(namespace|class|struct|union|enum)\b[^;{}()]*$")


def long_functions(text):
    """(first line, lines, name) of each function body over the limit."""
    found = []
    stack = []  # (kind, start offset, name)
    for m in re.finditer(r"[{}]", text):
        at = m.start()
        if text[at] == "}":
            if stack:
                kind, start, name = stack.pop()
                if kind == "function":
                    first = text.count("\n", 0, start) + 1
                    lines = text.count("\n", start, at) + 1
                    if lines > MAX_FUNCTION_LINES:
                        found.append((first, lines, name))
            continue
        head = text[max(0, at - 400):at]
        head = head[max(head.rfind(";"), head.rfind("{"), head.rfind("}")) + 1:]
        in_function = any(kind == "function" for kind, _, _ in stack)
        kind = "other"
        if not in_function:
            if SCOPE.search(head):
                kind = "scope"
            elif re.search(r"\)\s*(const|noexcept|override|final|->[^{]*|\s)*$", head) and \
                    not CONTROL.search(head.split("(")[0]):
                kind = "function"
        name = ""
        call = re.search(r"([~\w:]+)\s*\(", head)
        if call:
            name = call.group(1)
        # A function's name is on the line where its signature starts.
        start = at - len(head) + (len(head) - len(head.lstrip()))
        stack.append((kind, start, name))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = []
    for f in product_files(root):
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            problems.append(f"{f}: {lines} lines, over {MAX_FILE_LINES}")
        for first, n, name in long_functions(blank_out(text)):
            problems.append(f"{f}:{first}: {name or 'a function'} is {n} lines, "
                            f"over {MAX_FUNCTION_LINES}")
    folders = {}
    for f in product_files(root):
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            folders[os.path.dirname(f)] = folders.get(os.path.dirname(f), 0) + fh.read().count("\n")
    for folder, lines in sorted(folders.items()):
        limit = FOLDER_ALLOWANCE.get(folder, MAX_FOLDER_LINES)
        if lines > limit:
            problems.append(f"{folder}/: {lines} lines in its own files, over {limit}")
    for p in problems:
        print(p)
    if problems:
        print(f"check_sizes: {len(problems)} over the limits (scripts/check_sizes.py)")
        return 1
    print(f"check_sizes: every function within {MAX_FUNCTION_LINES} lines, "
          f"every file within {MAX_FILE_LINES}, every folder within {MAX_FOLDER_LINES} "
          f"(allowances: {FOLDER_ALLOWANCE})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
