#!/usr/bin/env python3
"""The folders' dependency order: each folder (one CMake library each) may include headers and link the
libraries of itself and of the folders before it in the top-level CMakeLists.txt's order, never of a
later one, so the folders form layers without a cycle. Prints what it checked and each include or link
that runs back up; exits 1 when there is one."""
import argparse
import pathlib
import re
import sys

SOURCES = {".cpp", ".hpp", ".cu", ".cuh", ".h"}


def component_order(root):
    text = (root / "CMakeLists.txt").read_text()
    match = re.search(r"foreach\(component ([^)]*)\)", text)
    if not match:
        sys.exit("include_order_test: no 'foreach(component ...)' in CMakeLists.txt: the order it checks is gone")
    return match.group(1).split()


def upward(root, order):
    """(file, line, what) for every include or link of a later folder; and the counts checked."""
    rank = {name: i for i, name in enumerate(order)}
    found, includes, links = [], 0, 0
    for folder in order:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in SOURCES:
                for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    m = re.match(r'\s*#\s*include\s*"([^"/]+)/', line)
                    if m and m.group(1) in rank:
                        includes += 1
                        if rank[m.group(1)] > rank[folder]:
                            found.append((path, n, f'includes "{m.group(1)}/..."'))
            elif path.name == "CMakeLists.txt":
                for n, line in enumerate(path.read_text().splitlines(), 1):
                    for lib in re.findall(r"\bgdnv_([a-z]+)", line):
                        if lib in rank:
                            links += 1
                            if rank[lib] > rank[folder]:
                                found.append((path, n, f"names gdnv_{lib}"))
    return found, includes, links


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", default=pathlib.Path(__file__).resolve().parent.parent, type=pathlib.Path)
    root = parser.parse_args().root
    order = component_order(root)
    found, includes, links = upward(root, order)
    print(f"order: {' < '.join(order)}")
    print(f"{includes} includes and {links} library names checked, {len(found)} running back up")
    for path, n, what in found:
        print(f"{path.relative_to(root)}:{n}: {what}, a later folder: move the code down or the folder up")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
