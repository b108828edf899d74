#!/usr/bin/env python3
"""No upward include in daemon/: every #include of a daemon/ or proto/ header must name a folder
at a lower layer than the including file's, or its own folder. The layers are read from
daemon/README.md (one numbered line per layer, folders in backquotes).

No upward include or import in client/: the layers of client/README.md (folders and Python
modules, paths relative to client/) order its C and C++ includes and its Python imports, the
imports inside functions included, so an import cycle fails; nothing in client/ includes daemon/.

    layering_test.py ROOT          check the tree at ROOT
    layering_test.py --self-test   check that an upward include in a made-up tree is caught
"""
import ast
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


CLIENT_PATH = re.compile(r"`([^`]+)`")
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s+["<]((?:syncd|proto|client|daemon)/[^">]+)[">]', re.M)


def read_client_layers(readme):
    """client/README.md's numbered entries (continued on indented lines): path (relative to
    client/) -> layer."""
    layers = {}
    layer = None
    with open(readme) as f:
        for line in f:
            m = LAYER_LINE.match(line)
            if m:
                layer, text = int(m.group(1)), m.group(2)
            elif layer is not None and line.startswith(" "):
                text = line
            else:
                layer = None
                continue
            for path in CLIENT_PATH.findall(text):
                layers[path] = layer
    return layers


def client_entry(layers, rel):
    """The layer entry holding `rel` (a path relative to client/): a file, or the longest folder."""
    if rel in layers:
        return rel
    folders = [p for p in layers if p.endswith("/") and rel.startswith(p)]
    return max(folders, key=len) if folders else None


def include_entry(inc):
    """The client/README.md entry an #include names, or None when it is no client layer."""
    if inc.startswith("syncd/"):
        return "../proto/include/syncd/"
    if inc.startswith("proto/"):
        return "../proto/"
    if inc.startswith("client/"):
        return inc[len("client/"):]
    return None


def module_file(name, pkg_root):
    """client/-relative file of syncd module `name` (an extension: python/src/), or None."""
    parts = name.split(".")
    if parts[-1] in ("_client", "_c10d"):
        return "python/src/"
    path = "/".join(parts)
    if os.path.isfile(os.path.join(pkg_root, path + ".py")):
        return "python/" + path + ".py"
    if os.path.isdir(os.path.join(pkg_root, path)):
        return "python/" + path + "/__init__.py"
    return None


def imported_files(tree, pkg_root):
    """Files (relative to client/) of the syncd modules a Python module imports, anywhere in it."""
    targets = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # "from P import a": the submodule P.a where there is one, else P itself.
            names = [node.module + "." + a.name if module_file(node.module + "." + a.name, pkg_root) else node.module
                     for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] == "syncd":
                targets.append(module_file(name, pkg_root) or "python/" + name.replace(".", "/") + ".py")
    return targets


def check_client(root):
    client = os.path.join(root, "client")
    readme = os.path.join(client, "README.md")
    if not os.path.exists(readme):
        return ["client/README.md is missing: it gives client/'s layers"]
    layers = read_client_layers(readme)
    if not layers:
        return ["client/README.md lists no layers"]
    problems = []
    for dirpath, _, files in os.walk(client):
        for name in sorted(files):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, client)
            if not name.endswith((".h", ".cc", ".c", ".py")):
                continue
            unit = client_entry(layers, rel)
            if unit is None:
                problems.append(f"client/{rel}: client/README.md gives it no layer")
                continue
            with open(full, errors="replace") as f:
                text = f.read()
            if name.endswith(".py"):
                try:
                    targets = [(t, t) for t in imported_files(ast.parse(text), os.path.join(client, "python"))]
                except SyntaxError as e:
                    problems.append(f"client/{rel}: {e}")
                    continue
            else:
                targets = []
                for inc in ANY_INCLUDE.findall(text):
                    if inc.startswith("daemon/"):
                        problems.append(f"client/{rel} includes {inc}: the client never includes the daemon")
                        continue
                    targets.append((inc, include_entry(inc)))
            for what, target in targets:
                entry = client_entry(layers, target) if target else None
                if entry is None:
                    problems.append(f"client/{rel}: {what} has no layer in client/README.md")
                elif entry != unit and layers[entry] >= layers[unit]:
                    problems.append(f"client/{rel} (layer {layers[unit]}) uses {what} (layer {layers[entry]})")
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
        # client/: a clean tree, then an import cycle hidden inside a function, then a daemon include.
        write("client/README.md", "0. `../proto/include/syncd/`\n1. `src/`\n2. `python/src/`\n3. `python/syncd/a.py`\n"
                                  "4. `python/syncd/b.py`\n5. `python/syncd/__init__.py`\n")
        write("proto/include/syncd/client.h", "")
        write("client/src/c.cc", '#include "syncd/client.h"\n')
        write("client/python/src/m.cc", '#include <syncd/client.h>\n')
        write("client/python/syncd/__init__.py", "from syncd.b import g\n")
        write("client/python/syncd/a.py", "from syncd import _client\n")
        write("client/python/syncd/b.py", "from syncd import a\n")
        if check_client(root):
            return [f"a clean client tree was refused: {check_client(root)}"]
        write("client/python/syncd/a.py", "def f():\n    from syncd.b import g\n")
        found = check_client(root)
        if len(found) != 1 or "client/python/syncd/a.py (layer 3) uses python/syncd/b.py" not in found[0]:
            return [f"an import cycle was not caught as expected: {found}"]
        write("client/python/syncd/a.py", "")
        write("client/src/c.cc", '#include "daemon/base/status.h"\n')
        found = check_client(root)
        if len(found) != 1 or "the client never includes the daemon" not in found[0]:
            return [f"a daemon include in the client was not caught as expected: {found}"]
    return []


def main():
    if sys.argv[1:] == ["--self-test"]:
        problems = self_test()
    elif len(sys.argv) == 2:
        problems = check(sys.argv[1]) + check_client(sys.argv[1])
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
