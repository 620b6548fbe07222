//! The click rollups ([`RollupStore`]), in the clicks file with its own writer, and the
//! ids of the batches already applied.

use crate::error::sql_err;
use crate::SqliteStore;
use async_trait::async_trait;
/// foldhash (hashbrown's default): std's SipHash was 7 % of a breakdown batch's instructions
/// (`valgrind --tool=callgrind target/release/examples/breakdown_store sqlite 100 5`).
use hashbrown::{HashMap, HashSet};
use rebound_core::Day;
use rebound_store::breakdowns::{bounded_value, ranked, OTHER};
use rebound_store::{
    BatchOutcome, BreakdownStore, ClickBatch, Clicks, Dimension, DimensionBatch, RollupStore, StoreError, ValueClicks,
};
use rusqlite::{params, TransactionBehavior};

/// How long an applied batch id is remembered, as in the DynamoDB adapter: a redelivery
/// after that is not expected, and the table would otherwise grow by every batch ever
/// written (about 5 a second at the default click pacing).
const BATCH_RETENTION_SECS: i64 = 14 * 86_400;

#[async_trait]
impl RollupStore for SqliteStore {
    async fn apply_clicks(&self, batch: &ClickBatch) -> Result<BatchOutcome, StoreError> {
        let outcomes = self.apply_click_batches(std::slice::from_ref(batch)).await?;
        outcomes
            .into_iter()
            .next()
            .ok_or_else(|| StoreError::Corrupt("no outcome".into()))
    }

    async fn apply_click_batches(&self, batches: &[ClickBatch]) -> Result<Vec<BatchOutcome>, StoreError> {
        let batches = batches.to_vec();
        self.write_clicks(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let mut outcomes = Vec::with_capacity(batches.len());
            {
                let mut mark = tx
                    .prepare_cached(
                        "INSERT INTO applied_batches (id, applied_at) VALUES (?1, strftime('%s','now')) ON CONFLICT DO NOTHING",
                    )
                    .map_err(sql_err)?;
                for batch in &batches {
                    if mark.execute([&batch.id]).map_err(sql_err)? == 0 {
                        outcomes.push(BatchOutcome::AlreadyApplied);
                        continue;
                    }
                    // One statement per batch: far cheaper than a statement per row.
                    let rows = vec!["(?, ?, ?, ?)"; batch.adds.len()].join(", ");
                    let mut add = tx
                        .prepare_cached(&format!(
                            "INSERT INTO rollups (code, day, clicks, bot_clicks) VALUES {rows} \
                             ON CONFLICT (code, day) DO UPDATE SET clicks = clicks + excluded.clicks, \
                             bot_clicks = bot_clicks + excluded.bot_clicks"
                        ))
                        .map_err(sql_err)?;
                    let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(batch.adds.len() * 4);
                    let counts: Vec<(i64, i64)> = batch
                        .adds
                        .iter()
                        .map(|a| (a.clicks as i64, a.bot_clicks as i64))
                        .collect();
                    for (a, (people, bots)) in batch.adds.iter().zip(&counts) {
                        values.push(&a.code);
                        values.push(&a.day.0);
                        values.push(people);
                        values.push(bots);
                    }
                    if !batch.adds.is_empty() {
                        add.execute(values.as_slice()).map_err(sql_err)?;
                    }
                    outcomes.push(BatchOutcome::Applied);
                }
            }
            // Forget the ids past their retention (an index probe when there are none).
            tx.prepare_cached("DELETE FROM applied_batches WHERE applied_at < strftime('%s','now') - ?1")
                .and_then(|mut forget| forget.execute([BATCH_RETENTION_SECS]))
                .map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
            Ok(outcomes)
        })
        .await
    }

    async fn read_clicks(&self, code: &str, from: Day, to: Day) -> Result<Vec<(Day, Clicks)>, StoreError> {
        let code = code.to_owned();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT day, clicks, bot_clicks FROM clicks.rollups \
                     WHERE code = ?1 AND day BETWEEN ?2 AND ?3 AND (clicks > 0 OR bot_clicks > 0) ORDER BY day",
                )
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(params![code, from.0, to.0], |r| {
                    Ok((
                        Day(r.get(0)?),
                        Clicks::new(r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64),
                    ))
                })
                .map_err(sql_err)?;
            rows.collect::<rusqlite::Result<Vec<_>>>().map_err(sql_err)
        })
        .await
    }

    fn breakdowns(&self) -> Option<&dyn BreakdownStore> {
        Some(self)
    }
}

