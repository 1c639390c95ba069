#!/usr/bin/python3
"""ARCHITECTURE.md's table of library links against CMakeLists.txt's target_link_libraries.

    /usr/bin/python3 tests/check_architecture.py

Reads the table between `<!-- links:begin -->` and `<!-- links:end -->` (each library and the
project libraries it links directly) and every target_link_libraries of CMakeLists.txt (the
project's own rv_* targets and ravnest; rv_torch and rv_toml are wrappers of outside libraries),
and prints each difference. Exit status 0 when they agree, 1 otherwise.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WRAPPERS = {"rv_torch", "rv_toml"}


def cmake_links(text):
    """{target: set of project libraries it links}, every target_link_libraries call merged."""
    links = {}
    for m in re.finditer(r"target_link_libraries\(\s*(\w+)([^)]*)\)", text, re.S):
        target = m.group(1)
        if target in WRAPPERS or not (target.startswith("rv_") or target == "ravnest"):
            continue
        deps = set(re.findall(r"\b(rv_\w+)\b", m.group(2))) - WRAPPERS
        links.setdefault(target, set()).update(deps)
    for m in re.finditer(r"add_library\(\s*(rv_\w+)", text):
        if m.group(1) not in WRAPPERS:
            links.setdefault(m.group(1), set())
    return links


def documented_links(text):
    """{library: set of libraries} from the links table; ValueError when the table is missing."""
    begin, end = text.find("<!-- links:begin -->"), text.find("<!-- links:end -->")
    if begin < 0 or end < begin:
        raise ValueError("ARCHITECTURE.md has no <!-- links:begin --> ... <!-- links:end --> table")
    links = {}
    for line in text[begin:end].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        links[cells[0].strip("`")] = set(re.findall(r"`(rv_\w+)`", cells[1]))
    return links


def differences(cmake, doc):
    out = []
    for lib in sorted(set(cmake) | set(doc)):
        if lib not in doc:
            out.append(f"{lib}: in CMakeLists.txt, not in ARCHITECTURE.md's table")
        elif lib not in cmake:
            out.append(f"{lib}: in ARCHITECTURE.md's table, not a library of CMakeLists.txt")
        else:
            for d in sorted(cmake[lib] - doc[lib]):
                out.append(f"{lib} links {d} (CMakeLists.txt); ARCHITECTURE.md does not say so")
            for d in sorted(doc[lib] - cmake[lib]):
                out.append(f"{lib} -> {d} in ARCHITECTURE.md; CMakeLists.txt links no such thing")
    return out


def main():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        cmake = cmake_links(f.read())
    with open(os.path.join(ROOT, "ARCHITECTURE.md"), encoding="utf-8") as f:
        try:
            doc = documented_links(f.read())
        except ValueError as e:
            print(f"check_architecture: {e}")
            return 1
    diffs = differences(cmake, doc)
    for d in diffs:
        print(f"check_architecture: {d}")
    if not diffs:
        print(f"check_architecture: {len(cmake)} libraries, their links as ARCHITECTURE.md says")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
