#!/usr/bin/env python3
"""Where a link's rules spend a redirect's instructions: per-redirect inclusive costs of the
functions (and of the code inlined into `redirect_by_rules`) a rule set runs, for callgrind
outputs side by side.

    benches/callgrind-rules.py OUT_A REDIRECTS_A [OUT_B REDIRECTS_B ...]

OUT is a callgrind output of the bench's callgrind scenario run with `--link-rules 5`
(benches/results/raw/*/callgrind.out.rebound*.1), REDIRECTS the redirects of its measured
stretch (the bench's table). A row whose key ends in "(inlined)" sums the lines of that
source file inlined into the function, callees included (callgrind_annotate --inclusive=yes).
"""
import re
import subprocess
import sys

ROWS = [
    ("redirect_by_rules, inclusive", "server.rs:rebound_proxy::server::RedirectAnswers::redirect_by_rules"),
    ("L1::rules", "l1.rs:rebound_proxy::l1::L1::rules"),
    ("the agent's digest (BotPatterns::agent_digest)", "visitor.rs:rebound_proxy::visitor::BotPatterns::agent_digest"),
    ("SipHash of the split (inlined)", "sip.rs:rebound_proxy::server::RedirectAnswers::redirect_by_rules (inlined)"),
    ("SipHash write (called)", "sip.rs:<siphasher::sip::Hasher<S> as core::hash::Hasher>::write"),
    ("targeting.rs inlined (the visitor)", "targeting.rs:rebound_proxy::server::RedirectAnswers::redirect_by_rules (inlined)"),
    ("rules.rs inlined (RuleSet::choose)", "rules.rs:rebound_proxy::server::RedirectAnswers::redirect_by_rules (inlined)"),
    ("dimensions.rs inlined (UTF-8 checks of the country and OS)", "dimensions.rs:rebound_proxy::server::RedirectAnswers::redirect_by_rules (inlined)"),
    ("the link's own target found (memchr)", "memchr.rs:rebound_proxy::server::RedirectAnswers::redirect_by_rules (inlined)"),
    ("the client's address (RedirectAnswers::client, every caller)", "server.rs:rebound_proxy::server::RedirectAnswers::client"),
    ("RuleSet::choose (called)", "rules.rs:rebound_core::rules::RuleSet::choose"),
    ("RuleSet::preferred_in (the languages)", "rules.rs:rebound_core::rules::RuleSet::preferred_in"),
    ("the Accept-Language reading remembered (targeting::language_bits)", "targeting.rs:rebound_proxy::targeting::language_bits"),
    ("the capture (RedirectAnswers::click)", "server.rs:rebound_proxy::server::RedirectAnswers::click"),
]

LINE = re.compile(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*?)( \[.*\])?$")


def load(path: str) -> dict[str, int]:
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    costs: dict[str, int] = {}
    for line in out.splitlines():
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
    for name, key in ROWS:
        cells = [f"{sum(c for k, c in d.items() if k.endswith(key)) / n:,.0f}" for d, n in zip(loaded, counts)]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
