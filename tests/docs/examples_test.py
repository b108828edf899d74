#!/usr/bin/env python3
"""The documentation's Python examples are Python, and every name they take from syncd exists.

    examples_test.py ROOT      (with the built package on PYTHONPATH)

Every ```python block of README.md and docs/pages/*.md compiles; where a block imports syncd
(`import syncd.torch as hvd`, `from syncd.torch import Compression`, ...), every attribute it
reads from those modules (`hvd.DistributedOptimizer`, `hvd.Compression.topk`) exists in the
package as built. A renamed function or a typo in an example fails here, not in a user's hands.
"""
import glob
import importlib
import os
import re
import sys

BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
IMPORT_AS = re.compile(r"^\s*import (syncd[\w.]*) as (\w+)", re.M)
FROM_IMPORT = re.compile(r"^\s*from (syncd[\w.]*) import ([\w, ]+)", re.M)


def blocks(root):
    pages = [os.path.join(root, "README.md")] + sorted(
        p for p in glob.glob(os.path.join(root, "docs", "pages", "*.md")) if not os.path.islink(p))
    for page in pages:
        with open(page) as f:
            text = f.read()
        for m in BLOCK.finditer(text):
            yield "%s:%d" % (os.path.relpath(page, root), text[:m.start()].count("\n") + 2), m.group(1)


def check(where, code):
    compile(code, where, "exec")  # a SyntaxError names the page and line
    names = {alias: importlib.import_module(module) for module, alias in IMPORT_AS.findall(code)}
    for module, imported in FROM_IMPORT.findall(code):
        mod = importlib.import_module(module)
        for name in (n.strip() for n in imported.split(",")):
            assert hasattr(mod, name), "%s: %s has no %s" % (where, module, name)
            names[name] = getattr(mod, name)
    checked = 0
    for alias, obj in names.items():
        for chain in re.findall(r"\b%s((?:\.\w+)+)" % re.escape(alias), code):
            target = obj
            for attr in chain.strip(".").split("."):
                if not hasattr(target, attr) and isinstance(target, type(sys)):  # a submodule
                    target = importlib.import_module(target.__name__ + "." + attr)
                    continue
                assert hasattr(target, attr), "%s: %s%s: no %s" % (where, alias, chain, attr)
                target = getattr(target, attr)
            checked += 1
    return checked


def main():
    root = sys.argv[1]
    count = checked = 0
    for where, code in blocks(root):
        checked += check(where, code)
        count += 1
    assert count >= 5, "found only %d Python examples: has the documentation moved?" % count
    print("%d Python examples compile; %d uses of syncd's names exist" % (count, checked))


if __name__ == "__main__":
    main()
