"""Exits 0 when every `name==version` line of a requirements file is installed at that version.

Usage: python3 scripts/check-requirements.py FILE   (install-deps.sh asks before calling pip)
"""
import importlib.metadata
import sys


def main() -> int:
    missing = []
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            name, _, version = line.partition("==")
            try:
                have = importlib.metadata.version(name.strip())
            except importlib.metadata.PackageNotFoundError:
                have = None
            # PEP 440: a pin without a local label matches any local label ("2.13.0+cpu").
            if have is None or (version and have.split("+", 1)[0] != version.strip()):
                missing.append(f"{line} (have {have})")
    for m in missing:
        print(f"check-requirements: missing {m}", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
