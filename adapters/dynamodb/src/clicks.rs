//! The click rollups ([`RollupStore`]): each batch one transaction of its marker in
//! `batches` and an `ADD` per code and day.
//!
//! Each region slot adds to its own items (docs/regions.md): slot 0 to the item whose sort
//! key is the day (the items a fleet of one region always had), slot `n` to the item
//! [`SLOT_ITEMS`]` + day · 16 + n`. A read sums a day's items of every slot. A global
//! table settles concurrent writes to one item by last writer wins, which would lose one
//! region's clicks; no two regions write one item.

use crate::item::{get_n, n, opt_n, s, Item};
use crate::store::{cancelled_conditions, sdk_err, unbuilt};
use crate::DynamoStore;
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use rebound_core::generated::REGION_SLOTS;
use rebound_core::Day;
use rebound_store::{BatchOutcome, ClickBatch, Clicks, RollupStore, StoreError, MAX_BATCH_ADDS};

/// Where the sort keys of the other slots' items start: above every day number.
const SLOT_ITEMS: i64 = 1 << 40;

/// The sort key of `slot`'s item for `day`.
fn rollup_key(day: Day, slot: u8) -> i64 {
    match slot {
        0 => i64::from(day.0),
        n => SLOT_ITEMS + i64::from(day.0) * i64::from(REGION_SLOTS) + i64::from(n),
    }
}

/// The day of a rollup item's sort key, whichever slot wrote it.
fn rollup_day(key: i64) -> Option<Day> {
    let day = match key >= SLOT_ITEMS {
        false => key,
        true => (key - SLOT_ITEMS) / i64::from(REGION_SLOTS),
    };
    i32::try_from(day).ok().map(Day)
}

/// How long an applied batch id is remembered (redelivery after that is not expected).
const BATCH_RETENTION_SECS: i64 = 14 * 86_400;

