#!/usr/bin/env python3
"""No upward include in daemon/: every #include of a daemon/ or proto/ header must name a folder
at a lower layer than the including file's, or its own folder. The layers are read from
daemon/README.md (one numbered line per layer, folders in backquotes).

    layering_test.py ROOT          check the tree at ROOT
    layering_test.py --self-test   check that an upward include in a made-up tree is caught
"""
import os
import re
import sys
import tempfile

LAYER_LINE = re.compile(r"^(\d+)\.\s+(.*)$")
FOLDER = re.compile(r"`([a-z_]+)/`|`(main\.cc)`")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_layers(readme):
    layers = {}
    with open(readme) as f:
        for line in f:
            m = LAYER_LINE.match(line)
            if not m:
                continue
            for a, b in FOLDER.findall(m.group(2)):
                layers[a or b] = int(m.group(1))
    return layers


def unit_of(path):
    """daemon/coord/x.h -> coord; daemon/main.cc -> main.cc; proto/x.h -> proto; syncd/client.h -> syncd."""
    parts = path.split("/")
    if parts[0] == "daemon":
        return parts[1] if len(parts) > 2 else parts[1]
    return parts[0]


def check(root):
    layers = read_layers(os.path.join(root, "daemon", "README.md"))
    problems = []
    if not layers:
        return ["daemon/README.md lists no layers"]
    for base in ("daemon", "proto"):
        for dirpath, _, files in os.walk(os.path.join(root, base)):
            for name in files:
                if not name.endswith((".h", ".cc", ".cu")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root)
                unit = unit_of(rel)
                if unit not in layers:
                    problems.append(f"{rel}: daemon/README.md gives no layer to '{unit}'")
                    continue
                with open(os.path.join(root, rel), errors="replace") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    if not inc.startswith(("daemon/", "proto/", "syncd/")):
                        continue
                    target = unit_of(inc)
                    if target not in layers:
                        problems.append(f"{rel}: includes {inc}, whose folder has no layer")
                    elif target != unit and layers[target] >= layers[unit]:
                        problems.append(f"{rel} (layer {layers[unit]}, {unit}) includes {inc} "
                                        f"(layer {layers[target]}, {target})")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        write("daemon/README.md", "0. `proto/`\n1. `base/`\n2. `engine/`\n")
        write("proto/a.h", "")
        write("daemon/base/b.h", '#include "proto/a.h"\n#include "daemon/base/c.h"\n')
        write("daemon/engine/e.h", '#include "daemon/base/b.h"\n')
        if check(root):
            return [f"a clean tree was refused: {check(root)}"]
        write("daemon/base/up.h", '#include "daemon/engine/e.h"\n')
        found = check(root)
        if len(found) != 1 or "daemon/base/up.h" not in found[0]:
            return [f"an upward include was not caught as expected: {found}"]
    return []


def main():
    if sys.argv[1:] == ["--self-test"]:
        problems = self_test()
    elif len(sys.argv) == 2:
        problems = check(sys.argv[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print("OK: no upward include")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
