#!/bin/sh
# Build time and binary size of `compare` with each parser alone, each from an empty target
# directory (release, 2 jobs on this machine), then deleted. Prints one line per build.
set -e
cd "$(dirname "$0")"
base=${CARGO_TARGET_DIR:-target}/ua-build
for f in none woothee uaparser ua-parser; do
    dir=$base-$f
    rm -rf "$dir"
    if [ "$f" = none ]; then feat="--no-default-features"; else feat="--no-default-features --features $f"; fi
    start=$(date +%s.%N)
    CARGO_TARGET_DIR=$dir cargo build --release --quiet $feat --bin compare
    end=$(date +%s.%N)
    strip -o "$dir/compare.stripped" "$dir/release/compare"
    echo "$f: build $(echo "$end - $start" | bc) s, stripped binary $(stat -c %s "$dir/compare.stripped") bytes"
    rm -rf "$dir"
done