#[async_trait]
impl RollupStore for DynamoStore {
    async fn apply_clicks(&self, batch: &ClickBatch) -> Result<BatchOutcome, StoreError> {
        if batch.adds.len() > MAX_BATCH_ADDS {
            return Err(StoreError::Corrupt(format!(
                "a batch holds at most {MAX_BATCH_ADDS} adds"
            )));
        }
        let now_secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let marker = Put::builder()
            .table_name(self.table("batches"))
            .item("id", s(&batch.id))
            .item("purge_at", n(now_secs + BATCH_RETENTION_SECS))
            .condition_expression("attribute_not_exists(#id)")
            .expression_attribute_names("#id", "id")
            .build()
            .map_err(unbuilt)?;
        let mut tx = self
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(marker).build());
        for add in &batch.adds {
            let update = Update::builder()
                .table_name(self.table("rollups"))
                .key("code", s(&add.code))
                .key("day", n(rollup_key(add.day, self.rollup_slot)))
                .expression_attribute_names("#clicks", "clicks")
                .expression_attribute_values(":n", n(add.clicks));
            // Bots apart, in an attribute of their own (absent on items of people alone).
            let update = match add.bot_clicks {
                0 => update.update_expression("ADD #clicks :n"),
                bots => update
                    .update_expression("ADD #clicks :n, #bots :b")
                    .expression_attribute_names("#bots", "bot_clicks")
                    .expression_attribute_values(":b", n(bots)),
            }
            .build()
            .map_err(unbuilt)?;
            tx = tx.transact_items(TransactWriteItem::builder().update(update).build());
        }
        match tx.send().await {
            Ok(_) => Ok(BatchOutcome::Applied),
            Err(e) => match cancelled_conditions(&e) {
                Some(failed) if failed.first() == Some(&true) => Ok(BatchOutcome::AlreadyApplied),
                _ => Err(sdk_err(e)),
            },
        }
    }

    async fn read_clicks(&self, code: &str, from: Day, to: Day) -> Result<Vec<(Day, Clicks)>, StoreError> {
        // Slot 0's items from `from` to every other slot's last item of `to`: one query,
        // the slot-0 items of days after `to` on the way left out.
        let mut days = std::collections::BTreeMap::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .client
                .query()
                .table_name(self.table("rollups"))
                .key_condition_expression("#code = :code AND #day BETWEEN :from AND :to")
                .expression_attribute_names("#code", "code")
                .expression_attribute_names("#day", "day")
                .expression_attribute_values(":code", s(code))
                .expression_attribute_values(":from", n(rollup_key(from, 0)))
                .expression_attribute_values(":to", n(rollup_key(to, REGION_SLOTS - 1)))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(sdk_err)?;
            for item in out.items() {
                // A count never added to reads 0: bots' items before bots were counted
                // have no `bot_clicks`, and moto, whose concurrent transactions are not
                // atomic, once left an item of the keys alone under two consumers.
                let clicks = Clicks::new(
                    opt_n(item, "clicks")?.unwrap_or(0),
                    opt_n(item, "bot_clicks")?.unwrap_or(0),
                );
                let key: i64 = get_n(item, "day")?;
                let day = rollup_day(key).ok_or_else(|| StoreError::Corrupt(format!("rollup key {key}")))?;
                if !clicks.is_zero() && (from..=to).contains(&day) {
                    *days.entry(day).or_insert(Clicks::default()) += clicks;
                }
            }
            match out.last_evaluated_key() {
                Some(k) => start = Some(k.clone()),
                None => return Ok(days.into_iter().collect()),
            }
        }
    }

    fn breakdowns(&self) -> Option<&dyn rebound_store::BreakdownStore> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::tests::fresh_store;
    use rebound_store::ClickAdd;

    #[test]
    fn each_slot_adds_to_its_own_item_and_a_read_finds_its_day() {
        let (from, to) = (Day(20_000), Day(20_010));
        let mut keys = std::collections::BTreeSet::new();
        for day in [Day(0), from, Day(20_005), to, Day(2_000_000)] {
            for slot in 0..REGION_SLOTS {
                let key = rollup_key(day, slot);
                assert_eq!(rollup_day(key), Some(day), "day {day:?} slot {slot}");
                assert!(keys.insert(key), "one item per day and slot");
                // A read's one range holds every slot's item of its days.
                let inside = (from..=to).contains(&day);
                assert_eq!(
                    (rollup_key(from, 0)..=rollup_key(to, REGION_SLOTS - 1)).contains(&key) && inside,
                    inside,
                    "day {day:?} slot {slot}"
                );
            }
        }
        // Slot 0 keeps the items a store made by a fleet of one region has.
        assert_eq!(rollup_key(Day(20_000), 0), 20_000);
    }

    fn batch(id: &str, adds: &[(&str, i32, u64, u64)]) -> ClickBatch {
        ClickBatch {
            id: id.into(),
            adds: adds
                .iter()
                .map(|(code, day, clicks, bot_clicks)| ClickAdd {
                    code: (*code).into(),
                    day: Day(*day),
                    clicks: *clicks,
                    bot_clicks: *bot_clicks,
                })
                .collect(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
    async fn regions_add_to_their_own_items_and_a_read_sums_them() {
        let home = fresh_store().await;
        let far = DynamoStore::new(home.client.clone(), home.prefix.clone()).with_rollup_slot(5);
        home.apply_clicks(&batch("h1", &[("x", 100, 3, 0), ("x", 101, 1, 0), ("y", 100, 9, 0)]))
            .await
            .unwrap();
        // Bots in one region's item: added to the other's people.
        far.apply_clicks(&batch("f1", &[("x", 100, 4, 2), ("x", 99, 2, 0), ("x", 102, 8, 0)]))
            .await
            .unwrap();
        for store in [&home, &far] {
            assert_eq!(
                store.read_clicks("x", Day(100), Day(101)).await.unwrap(),
                vec![(Day(100), Clicks::new(7, 2)), (Day(101), Clicks::people(1))]
            );
            assert_eq!(
                store.read_clicks("x", Day(99), Day(102)).await.unwrap(),
                vec![
                    (Day(99), Clicks::people(2)),
                    (Day(100), Clicks::new(7, 2)),
                    (Day(101), Clicks::people(1)),
                    (Day(102), Clicks::people(8))
                ]
            );
        }
        // Two items for (x, day 100): neither region's add replaced the other's.
        let items = home
            .client
            .query()
            .table_name(home.table("rollups"))
            .key_condition_expression("#code = :code")
            .expression_attribute_names("#code", "code")
            .expression_attribute_values(":code", s("x"))
            .send()
            .await
            .unwrap();
        let day_100: Vec<u64> = items
            .items()
            .iter()
            .filter(|i| get_n::<i64>(i, "day").ok().and_then(rollup_day) == Some(Day(100)))
            .map(|i| get_n(i, "clicks").unwrap())
            .collect();
        assert_eq!(day_100, [3, 4]);
    }
}
