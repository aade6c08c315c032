"""python/gdn_verify/README.md's floors: every import of a gdn_verify module, at module level or inside a
function, points to its own floor or one below it (as tests/include_order_test.py holds the C++ folders)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gdn_verify"


def floors() -> dict[str, int]:
    """Module (dotted, under gdn_verify) -> its floor's index, from the README's table."""
    rows = re.findall(r"^\|([^|]*)\|([^|]*)\|", (PACKAGE / "README.md").read_text(), re.M)
    out, floor = {}, -1
    for name, modules in rows[2:]:  # below the header and its rule
        floor += bool(name.strip())
        for m in re.findall(r"`([\w/]+)`", modules):
            out[m.strip("/").replace("/", ".")] = floor
    return out


def owner(module: str, table: dict[str, int]) -> str:
    """The table's entry a module belongs to: itself, or the package it sits in (adapters.fla.kcp -> adapters.fla)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in table:
            return ".".join(parts[:n])
    raise AssertionError(f"gdn_verify.{module} is in no floor of python/gdn_verify/README.md: add it")


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gdn_verify."):
            found.add(node.module[len("gdn_verify."):])
            found.update(f"{node.module[len('gdn_verify.'):]}.{a.name}" for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "gdn_verify":
            found.update(a.name for a in node.names if a.name != "__version__")
    return found


def test_every_module_has_a_floor_and_imports_run_down():
    table = floors()
    assert "names" in table and "adapters.megatron" in table, sorted(table)
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")
        if module == "__init__":
            continue
        mine = owner(module, table)
        for target in imports(path):
            try:
                theirs = owner(target, table)
            except AssertionError:
                theirs = owner(target.rsplit(".", 1)[0], table)  # `from gdn_verify.x import Name`
            if table[theirs] > table[mine]:
                upward.append(f"{module} -> {target}")
    assert not upward, upward
