"""Runs pytest on one test file for CTest; exits 77 (CTest's skip code here) without pytest."""
import sys

try:
    import pytest
except ImportError:
    print("pytest is not installed: skipped (scripts/install-deps.sh installs it)")
    sys.exit(77)

# --durations: the slowest tests of each file in CTest's log, for keeping CI under its limit.
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--durations=5", *sys.argv[1:]]))
