//! The breakdowns ([`BreakdownStore`]) in the table `breakdowns`: one item per link,
//! dimension, UTC day and region slot, whose attributes `=<value>` hold each value's
//! clicks, beside `held` (how many values it holds) and `ver` (bumped by every write).
//!
//! The sort key `<dimension>#<day + 2³¹, 10 digits>#<slot, 2 digits>` puts a dimension's
//! days in order, each day's slots together: a read of one dimension over a range of days
//! is one query. Each region slot writes its own items, as the rollups do (docs/regions.md):
//! a global table settles two regions' writes to one item by last writer wins.
//!
//! A link's day keeps its first [`rebound_store::breakdowns::VALUES_PER_LINK_DAY`] values
//! of a dimension per slot, the rest under [`rebound_store::breakdowns::OTHER`]. Keeping
//! that bound needs the values an item holds, so a write reads its items (strongly
//! consistent), then writes them in one transaction with the batch's marker, each item on
//! condition that its `ver` is still the one read; a writer that lost the race (another
//! consumer wrote the item in between) reads again and retries.
//!
//! A transaction holds at most 100 actions, so a batch is written in parts of at most
//! [`ITEMS_PER_PART`] items, each part with a marker of its own (the batch's id, then
//! `<id>#1`, `<id>#2`, …): the split depends only on the batch, so a batch delivered again
//! after a part failed writes only the parts not written before, each at most once.

use crate::item::{n, s, Item};
use crate::store::{sdk_err, unbuilt};
use crate::DynamoStore;
use async_trait::async_trait;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, Put, TransactWriteItem, Update};
use rebound_core::generated::REGION_SLOTS;
use rebound_core::Day;
use rebound_store::breakdowns::{bounded_value, ranked};
use rebound_store::{BatchOutcome, BreakdownStore, Dimension, DimensionBatch, StoreError, ValueClicks};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Items written in one transaction: DynamoDB's 100 actions, less the marker.
const ITEMS_PER_PART: usize = 99;
/// Values added to one item in one update, at most: 100 keep its expression near 1.5 KB,
/// well under DynamoDB's 4 KB.
const VALUES_PER_UPDATE: usize = 100;
/// Writes of one part before giving up while other consumers keep winning its items (the
/// message is then received again later: nothing is lost).
const ATTEMPTS: u32 = 16;
/// What starts the attribute of a value (the item's own attributes never do).
const VALUE: &str = "=";
/// How long an applied batch id is remembered, as the click batches' are.
const BATCH_RETENTION_SECS: i64 = 14 * 86_400;

/// The sort key of `slot`'s item of `dimension` on `day`.
fn item_key(dimension: Dimension, day: Day, slot: u8) -> String {
    format!(
        "{}#{:010}#{:02}",
        dimension.as_str(),
        i64::from(day.0) + (1 << 31),
        slot
    )
}

/// The items of one part: each item's key, and the clicks to add by value in the order of
/// the batch (the first to arrive is the first kept).
type Part = Vec<((String, String), Vec<(String, u64)>)>;

/// `batch` cut into parts, each at most [`ITEMS_PER_PART`] items, no item twice in a part,
/// no more than [`VALUES_PER_UPDATE`] values to one item at once. Only the batch decides it.
fn parts(batch: &DimensionBatch, slot: u8) -> Vec<Part> {
    // Each item's adds, in the order the items first appear; a value repeated, summed.
    let mut order: Vec<(String, String)> = Vec::new();
    let mut items: HashMap<(String, String), Vec<(String, u64)>> = HashMap::new();
    for add in &batch.adds {
        let key = (add.code.clone(), item_key(add.dimension, add.day, slot));
        let values = items.entry(key.clone()).or_insert_with(|| {
            order.push(key);
            Vec::new()
        });
        match values.iter_mut().find(|(v, _)| *v == add.value) {
            Some((_, clicks)) => *clicks += add.clicks,
            None => values.push((add.value.clone(), add.clicks)),
        }
    }
    let mut parts: Vec<Part> = vec![Vec::new()];
    for key in order {
        let values = items.remove(&key).unwrap_or_default();
        for chunk in values.chunks(VALUES_PER_UPDATE) {
            let current = parts.last_mut().expect("never empty");
            if current.len() == ITEMS_PER_PART || current.iter().any(|(k, _)| *k == key) {
                parts.push(Vec::new());
            }
            parts
                .last_mut()
                .expect("never empty")
                .push((key.clone(), chunk.to_vec()));
        }
    }
    parts
}

