#!/usr/bin/env bash
# Runs a command, checks its exit code, and checks its combined output with FileCheck.
# Usage: expect.sh FILECHECK CHECK_FILE EXIT_CODE -- command args...
set -u
filecheck=$1 check_file=$2 want=$3
shift 4
out=$("$@" 2>&1)
got=$?
if [[ $got -ne $want ]]; then
  printf 'exit code %s, expected %s; output:\n%s\n' "$got" "$want" "$out"
  exit 1
fi
printf '%s\n' "$out" | "$filecheck" --dump-input=fail "$check_file"
