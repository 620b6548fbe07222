# Runs the ClickHouse SQL of docs/analytics.md ("The click stream") on chDB (ClickHouse in
# process) over records read back from the stream, one JSON line each: the tables, the
# materialized view (the S3Queue table becomes a Memory table: no S3 here) and both queries.
# Usage: CHDB_PATH=<where chdb is installed> python3 clickhouse_check.py docs/analytics.md events.jsonl
import os, re, sys
sys.path.insert(0, os.environ.get("CHDB_PATH", ""))
from chdb import session
doc = open(sys.argv[1]).read()
ch = doc[doc.index("ClickHouse: a `MergeTree`"):]
blocks = re.findall(r"```sql\n(.*?)```", ch, re.S)
statements = [s.strip() for b in blocks for s in b.split(";") if s.strip()]
sess = session.Session()
sess.query("CREATE DATABASE IF NOT EXISTS t; USE t")
for st in statements:
    body = "\n".join(l for l in st.splitlines() if not l.strip().startswith("--"))
    if "ENGINE = S3Queue" in body:
        # No S3 here: the same columns on a Memory table, filled from the stream's records.
        body = re.sub(r"ENGINE = S3Queue\(.*?\)\s*SETTINGS mode = 'unordered'", "ENGINE = Memory", body, flags=re.S)
    print("--", body.splitlines()[0][:80])
    r = sess.query(body.replace("rebound_clicks", "t.rebound_clicks"), "PrettyCompact")
    if body.startswith("CREATE MATERIALIZED VIEW"):
        sess.query("INSERT INTO t.rebound_clicks_queue SELECT * FROM file('" + sys.argv[2] + "', 'JSONEachRow')")
        print(sess.query("SELECT count(), countIf(bot), min(ts), max(ts), countIf(utm_medium IS NULL) FROM t.rebound_clicks", "PrettyCompact"))
    if body.startswith("SELECT"):
        print(r)
        print(sess.query(body.replace("rebound_clicks", "t.rebound_clicks").replace("'sho.rt'", "'s.example'").replace("'spring'", "'open'"), "PrettyCompact"))