/// What an item held when read: its values and version (`None`: no item yet).
#[derive(Default)]
struct Held {
    values: HashSet<String>,
    ver: Option<u64>,
}

/// How a part's write ended.
enum Written {
    Applied,
    AlreadyApplied,
    /// Another writer changed one of its items since the read.
    Raced,
}

impl DynamoStore {
    /// The items of `keys` as they are now (strongly consistent).
    async fn held(&self, keys: &[(String, String)]) -> Result<HashMap<(String, String), Held>, StoreError> {
        let table = self.table("breakdowns");
        let mut held = HashMap::new();
        let mut wanted = KeysAndAttributes::builder().consistent_read(true);
        for (code, key) in keys {
            wanted = wanted.keys(HashMap::from([
                ("code".to_owned(), s(code)),
                ("key".to_owned(), s(key)),
            ]));
        }
        let mut request = Some(wanted.build().map_err(unbuilt)?);
        while let Some(keys) = request.take() {
            let out = self
                .client
                .batch_get_item()
                .request_items(&table, keys)
                .send()
                .await
                .map_err(sdk_err)?;
            for item in out.responses().and_then(|r| r.get(&table)).into_iter().flatten() {
                let (code, key) = (crate::item::get_s(item, "code")?, crate::item::get_s(item, "key")?);
                held.insert(
                    (code, key),
                    Held {
                        values: item
                            .keys()
                            .filter_map(|k| k.strip_prefix(VALUE))
                            .map(str::to_owned)
                            .collect(),
                        ver: crate::item::opt_n(item, "ver")?,
                    },
                );
            }
            request = out
                .unprocessed_keys()
                .and_then(|u| u.get(&table))
                .filter(|k| !k.keys().is_empty())
                .cloned();
        }
        Ok(held)
    }

    /// What the items of `part` hold now.
    async fn read_part(&self, part: &Part) -> Result<HashMap<(String, String), Held>, StoreError> {
        let keys: Vec<(String, String)> = part.iter().map(|(k, _)| k.clone()).collect();
        match keys.is_empty() {
            true => Ok(HashMap::new()),
            false => self.held(&keys).await,
        }
    }

    /// Writes `part` with its marker `id`, on condition that its items are as `held` says.
    async fn write_part(
        &self,
        id: &str,
        part: &Part,
        mut held: HashMap<(String, String), Held>,
    ) -> Result<Written, StoreError> {
        let now_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let marker = Put::builder()
            .table_name(self.table("batches"))
            .item("id", s(id))
            .item("purge_at", n(now_secs + BATCH_RETENTION_SECS))
            .condition_expression("attribute_not_exists(#id)")
            .expression_attribute_names("#id", "id")
            .build()
            .map_err(unbuilt)?;
        let mut tx = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(marker).build());
        for ((code, key), adds) in part {
            let item = held.remove(&(code.clone(), key.clone())).unwrap_or_default();
            let (mut values, ver) = (item.values, item.ver);
            let before = values.len();
            let dimension = key
                .split('#')
                .next()
                .and_then(Dimension::parse)
                .ok_or_else(|| StoreError::Internal(format!("breakdown item key {key}")))?;
            // Each value as the bound has it count, in the order they came.
            let mut counted: BTreeMap<String, u64> = BTreeMap::new();
            for (value, clicks) in adds {
                let kept = bounded_value(dimension, value, values.contains(value), values.len()).to_owned();
                values.insert(kept.clone());
                *counted.entry(kept).or_default() += clicks;
            }
            let mut update = Update::builder()
                .table_name(self.table("breakdowns"))
                .key("code", s(code))
                .key("key", s(key))
                .expression_attribute_names("#held", "held")
                .expression_attribute_names("#ver", "ver")
                .expression_attribute_values(":held", n(values.len() - before))
                .expression_attribute_values(":one", n(1));
            let mut adds = Vec::with_capacity(counted.len() + 2);
            for (i, (value, clicks)) in counted.into_iter().enumerate() {
                adds.push(format!("#v{i} :c{i}"));
                update = update
                    .expression_attribute_names(format!("#v{i}"), format!("{VALUE}{value}"))
                    .expression_attribute_values(format!(":c{i}"), n(clicks));
            }
            adds.extend(["#held :held".to_owned(), "#ver :one".to_owned()]);
            update = update.update_expression(format!("ADD {}", adds.join(", ")));
            update = match ver {
                None => update.condition_expression("attribute_not_exists(#ver)"),
                Some(ver) => update
                    .condition_expression("#ver = :ver")
                    .expression_attribute_values(":ver", n(ver)),
            };
            tx = tx.transact_items(
                TransactWriteItem::builder()
                    .update(update.build().map_err(unbuilt)?)
                    .build(),
            );
        }
        match tx.send().await {
            Ok(_) => Ok(Written::Applied),
            Err(e) => {
                let Some(TransactWriteItemsError::TransactionCanceledException(c)) = e.as_service_error() else {
                    return Err(sdk_err(e));
                };
                let codes: Vec<Option<&str>> = c.cancellation_reasons().iter().map(|r| r.code()).collect();
                match codes.first() {
                    Some(Some("ConditionalCheckFailed")) => Ok(Written::AlreadyApplied),
                    // An item changed since it was read, or is in another transaction.
                    _ if codes
                        .iter()
                        .any(|c| matches!(c, Some("ConditionalCheckFailed" | "TransactionConflict"))) =>
                    {
                        Ok(Written::Raced)
                    }
                    _ => Err(sdk_err(e)),
                }
            }
        }
    }
}

