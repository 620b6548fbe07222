"""valgrind's callgrind: instructions per request, the repeatable figure."""

from __future__ import annotations

import os
import subprocess
from typing import Iterable

# The inclusive cost of this function is Rebound's request path: each connection's task.
# Since 2026-12-06 (the PROXY protocol) the task is `serve_guarded`'s future; builds before
# it name `serve`'s, and a comparison measures both.
REQUEST_PATH = "rebound_edge::conn::Edge::serve_guarded::{{closure}}"
REQUEST_PATHS = [REQUEST_PATH, "rebound_edge::conn::Edge::serve::{{closure}}"]


# Rebound's parts, each named by the functions (substrings of `callgrind_annotate`'s lines;
# ` [` keeps a function's own line, not the lines of code inlined from elsewhere) whose
# inclusive count is the part's. Indented parts are inside the part above them. Read off
# a dump of the release build, 2026-12-06 (issue 43); a function renamed since reads 0.
PARTS: list[tuple[str, list[str]]] = [
    ("request path: each connection's task", [p + " [" for p in REQUEST_PATHS]),
    ("- reading the socket (hyper's read, the edge's guard)", ["hyper::proto::h1::io::Buffered<T,B>::poll_read_from_io ["]),
    ("- parsing the head (hyper, httparse, the URI, the header map)",
     ["<hyper::proto::h1::role::Server as hyper::proto::h1::Http1Transaction>::parse ["]),
    ("- the edge's Host check with the service inside it", ["edge/src/host.rs:<T as hyper::service::http::HttpService<B1>>::call"]),
    ("- - Host validation", ["rebound_edge::host::is_valid_host ["]),
    ("- - the redirect service", ["rebound_proxy::server::Redirects as hyper::service::service::Service<http::request::Request<"
                                  "hyper::body::incoming::Incoming>>>::call ["]),
    ("- - - routing by domain", ["rebound_proxy::domains::DomainRoutes::route ["]),
    ("- - - the code resolved from memory (L1, expiry, password)", ["rebound_proxy::path::RedirectPath::resolve_from_memory ["]),
    ("- - - - L1", ["rebound_proxy::l1::L1::get ["]),
    ("- - - the bot verdict (without breakdowns)", ["rebound_proxy::visitor::BotPatterns::classify ["]),
    ("- - - the click's capture (the bot verdict, the breakdowns)", ["rebound_proxy::server::RedirectAnswers::click ["]),
    ("- - - the clock", ["<rebound_core::time::SystemClock as rebound_core::time::Clock>::now_millis ["]),
    ("- - - the answer (its headers)", ["rebound_proxy::server::RedirectAnswers::reply ["]),
    # Trees before 2026-12-07d chose the target and built the answer in `redirect_by_rules`.
    ("- - - - a link's rules: the target chosen (older trees: and the answer built)",
     ["rebound_proxy::server::RedirectAnswers::rules_decide [", "rebound_proxy::server::RedirectAnswers::redirect_by_rules ["]),
    ("- writing the head (hyper)", ["hyper::proto::h1::conn::Conn<I,B,T>::write_head ["]),
    ("- flushing it to the socket", ["hyper::proto::h1::io::Buffered<T,B>::poll_flush ["]),
    ("- dropping the request (its header map)", ["core::ptr::drop_in_place<http::request::Parts> ["]),
    ("waking up: parking, epoll, timers (the redirect threads)", ["tokio::runtime::scheduler::current_thread::Context::park ["]),
    ("the other runtime's workers (click shipper, watches, /metrics)", ["tokio::runtime::scheduler::multi_thread::worker::run ["]),
    ("- the click shipper", ["rebound_proxy::clicks::shipper::run_click_shipper::{{closure}} ["]),
    ("- /metrics scrapes (the bench's lag samples)", ["prometheus::encoder::text::TextEncoder::encode_impl ["]),
    ("the blocking pool (click writes to the store)", ["tokio::runtime::blocking::pool::Inner::run ["]),
]


def wrapper(outfile: str) -> list[str]:
    """The command prefix that runs a server under callgrind, one dump file per process
    (`outfile`.PID, then .PID.1 ... for each `callgrind_control -d`)."""
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={outfile}.%p"]


def zero(pid: int) -> None:
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, stdout=subprocess.DEVNULL)


def dump(pid: int) -> None:
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, stdout=subprocess.DEVNULL)


def parse_total(lines: Iterable[str]) -> int:
    """The instructions of a callgrind dump: its `summary:` (or `totals:`) line, the
    largest if there are several."""
    total = 0
    for line in lines:
        if line.startswith("summary:") or line.startswith("totals:"):
            total = max(total, int(line.split()[1]))
    return total


def dump_files(directory: str, prefix: str) -> list[str]:
    """The first dumps (`.1`, the one `callgrind_control -d` wrote) of the files named
    `prefix`.PID in `directory`, sorted."""
    return sorted(f for f in os.listdir(directory) if f.startswith(prefix) and f.endswith(".1"))


def dumps_total(directory: str, prefix: str) -> tuple[int, list[str]]:
    """The largest total over the dumps of `prefix` in `directory`, and the dumps."""
    dumps = dump_files(directory, prefix)
    total = 0
    for d in dumps:
        with open(os.path.join(directory, d)) as f:
            total = max(total, parse_total(f))
    return total, dumps


def parse_annotate_inclusive(text: str, function: str = REQUEST_PATH) -> int:
    """The largest inclusive count on the lines of `callgrind_annotate --inclusive=yes`
    output that name `function` (0 when none does; a function that ran no instruction in
    the stretch, such as the click writes of a short one, is listed with `.`)."""
    counts = (line.split()[0].replace(",", "") for line in text.splitlines() if function in line)
    return max((int(c) for c in counts if c.isdigit()), default=0)


def request_path(annotated: str) -> int:
    """The request path's inclusive count in `callgrind_annotate --inclusive=yes` output,
    whichever name its function has in the build measured."""
    return max(parse_annotate_inclusive(annotated, f) for f in REQUEST_PATHS)


def annotate(path: str) -> str:
    """`callgrind_annotate --inclusive=yes` of a dump: every function's inclusive count.
    Run from `/`: in a checkout it finds some of a function's source files under their
    relative paths and lists the function once per spelling, splitting its count (the redirect
    service read 2,752 instead of 3,187, L1 74 instead of 147; 2026-12-07d). Without the
    annotated sources: only the functions' lines are read."""
    return subprocess.run(["callgrind_annotate", "--inclusive=yes", "--auto=no", "--threshold=100",
                           os.path.abspath(path)], capture_output=True, text=True, cwd="/").stdout


def annotate_inclusive(path: str, function: str = REQUEST_PATH) -> int:
    return parse_annotate_inclusive(annotate(path), function)


def parts(annotated: str) -> dict[str, int]:
    """Where Rebound's instructions go, by part (`PARTS`): each part's count is the largest
    inclusive count of the functions that name it (the outermost of them), so parts that
    nest (the response inside the request path) overlap, and none is summed twice."""
    return {part: max((parse_annotate_inclusive(annotated, f) for f in functions), default=0)
            for part, functions in PARTS}
