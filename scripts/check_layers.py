"""Refuses an #include that breaks the layers of DESIGN.md (run by the build: target check_layers).

Contract
- Expects: a source root holding src/<layer>/..., include/symmflow/<layer>/... and tools/symmflow.
- Guarantees: exit 0 when every quoted #include of a file of layer L names a header of L itself or
  of a layer L depends on (the declared dependencies, `--deps L:A,B ...`, as src/CMakeLists.txt
  declares them, closed transitively; without --deps, every layer above L in LAYERS); the
  command-line tool (tools/symmflow) includes only the front door (symmflow/symmflow.hpp,
  symmflow/api/...) and its own files. Otherwise exit 1 and one line per offending include:
  `file:line: layer <L> may not include "<header>" (layer <L2>; allowed: ...)`.
- Refuses: nothing silently: a quoted include it cannot place in a layer is allowed only when it
  resolves beside the including file (a private header of the same folder).
Usage: python3 scripts/check_layers.py [ROOT] [--stamp FILE] [--deps core: schema:core ...]
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


def allowed_layers(deps):
    """Each layer with itself and its transitive dependencies; linear order without a table."""
    if not deps:
        return {l: set(LAYERS[:i + 1]) for i, l in enumerate(LAYERS)}
    allowed = {}
    for layer in LAYERS:  # declared in dependency order, so each dependency is closed already
        closed = {layer}
        for d in deps.get(layer, []):
            if d not in allowed:
                raise SystemExit(f"check_layers: layer {layer} depends on {d}, declared after it")
            closed |= allowed[d]
        allowed[layer] = closed
    return allowed


def check_file(root: pathlib.Path, path: pathlib.Path, layer: str, allowed):
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
        if target not in allowed[layer]:
            names = sorted(allowed[layer], key=LAYERS.index)
            errors.append(f"{where}: layer {layer} may not include \"{header}\" (layer {target}; "
                          f"allowed: {', '.join(names)})")
    return errors


def parse_args(argv):
    root, stamp, deps, mode = ".", None, {}, None
    for a in argv[1:]:
        if a in ("--stamp", "--deps"):
            mode = a
        elif mode == "--stamp":
            stamp, mode = a, None
        elif mode == "--deps":
            layer, _, rest = a.partition(":")
            if layer not in LAYERS:
                raise SystemExit(f"check_layers: unknown layer '{layer}' in --deps")
            deps[layer] = [d for d in rest.split(",") if d]
        else:
            root = a
    return pathlib.Path(root).resolve(), stamp, deps


def main(argv):
    root, stamp, deps = parse_args(argv)
    allowed = allowed_layers(deps)
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
            errors.extend(check_file(root, path, layer, allowed))
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