#[async_trait]
impl BreakdownStore for DynamoStore {
    async fn apply_dimensions(&self, batch: &DimensionBatch) -> Result<BatchOutcome, StoreError> {
        let mut outcome = BatchOutcome::AlreadyApplied;
        for (i, part) in parts(batch, self.rollup_slot).iter().enumerate() {
            let id = match i {
                0 => batch.id.clone(),
                i => format!("{}#{i}", batch.id),
            };
            let mut attempt = 0;
            loop {
                attempt += 1;
                let held = self.read_part(part).await?;
                match self.write_part(&id, part, held).await? {
                    Written::Applied => outcome = BatchOutcome::Applied,
                    Written::AlreadyApplied => {}
                    Written::Raced if attempt < ATTEMPTS => {
                        // Apart from the writer that won, by a little more each time, up to 1 s.
                        let nanos = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| u64::from(d.subsec_nanos()));
                        let jitter = nanos % (10u64 << attempt.min(7));
                        tokio::time::sleep(std::time::Duration::from_millis(jitter)).await;
                        continue;
                    }
                    Written::Raced => {
                        return Err(StoreError::unavailable(
                            "DynamoDB",
                            format!("breakdown items kept changing under batch {id} ({ATTEMPTS} attempts)"),
                        ))
                    }
                }
                break;
            }
        }
        Ok(outcome)
    }

    async fn read_breakdown(
        &self,
        code: &str,
        dimension: Dimension,
        from: Day,
        to: Day,
    ) -> Result<Vec<ValueClicks>, StoreError> {
        let mut totals: HashMap<String, u64> = HashMap::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(self.table("breakdowns"))
                .key_condition_expression("#code = :code AND #key BETWEEN :from AND :to")
                .expression_attribute_names("#code", "code")
                .expression_attribute_names("#key", "key")
                .expression_attribute_values(":code", s(code))
                .expression_attribute_values(":from", s(item_key(dimension, from, 0)))
                .expression_attribute_values(":to", s(item_key(dimension, to, REGION_SLOTS - 1)))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(sdk_err)?;
            for item in out.items() {
                for (name, clicks) in item {
                    let Some(value) = name.strip_prefix(VALUE) else {
                        continue;
                    };
                    let AttributeValue::N(clicks) = clicks else {
                        return Err(StoreError::Corrupt(format!("breakdown value {name} is not a number")));
                    };
                    let clicks: u64 = clicks
                        .parse()
                        .map_err(|_| StoreError::Corrupt(format!("breakdown value {name}: {clicks}")))?;
                    *totals.entry(value.to_owned()).or_default() += clicks;
                }
            }
            match out.last_evaluated_key() {
                Some(k) => start = Some(k.clone()),
                None => return Ok(ranked(totals)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::tests::fresh_store;
    use rebound_store::breakdowns::{OTHER, VALUES_PER_LINK_DAY};
    use rebound_store::DimensionAdd;

    async fn read(store: &DynamoStore, code: &str, dimension: Dimension, from: i32, to: i32) -> Vec<(String, u64)> {
        store
            .read_breakdown(code, dimension, Day(from), Day(to))
            .await
            .unwrap()
            .into_iter()
            .map(|v| (v.value, v.clicks))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
    async fn regions_keep_their_own_items_and_their_own_bound_and_a_read_sums_them() {
        let home = fresh_store().await;
        let far = DynamoStore::new(home.client.clone(), home.prefix.clone()).with_rollup_slot(5);
        let batch = |id: &str, adds: Vec<DimensionAdd>| DimensionBatch { id: id.into(), adds };
        home.apply_dimensions(&batch("h1", vec![add("x", Dimension::Country, 100, "DE", 3)]))
            .await
            .unwrap();
        far.apply_dimensions(&batch(
            "f1",
            vec![
                add("x", Dimension::Country, 100, "DE", 4),
                add("x", Dimension::Country, 101, "JP", 1),
            ],
        ))
        .await
        .unwrap();
        for store in [&home, &far] {
            assert_eq!(
                read(store, "x", Dimension::Country, 100, 101).await,
                vec![("DE".to_owned(), 7), ("JP".to_owned(), 1)]
            );
            assert_eq!(
                read(store, "x", Dimension::Country, 101, 101).await,
                vec![("JP".to_owned(), 1)]
            );
        }
        // Each region's item of a day keeps its own first values: the far one is full,
        // the home one is not.
        let full: Vec<DimensionAdd> = (0..VALUES_PER_LINK_DAY)
            .map(|i| add("y", Dimension::Referrer, 7, &format!("h{i:02}.example"), 1))
            .collect();
        far.apply_dimensions(&batch("f2", full)).await.unwrap();
        far.apply_dimensions(&batch("f3", vec![add("y", Dimension::Referrer, 7, "late.example", 2)]))
            .await
            .unwrap();
        home.apply_dimensions(&batch("h2", vec![add("y", Dimension::Referrer, 7, "late.example", 3)]))
            .await
            .unwrap();
        let day = read(&home, "y", Dimension::Referrer, 7, 7).await;
        assert_eq!(day[0], ("late.example".to_owned(), 3));
        assert_eq!(day[1], (OTHER.to_owned(), 2));
        assert_eq!(day.len(), VALUES_PER_LINK_DAY + 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
    async fn a_write_on_a_stale_read_is_refused_and_a_retry_keeps_the_bound() {
        let store = fresh_store().await;
        let full: Vec<DimensionAdd> = (0..VALUES_PER_LINK_DAY - 1)
            .map(|i| add("st", Dimension::Os, 4, &format!("os{i:02}"), 1))
            .collect();
        store
            .apply_dimensions(&DimensionBatch {
                id: "fill".into(),
                adds: full,
            })
            .await
            .unwrap();
        // Two writers read the item with one place left; the second to write must not
        // take a place the first took meanwhile. (Writers racing for real are not tested
        // here: moto applies concurrent transactions without isolation, and lost two
        // clicks of 240 under four writers, which DynamoDB's serializable transactions
        // do not.)
        let part_of = |id: &str, value: &str| {
            let batch = DimensionBatch {
                id: id.into(),
                adds: vec![add("st", Dimension::Os, 4, value, 1)],
            };
            parts(&batch, 0).remove(0)
        };
        let (a, b) = (part_of("a", "late-a"), part_of("b", "late-b"));
        let (read_a, read_b) = (store.read_part(&a).await.unwrap(), store.read_part(&b).await.unwrap());
        assert!(matches!(
            store.write_part("a", &a, read_a).await.unwrap(),
            Written::Applied
        ));
        assert!(matches!(
            store.write_part("b", &b, read_b).await.unwrap(),
            Written::Raced
        ));
        // The whole apply reads again: `late-b` comes after the bound.
        store
            .apply_dimensions(&DimensionBatch {
                id: "b".into(),
                adds: vec![add("st", Dimension::Os, 4, "late-b", 1)],
            })
            .await
            .unwrap();
        let day = read(&store, "st", Dimension::Os, 4, 4).await;
        assert_eq!(day.len(), VALUES_PER_LINK_DAY + 1);
        assert!(day.contains(&("late-a".to_owned(), 1)));
        assert!(day.contains(&(OTHER.to_owned(), 1)), "{day:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
    async fn a_batch_of_many_parts_applies_once_even_when_delivered_again() {
        let store = fresh_store().await;
        // 120 codes × 3 dimensions: 360 items, four transactions.
        let adds: Vec<DimensionAdd> = (0..120)
            .flat_map(|c| {
                let code = format!("m{c:03}");
                [
                    add(&code, Dimension::Country, 9, "FR", 1),
                    add(&code, Dimension::Device, 9, "mobile", 2),
                    add(&code, Dimension::Os, 9, "Android", 3),
                ]
            })
            .collect();
        let batch = DimensionBatch {
            id: "many".into(),
            adds,
        };
        assert_eq!(parts(&batch, 0).len(), 4);
        assert_eq!(store.apply_dimensions(&batch).await.unwrap(), BatchOutcome::Applied);
        assert_eq!(
            store.apply_dimensions(&batch).await.unwrap(),
            BatchOutcome::AlreadyApplied
        );
        // As a redelivery after the last part failed: only that part is written again.
        store
            .client
            .delete_item()
            .table_name(store.table("batches"))
            .key("id", s("many#3"))
            .send()
            .await
            .unwrap();
        assert_eq!(store.apply_dimensions(&batch).await.unwrap(), BatchOutcome::Applied);
        let first = read(&store, "m000", Dimension::Os, 9, 9).await;
        assert_eq!(first, vec![("Android".to_owned(), 3)], "part 0 once");
        let last = read(&store, "m119", Dimension::Os, 9, 9).await;
        assert_eq!(
            last,
            vec![("Android".to_owned(), 6)],
            "the part whose marker went, twice"
        );
    }

    fn add(code: &str, dimension: Dimension, day: i32, value: &str, clicks: u64) -> DimensionAdd {
        DimensionAdd {
            code: code.into(),
            day: Day(day),
            dimension,
            value: value.into(),
            clicks,
        }
    }

    #[test]
    fn keys_order_a_dimensions_days_with_their_slots_together() {
        let mut keys = Vec::new();
        for day in [-3, 0, 9, 10, 20_000, 20_001] {
            for slot in 0..REGION_SLOTS {
                keys.push((item_key(Dimension::Country, Day(day), slot), (day, slot)));
            }
        }
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(sorted, keys, "string order is (day, slot) order");
        // A read's range holds every slot of its days and nothing of other dimensions or days.
        let (from, to) = (
            item_key(Dimension::Country, Day(9), 0),
            item_key(Dimension::Country, Day(10), REGION_SLOTS - 1),
        );
        let inside: Vec<_> = keys.iter().filter(|(k, _)| (&from..=&to).contains(&k)).collect();
        assert_eq!(inside.len(), 2 * usize::from(REGION_SLOTS));
        assert!(inside.iter().all(|(_, (day, _))| [9, 10].contains(day)));
        let referrer = item_key(Dimension::Referrer, Day(9), 0);
        assert!(!(&from..=&to).contains(&&referrer));
        assert!(
            !(item_key(Dimension::Country, Day(9), 0)..=item_key(Dimension::Country, Day(9), 15)).contains(&item_key(
                Dimension::Os,
                Day(9),
                3
            ))
        );
    }

    #[test]
    fn a_batch_is_cut_into_parts_of_distinct_items_by_the_batch_alone() {
        // 150 codes × 2 dimensions = 300 items; one item with 250 values.
        let mut adds = Vec::new();
        for c in 0..150 {
            adds.push(add(&format!("c{c:03}"), Dimension::Country, 5, "DE", 1));
            adds.push(add(&format!("c{c:03}"), Dimension::Os, 5, "iOS", 1));
        }
        for v in 0..250 {
            adds.push(add("big", Dimension::Referrer, 5, &format!("h{v}.example"), 1));
        }
        adds.push(add("c000", Dimension::Country, 5, "DE", 4));
        let batch = DimensionBatch { id: "b".into(), adds };
        let cut = parts(&batch, 3);
        assert_eq!(cut, parts(&batch, 3), "the same batch, the same parts");
        for part in &cut {
            assert!(!part.is_empty() && part.len() <= ITEMS_PER_PART);
            let keys: HashSet<_> = part.iter().map(|(k, _)| k).collect();
            assert_eq!(keys.len(), part.len(), "no item twice in one transaction");
            assert!(part.iter().all(|(_, values)| values.len() <= VALUES_PER_UPDATE));
            assert!(part.iter().all(|((_, key), _)| key.ends_with("#03")), "slot 3's items");
        }
        let items: usize = cut.iter().map(Vec::len).sum();
        assert_eq!(items, 300 + 3, "the big item in three updates");
        let clicks: u64 = cut.iter().flatten().flat_map(|(_, v)| v).map(|(_, c)| c).sum();
        assert_eq!(clicks, 300 + 250 + 4, "every click in one part");
        let c000: Vec<_> = cut
            .iter()
            .flatten()
            .filter(|((code, key), _)| code == "c000" && key.starts_with("country#"))
            .collect();
        assert_eq!(c000.len(), 1);
        assert_eq!(c000[0].1, vec![("DE".to_owned(), 5)], "a value repeated is summed");
        let empty = DimensionBatch {
            id: "e".into(),
            adds: vec![],
        };
        assert_eq!(
            parts(&empty, 0),
            vec![Vec::new()],
            "a batch of nothing: its marker alone"
        );
    }
}
