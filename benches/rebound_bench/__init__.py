"""The bench suite: Rebound side by side with nginx and a bare hyper server (scripts/bench).

  cli        the command line and the order of the scenarios
  context    one run: options, raw directory, links, the servers it makes, results
  servers    the servers under test (Rebound, nginx, hyper-ref) and services (Redis, moto)
  scenarios  one module per scenario (side, startup, zipf, redis and fleet, create,
             callgrind, tls, abuse, conns)
  report     the markdown report
  tools      wrk, oha, h2load, callgrind, nginx, openssl, redis, the CPU cap (cgroup v1),
             /proc and perf; every output parser is a pure function tested in tests/
"""