#[async_trait]
impl BreakdownStore for SqliteStore {
    /// One transaction: the batch's mark; how many values each of its links' days holds
    /// already, per dimension (one read per day and 100 links, an index seek per link: the
    /// table's key starts with the code and the day); the values themselves only where the
    /// batch's adds could reach the bound, each add's value bounded against them in memory,
    /// new ones counted as they come; then the adds in a few statements of many rows.
    /// A statement per add (a bound check and an upsert) cost about 30,000 instructions an
    /// add under callgrind (benches/results/2026-12-06e-callgrind-breakdowns.md); reading
    /// every value held, rather than counts, about 35,000 a rollup row more where the day's
    /// rows are held (benches/results/2026-12-07n-sqlite-held-counts.md).
    async fn apply_dimensions(&self, batch: &DimensionBatch) -> Result<BatchOutcome, StoreError> {
        let batch = batch.clone();
        self.write_clicks(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(sql_err)?;
            let marked = tx
                .prepare_cached(
                    "INSERT INTO applied_batches (id, applied_at) VALUES (?1, strftime('%s','now')) ON CONFLICT DO NOTHING",
                )
                .and_then(|mut mark| mark.execute([&batch.id]))
                .map_err(sql_err)?;
            if marked == 0 {
                return Ok(BatchOutcome::AlreadyApplied);
            }
            // The adds of each (code, day, dimension) of the batch.
            type Key<'b> = (&'b str, i32, Dimension);
            let mut adds_of: HashMap<Key, usize> = HashMap::new();
            for a in &batch.adds {
                *adds_of.entry((a.code.as_str(), a.day.0, a.dimension)).or_default() += 1;
            }
            // How many values each holds already: one read per day and 100 codes, an index
            // seek per code, counts only (no value read back: most keys are far from their
            // bound, and reading every value held made the batch's read its largest part).
            let mut held: HashMap<Key, usize> = HashMap::new();
            let mut days: Vec<i32> = adds_of.keys().map(|k| k.1).collect();
            days.sort_unstable();
            days.dedup();
            for day in days {
                let mut codes: Vec<&str> = adds_of.keys().filter(|k| k.1 == day).map(|k| k.0).collect();
                codes.sort_unstable();
                codes.dedup();
                for chunk in codes.chunks(100) {
                    let marks = vec!["?"; chunk.len()].join(", ");
                    let mut read = tx
                        .prepare_cached(&format!(
                            "SELECT code, dimension, count(*) FROM breakdowns WHERE day = ? AND code IN ({marks}) \
                             GROUP BY code, dimension"
                        ))
                        .map_err(sql_err)?;
                    let mut args: Vec<&dyn rusqlite::ToSql> = vec![&day];
                    args.extend(chunk.iter().map(|c| c as &dyn rusqlite::ToSql));
                    let mut rows = read.query(args.as_slice()).map_err(sql_err)?;
                    while let Some(row) = rows.next().map_err(sql_err)? {
                        let (code, dimension) = (
                            row.get_ref(0).and_then(|v| Ok(v.as_str()?)).map_err(sql_err)?,
                            row.get_ref(1).and_then(|v| Ok(v.as_str()?)).map_err(sql_err)?,
                        );
                        let count: i64 = row.get(2).map_err(sql_err)?;
                        let (Some(dimension), Some(code)) =
                            (Dimension::parse(dimension), chunk.iter().find(|c| **c == code))
                        else {
                            continue;
                        };
                        held.insert((*code, day, dimension), count as usize);
                    }
                }
            }
            // The values held by each key whose adds could reach its bound: read whole, and
            // each add bounded against them as it comes (a key that cannot reach it keeps
            // every value, and needs none).
            let mut values: HashMap<Key, HashSet<String>> = HashMap::new();
            for (&key, &n) in &adds_of {
                if held.get(&key).copied().unwrap_or(0) + n < key.2.values_per_day() {
                    continue;
                }
                let mut read = tx
                    .prepare_cached("SELECT value FROM breakdowns WHERE code = ?1 AND day = ?2 AND dimension = ?3")
                    .map_err(sql_err)?;
                let held_values = read
                    .query_map(params![key.0, key.1, key.2.as_str()], |row| row.get::<_, String>(0))
                    .and_then(|rows| rows.collect::<Result<HashSet<String>, _>>())
                    .map_err(sql_err)?;
                values.insert(key, held_values);
            }
            let mut rows: Vec<(&str, i32, &str, String, i64)> = Vec::with_capacity(batch.adds.len());
            // The `(other)` row of each (code, day, dimension): the adds bounded to it merge
            // into one row (a domain's day past its 1,000 links sends hundreds a batch).
            let mut other_row: HashMap<(&str, i32, &str), usize> = HashMap::new();
            for a in &batch.adds {
                let dimension = a.dimension.as_str();
                let value = match values.get_mut(&(a.code.as_str(), a.day.0, a.dimension)) {
                    None => a.value.as_str(),
                    Some(held) => {
                        let value = bounded_value(a.dimension, &a.value, held.contains(&a.value), held.len());
                        if !held.contains(value) {
                            held.insert(value.to_owned());
                        }
                        value
                    }
                };
                if value == OTHER {
                    if let Some(&at) = other_row.get(&(a.code.as_str(), a.day.0, dimension)) {
                        rows[at].4 += a.clicks as i64;
                        continue;
                    }
                    other_row.insert((a.code.as_str(), a.day.0, dimension), rows.len());
                }
                rows.push((a.code.as_str(), a.day.0, dimension, value.to_owned(), a.clicks as i64));
            }
            // 200 rows of 5 values: well under SQLite's 32,766 parameters a statement.
            for chunk in rows.chunks(200) {
                let placeholders = vec!["(?, ?, ?, ?, ?)"; chunk.len()].join(", ");
                let mut add = tx
                    .prepare_cached(&format!(
                        "INSERT INTO breakdowns (code, day, dimension, value, clicks) VALUES {placeholders} \
                         ON CONFLICT (code, day, dimension, value) DO UPDATE SET clicks = clicks + excluded.clicks"
                    ))
                    .map_err(sql_err)?;
                let mut values: Vec<&dyn rusqlite::ToSql> = Vec::with_capacity(chunk.len() * 5);
                for (code, day, dimension, value, clicks) in chunk {
                    values.extend([code as &dyn rusqlite::ToSql, day, dimension, value, clicks]);
                }
                add.execute(values.as_slice()).map_err(sql_err)?;
            }
            tx.commit().map_err(sql_err)?;
            Ok(BatchOutcome::Applied)
        })
        .await
    }

    async fn read_breakdown(
        &self,
        code: &str,
        dimension: Dimension,
        from: Day,
        to: Day,
    ) -> Result<Vec<ValueClicks>, StoreError> {
        let code = code.to_owned();
        self.read(move |conn| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT value, sum(clicks) FROM clicks.breakdowns \
                     WHERE code = ?1 AND dimension = ?2 AND day BETWEEN ?3 AND ?4 GROUP BY value",
                )
                .map_err(sql_err)?;
            let rows = stmt
                .query_map(params![code, dimension.as_str(), from.0, to.0], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
                })
                .map_err(sql_err)?;
            Ok(ranked(rows.collect::<rusqlite::Result<Vec<_>>>().map_err(sql_err)?))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clicks_file;
    use rebound_core::{Link, RedirectKind};
    use rebound_store::{ClickAdd, LinkStore};
    use rusqlite::Connection;

    #[tokio::test]
    async fn applied_batch_ids_are_forgotten_after_their_retention() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("rebound.db")).unwrap();
        let batch = |id: &str| ClickBatch {
            id: id.into(),
            adds: vec![rebound_store::ClickAdd {
                code: "abc".into(),
                day: Day(3),
                clicks: 1,
                bot_clicks: 0,
            }],
        };
        store.apply_clicks(&batch("old")).await.unwrap();
        // Age "old" past the retention; "recent" stays within it.
        store
            .write_clicks(|conn| {
                conn.execute(
                    "UPDATE applied_batches SET applied_at = strftime('%s','now') - ?1 - 1 WHERE id = 'old'",
                    [BATCH_RETENTION_SECS],
                )
                .map_err(sql_err)
            })
            .await
            .unwrap();
        store.apply_clicks(&batch("recent")).await.unwrap();
        let ids: Vec<String> = store
            .write_clicks(|conn| {
                let mut stmt = conn
                    .prepare("SELECT id FROM applied_batches ORDER BY id")
                    .map_err(sql_err)?;
                let ids = stmt.query_map([], |r| r.get(0)).map_err(sql_err)?;
                ids.collect::<rusqlite::Result<Vec<String>>>().map_err(sql_err)
            })
            .await
            .unwrap();
        assert_eq!(ids, vec!["recent".to_owned()]);
        // A redelivery within the retention still adds nothing.
        assert_eq!(
            store.apply_clicks(&batch("recent")).await.unwrap(),
            BatchOutcome::AlreadyApplied
        );
        assert_eq!(
            store.read_clicks("abc", Day(3), Day(3)).await.unwrap(),
            vec![(Day(3), Clicks::people(2))]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rollup_write_in_progress_does_not_hold_up_link_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rebound.db");
        let store = SqliteStore::open(&path).unwrap();
        let batch = ClickBatch {
            id: "b1".into(),
            adds: vec![ClickAdd {
                code: "busy1".into(),
                day: rebound_core::Day(7),
                clicks: 4,
                bot_clicks: 0,
            }],
        };
        store.apply_clicks(&batch).await.unwrap();
        // Another writer holds the clicks file's write lock, as a long rollup write does.
        let other = Connection::open(clicks_file(&path)).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let link = Link::new_active(
            "busy1".into(),
            "https://e.com/".into(),
            RedirectKind::Found,
            false,
            1,
            "k".into(),
            None,
        );
        tokio::time::timeout(std::time::Duration::from_secs(3), store.insert_link(&link, None))
            .await
            .expect("a link write does not wait for the rollups")
            .unwrap();
        assert_eq!(
            store
                .read_clicks("busy1", rebound_core::Day(7), rebound_core::Day(7))
                .await
                .unwrap(),
            vec![(rebound_core::Day(7), Clicks::people(4))],
            "stats read while the rollups are being written"
        );
        other.execute_batch("COMMIT").unwrap();
        drop(store);
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store
                .read_clicks("busy1", rebound_core::Day(7), rebound_core::Day(7))
                .await
                .unwrap(),
            vec![(rebound_core::Day(7), Clicks::people(4))],
            "the rollups survive reopening"
        );
    }
}
