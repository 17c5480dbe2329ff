"""Refuses an #include that breaks the layers of DESIGN.md (run by the build: target check_layers).

Contract
- Expects: a source root holding src/<layer>/..., include/symmflow/<layer>/... and tools/symmflow.
- Guarantees: exit 0 when every quoted #include of a file of layer L names a header of L itself or
  of a layer above L in LAYERS (core first); the command-line tool (tools/symmflow) includes only
  the front door (symmflow/symmflow.hpp, symmflow/api/...) and its own files. Otherwise exit 1 and
  one line per offending include: `file:line: <layer> may not include <header> (layer <L2>) ...`.
- Refuses: nothing silently: a quoted include it cannot place in a layer is allowed only when it
  resolves beside the including file (a private header of the same folder).
Usage: python3 scripts/check_layers.py [ROOT] [--stamp FILE]
"""
import pathlib
import re
import sys

# Note [layers]: the order of DESIGN.md; each layer depends only on the layers before it. The CUDA
# parts live in the folder of their layer (runtime/cuda, kernels/cuda, exec/cuda) and obey it.
LAYERS = ["core", "schema", "ops", "runtime", "kernels", "ir", "passes", "exec", "api"]
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h"}


def layer_of_header(header: str):
    parts = header.split("/")
    if parts[0] == "symmflow":
        if len(parts) == 2:
            return "api" if parts[1] == "symmflow.hpp" else None
        return parts[1] if parts[1] in LAYERS else None
    return parts[0] if parts[0] in LAYERS else None


def layer_of_file(root: pathlib.Path, path: pathlib.Path):
    rel = path.relative_to(root).parts
    if rel[0] == "src" and len(rel) > 2 and rel[1] in LAYERS:
        return rel[1]
    if rel[:2] == ("include", "symmflow"):
        if len(rel) == 3:
            return "api"
        return rel[2] if rel[2] in LAYERS else None
    if rel[:2] == ("tools", "symmflow"):
        return "tools"
    return None


def check_file(root: pathlib.Path, path: pathlib.Path, layer: str):
    errors = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        m = INCLUDE_RE.match(line)
        if not m:
            continue
        header = m.group(1)
        target = layer_of_header(header)
        where = f"{path.relative_to(root)}:{lineno}"
        if layer == "tools":
            if target == "api" or (path.parent / header).exists():
                continue
            errors.append(f"{where}: the symmflow tool may include only the front door "
                          f"(symmflow/symmflow.hpp) and its own files, not \"{header}\"")
            continue
        if target is None:
            if (path.parent / header).exists():
                continue
            errors.append(f"{where}: \"{header}\" is in no layer (DESIGN.md layers: "
                          f"{', '.join(LAYERS)})")
            continue
        if LAYERS.index(target) > LAYERS.index(layer):
            errors.append(f"{where}: layer {layer} may not include \"{header}\" (layer {target} "
                          f"is below it; allowed: {', '.join(LAYERS[:LAYERS.index(layer) + 1])})")
    return errors


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    stamp = None
    if "--stamp" in argv:
        stamp = argv[argv.index("--stamp") + 1]
        args = [a for a in args if a != stamp]
    root = pathlib.Path(args[0] if args else ".").resolve()
    errors = []
    checked = 0
    for top in ("src", "include", "tools/symmflow"):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            layer = layer_of_file(root, path)
            if layer is None:
                continue
            checked += 1
            errors.extend(check_file(root, path, layer))
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"check_layers: {len(errors)} include(s) break the layers of DESIGN.md "
              f"({checked} files checked)", file=sys.stderr)
        return 1
    if stamp:
        pathlib.Path(stamp).write_text(f"{checked} files\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
