"""The tools the suite drives: load generators (wrk, oha, h2load), callgrind, nginx,
openssl, redis-server, the CPU cap (cgroup v1), and what /proc and perf say of processes.

Every tool's output is parsed by a pure function of its text (parse_*), tested on saved
outputs in tests/fixtures/."""
