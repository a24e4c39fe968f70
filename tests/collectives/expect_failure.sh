#!/usr/bin/env bash
# Runs a command that must fail: asserts a non-zero exit, output matching a regex, and an
# end within a time limit. Usage: expect_failure.sh <max seconds> <regex> <command...>
# Used by tests/collectives/mpi_tests.cmake for the timeout / dead-peer tests.
set -u
max="$1"; regex="$2"; shift 2
start=$(date +%s)
out="$(timeout -k 5 "$((max + 30))" "$@" 2>&1)"
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out" | tail -n 40
echo "expect_failure: exit code $rc after ${elapsed}s"
if [ "$rc" -eq 0 ]; then echo "FAIL: the command succeeded"; exit 1; fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "FAIL: the command hung"; exit 1; fi
if [ "$elapsed" -gt "$max" ]; then echo "FAIL: took ${elapsed}s > ${max}s"; exit 1; fi
if ! grep -Eq -- "$regex" <<<"$out"; then echo "FAIL: no line matches: $regex"; exit 1; fi
echo "PASS"
