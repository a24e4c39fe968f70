# Sourced by launch/titan-train, launch/titan-launch and launch/bench-trainer (not run alone).
# OpenMP threads that wait spin ~300k rounds by default before they sleep: on a host shared
# with other work a spinning thread holds the core its peer with work needs (the debug model
# at 2 threads with one busy process beside it: 2,800 tok/s at the default, 8,600-9,200 at
# 30k, 13,400 passive; quiet: 23,400 / 23,200-24,200 / 19,300). 30k costs nothing on a quiet
# host. libgomp reads it when it loads, so the launchers set it before the binary starts; a
# caller's OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
[ -n "${OMP_WAIT_POLICY:-}" ] || export GOMP_SPINCOUNT="${GOMP_SPINCOUNT:-30000}"
