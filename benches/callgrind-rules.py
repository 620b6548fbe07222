#!/usr/bin/env python3
"""Where a link's rules spend a redirect's instructions: per-redirect inclusive costs of the
functions (and of the code inlined into them) a rule set runs, for callgrind outputs side by
side.

    benches/callgrind-rules.py OUT_A REDIRECTS_A [OUT_B REDIRECTS_B ...]

OUT is a callgrind output of the bench's callgrind scenario run with `--link-rules 5`
(benches/results/raw/*/callgrind.out.rebound*.1), REDIRECTS the redirects of its measured
stretch (the bench's table). A row whose key ends in "(inlined)" sums the lines of that
source file inlined into the function, callees included (callgrind_annotate --inclusive=yes).
Trees before 2026-12-07d chose the target and built the answer in `redirect_by_rules`; later
ones choose it in `rules_decide` and build the answer with a link's own (`redirect`).
"""
import os
import re
import sys

# The bench's reading of a dump (from `/`, so that no function's count is split).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rebound_bench.tools.callgrind import annotate  # noqa: E402

# Each row sums the keys it lists: a function's whole cost, `fn:NAME` (wherever callgrind
# files the function), or the lines of a source file inlined into a function,
# `FILE:NAME (inlined)`.
DECIDE = ["rebound_proxy::server::RedirectAnswers::redirect_by_rules", "rebound_proxy::server::RedirectAnswers::rules_decide"]
ROWS = [
    ("redirect_by_rules (older trees, the answer included) or rules_decide, inclusive", [f"fn:{f}" for f in DECIDE]),
    ("L1::rules (the compiled rules found)", ["fn:rebound_proxy::l1::L1::rules"]),
    ("RuleSet::choose, when called", ["fn:rebound_core::rules::RuleSet::choose"]),
    ("targeting.rs inlined (the visitor, the Accept-Language reading remembered)", [f"targeting.rs:{f} (inlined)" for f in DECIDE]),
    ("rules.rs inlined (RuleSet::choose)", [f"rules.rs:{f} (inlined)" for f in DECIDE]),
    ("the Accept-Language reading remembered, when called (targeting::language_bits)", ["fn:rebound_proxy::targeting::language_bits"]),
    ("RuleSet::preferred_in, when called", ["fn:rebound_core::rules::RuleSet::preferred_in"]),
    ("the location built (push_location)", ["fn:rebound_core::decision::push_location"]),
    ("the location checked (HeaderValue::from_maybe_shared, when called)", ["fn:http::header::value::HeaderValue::from_maybe_shared"]),
    ("the client's address (RedirectAnswers::client, every caller)", ["fn:rebound_proxy::server::RedirectAnswers::client"]),
    ("the capture (RedirectAnswers::click)", ["fn:rebound_proxy::server::RedirectAnswers::click"]),
    ("the answer (RedirectAnswers::reply)", ["fn:rebound_proxy::server::RedirectAnswers::reply"]),
    ("the breakdowns' label of the rule (dimensions::write_num, the counter)", ["fn:rebound_core::dimensions::write_num"]),
]


def matches(key: str, wanted: str) -> bool:
    if wanted.startswith("fn:"):
        return not key.endswith(" (inlined)") and key.endswith(":" + wanted[3:])
    return key.endswith(wanted)


LINE = re.compile(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*?)( \[.*\])?$")


def load(path: str) -> dict[str, int]:
    costs: dict[str, int] = {}
    for line in annotate(path).splitlines():
        m = LINE.match(line)
        if m:
            key = m.group(2) + ("" if m.group(3) else " (inlined)")
            costs[key] = costs.get(key, 0) + int(m.group(1).replace(",", ""))
    return costs


def main() -> None:
    paths, counts = sys.argv[1::2], [int(n.replace(",", "")) for n in sys.argv[2::2]]
    if not paths or len(paths) != len(counts):
        sys.exit(__doc__)
    loaded = [load(p) for p in paths]
    print("| part | " + " | ".join(paths) + " |")
    print("| --- |" + " --- |" * len(paths))
    for name, keys in ROWS:
        cells = [f"{sum(c for k, c in d.items() if any(matches(k, key) for key in keys)) / n:,.0f}"
                 for d, n in zip(loaded, counts)]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
