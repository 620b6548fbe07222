//! The click queue on SQS: proxies send aggregated click batches and breakdown batches
//! with `SendMessageBatch`; the control plane's consumer long-polls, applies each batch to
//! the rollups or the breakdowns and deletes the message only afterwards. A message that fails three times moves to the dead-letter
//! queue `<name>-dlq` (the redrive policy `provision` sets).

use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client;
use rebound_core::Day;
use rebound_store::{
    BreakdownSink, ClickAdd, ClickBatch, ClickInbox, ClickSink, Dimension, DimensionAdd, DimensionBatch, InboxMessage,
    QueuedBatch, StoreError,
};
use std::time::Duration;

/// SQS's limits on one `SendMessageBatch`.
const MAX_ENTRIES: usize = 10;
const MAX_BATCH_BYTES: usize = 256 * 1024;
/// Receives before a message moves to the dead-letter queue.
pub const MAX_RECEIVES: u32 = 3;

/// A failed call as `Unavailable`, the SDK's error kept whole: its own text is only "service
/// error" or "dispatch failure", what SQS or the connection said is among its causes.
fn sdk_err<E: std::error::Error + Send + Sync + 'static>(e: E) -> StoreError {
    StoreError::unavailable("SQS", e)
}

/// The wire form of a batch: `{"id":…,"adds":[[code, day, clicks], …]}`, an add with
/// bots `[code, day, clicks, bot_clicks]`. An add without bots keeps the three-element
/// form a consumer from before bots were counted reads: only bots need a consumer that
/// knows them (upgrade the control planes first: docs/guide.md, "People and bots").
pub fn encode_batch(batch: &ClickBatch) -> String {
    let adds: Vec<serde_json::Value> = batch
        .adds
        .iter()
        .map(|a| match a.bot_clicks {
            0 => serde_json::json!([a.code, a.day.0, a.clicks]),
            bots => serde_json::json!([a.code, a.day.0, a.clicks, bots]),
        })
        .collect();
    serde_json::json!({ "id": batch.id, "adds": adds }).to_string()
}

/// The wire form of a breakdowns' batch: `{"kind":"breakdowns","id":…,"adds":[[code, day,
/// dimension, value, clicks], …]}`. A consumer from before breakdowns refuses the field
/// `kind` and leaves the message to the dead-letter queue, from which it is redriven once
/// the consumers are upgraded (docs/guide.md, "Upgrading").
pub fn encode_breakdowns(batch: &DimensionBatch) -> String {
    let adds: Vec<serde_json::Value> = batch
        .adds
        .iter()
        .map(|a| serde_json::json!([a.code, a.day.0, a.dimension.as_str(), a.value, a.clicks]))
        .collect();
    serde_json::json!({ "kind": BREAKDOWNS, "id": batch.id, "adds": adds }).to_string()
}

/// The `kind` of a breakdowns' message; a message without one is a click batch, as every
/// message before breakdowns was.
const BREAKDOWNS: &str = "breakdowns";

/// Most adds a breakdowns' message may hold (a proxy sends at most 500; a message stays far
/// below SQS's 256 KiB).
pub const MAX_BREAKDOWN_ADDS: usize = 1_000;

/// Reads a message body back into a click batch or a breakdowns' batch.
pub fn decode_message(body: &str) -> Result<QueuedBatch, StoreError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Wire {
        #[serde(default)]
        kind: Option<String>,
        id: String,
        adds: Vec<serde_json::Value>,
    }
    let corrupt = |e: &dyn std::fmt::Display| StoreError::Corrupt(format!("click message: {e}"));
    let wire: Wire = serde_json::from_str(body).map_err(|e| corrupt(&e))?;
    if wire.id.is_empty() {
        return Err(corrupt(&"an empty id"));
    }
    match wire.kind.as_deref() {
        None => decode_clicks(wire.id, wire.adds).map(QueuedBatch::Clicks),
        Some(BREAKDOWNS) => decode_breakdowns(wire.id, wire.adds).map(QueuedBatch::Breakdowns),
        Some(other) => Err(corrupt(&format!("unknown kind {other:?}"))),
    }
}

/// Reads a message body back into a click batch.
pub fn decode_batch(body: &str) -> Result<ClickBatch, StoreError> {
    match decode_message(body)? {
        QueuedBatch::Clicks(batch) => Ok(batch),
        QueuedBatch::Breakdowns(_) => Err(StoreError::Corrupt("click message: a breakdowns' batch".into())),
    }
}

fn decode_clicks(id: String, adds: Vec<serde_json::Value>) -> Result<ClickBatch, StoreError> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum WireAdd {
        People(String, i32, u64),
        WithBots(String, i32, u64, u64),
    }
    if adds.len() > rebound_store::MAX_BATCH_ADDS {
        return Err(StoreError::Corrupt("click message: too many adds".into()));
    }
    let adds = adds
        .into_iter()
        .map(|add| {
            let (code, day, clicks, bot_clicks) = match serde_json::from_value(add) {
                Ok(WireAdd::People(code, day, clicks)) => (code, day, clicks, 0),
                Ok(WireAdd::WithBots(code, day, clicks, bots)) => (code, day, clicks, bots),
                Err(e) => return Err(StoreError::Corrupt(format!("click message: {e}"))),
            };
            Ok(ClickAdd {
                code,
                day: Day(day),
                clicks,
                bot_clicks,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(ClickBatch { id, adds })
}

fn decode_breakdowns(id: String, adds: Vec<serde_json::Value>) -> Result<DimensionBatch, StoreError> {
    if adds.len() > MAX_BREAKDOWN_ADDS {
        return Err(StoreError::Corrupt("breakdowns message: too many adds".into()));
    }
    let adds = adds
        .into_iter()
        .map(|add| {
            let (code, day, dimension, value, clicks): (String, i32, String, String, u64) =
                serde_json::from_value(add).map_err(|e| StoreError::Corrupt(format!("breakdowns message: {e}")))?;
            let dimension = Dimension::parse(&dimension)
                .ok_or_else(|| StoreError::Corrupt(format!("breakdowns message: unknown dimension {dimension:?}")))?;
            Ok(DimensionAdd {
                code,
                day: Day(day),
                dimension,
                value,
                clicks,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(DimensionBatch { id, adds })
}

/// A received message.
#[derive(Debug, Clone)]
pub struct Received {
    pub receipt: String,
    pub body: String,
    /// How many times it has been received, this time included.
    pub receives: u32,
    /// When it was first sent (SQS `SentTimestamp`), in Unix milliseconds.
    pub sent_at: Option<i64>,
}

pub use rebound_store::QueueDepth;

/// One SQS queue of click batches.
#[derive(Debug, Clone)]
pub struct SqsClickQueue {
    client: Client,
    queue_url: String,
}

impl SqsClickQueue {
    /// A client from the standard AWS configuration.
    pub async fn client_from_env() -> Client {
        let conf = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
        Client::new(&conf)
    }

    /// The queue named `name`, which must exist (`rebound provision` creates it).
    pub async fn open(client: Client, name: &str) -> Result<SqsClickQueue, StoreError> {
        let out = client.get_queue_url().queue_name(name).send().await.map_err(sdk_err)?;
        let queue_url = out
            .queue_url()
            .ok_or_else(|| StoreError::unavailable("SQS", format!("queue {name} has no URL")))?
            .to_owned();
        Ok(SqsClickQueue { client, queue_url })
    }

    /// Creates the queue and its dead-letter queue with a redrive policy of three receives,
    /// when missing. Idempotent. Returns the queues it created.
    pub async fn provision(client: &Client, name: &str, visibility_secs: u32) -> Result<Vec<String>, StoreError> {
        let mut created = Vec::new();
        let dlq_name = format!("{name}-dlq");
        let exists = |n: String| {
            let client = client.clone();
            async move { client.get_queue_url().queue_name(n).send().await.is_ok() }
        };
        if !exists(dlq_name.clone()).await {
            client
                .create_queue()
                .queue_name(&dlq_name)
                .send()
                .await
                .map_err(sdk_err)?;
            created.push(dlq_name.clone());
        }
        let dlq = SqsClickQueue::open(client.clone(), &dlq_name).await?;
        let attrs = client
            .get_queue_attributes()
            .queue_url(&dlq.queue_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(sdk_err)?;
        let arn = attrs
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn))
            .ok_or_else(|| StoreError::unavailable("SQS", "the dead-letter queue has no ARN"))?
            .clone();
        if !exists(name.to_owned()).await {
            let redrive =
                serde_json::json!({ "deadLetterTargetArn": arn, "maxReceiveCount": MAX_RECEIVES.to_string() })
                    .to_string();
            client
                .create_queue()
                .queue_name(name)
                .attributes(QueueAttributeName::RedrivePolicy, redrive)
                .attributes(QueueAttributeName::VisibilityTimeout, visibility_secs.to_string())
                .send()
                .await
                .map_err(sdk_err)?;
            created.push(name.to_owned());
        }
        Ok(created)
    }

    /// Sends batches, at most 10 entries and 256 KiB per call.
    pub async fn send(&self, batches: &[ClickBatch]) -> Result<(), StoreError> {
        self.send_bodies(batches.iter().map(encode_batch).collect()).await
    }

    /// Sends breakdowns' batches, as [`SqsClickQueue::send`] does click batches.
    pub async fn send_breakdowns(&self, batches: &[DimensionBatch]) -> Result<(), StoreError> {
        self.send_bodies(batches.iter().map(encode_breakdowns).collect()).await
    }

    async fn send_bodies(&self, bodies: Vec<String>) -> Result<(), StoreError> {
        let mut start = 0;
        while start < bodies.len() {
            let mut end = start;
            let mut bytes = 0;
            while end < bodies.len() && end - start < MAX_ENTRIES && bytes + bodies[end].len() <= MAX_BATCH_BYTES {
                bytes += bodies[end].len();
                end += 1;
            }
            // A single body larger than the limit cannot be sent; batches are far smaller.
            let end = end.max(start + 1);
            let mut req = self.client.send_message_batch().queue_url(&self.queue_url);
            for (i, body) in bodies[start..end].iter().enumerate() {
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .build()
                    // A field this code left out: a bug, not an outage.
                    .map_err(|e| StoreError::Internal(format!("an SQS message built incomplete: {e}")))?;
                req = req.entries(entry);
            }
            let out = req.send().await.map_err(sdk_err)?;
            if !out.failed().is_empty() {
                return Err(StoreError::unavailable(
                    "SQS",
                    format!("{} click messages refused", out.failed().len()),
                ));
            }
            start = end;
        }
        Ok(())
    }

    /// Waits up to `wait` for up to 10 messages, hiding them for `visibility`; their
    /// bodies as sent (the consumer receives them decoded, through [`ClickInbox`]).
    pub async fn receive_raw(&self, wait: Duration, visibility: Duration) -> Result<Vec<Received>, StoreError> {
        let out = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(wait.as_secs().min(20) as i32)
            .visibility_timeout(visibility.as_secs() as i32)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .map_err(sdk_err)?;
        Ok(out
            .messages()
            .iter()
            .filter_map(|m| {
                let receives = m
                    .attributes()
                    .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1);
                let sent_at = m
                    .attributes()
                    .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp))
                    .and_then(|v| v.parse().ok());
                Some(Received {
                    receipt: m.receipt_handle()?.to_owned(),
                    body: m.body().unwrap_or_default().to_owned(),
                    receives,
                    sent_at,
                })
            })
            .collect())
    }

    /// Messages waiting (approximately), for tests and operators.
    pub async fn approximate_depth(&self) -> Result<u64, StoreError> {
        let depth = self.depth().await?;
        Ok(depth.visible + depth.in_flight)
    }

    /// Sends one raw body (tests use it to plant a poison message).
    pub async fn send_raw(&self, body: &str) -> Result<(), StoreError> {
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .send()
            .await
            .map_err(sdk_err)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl ClickInbox for SqsClickQueue {
    async fn receive(&self, wait: Duration, visibility: Duration) -> Result<Vec<InboxMessage>, StoreError> {
        Ok(self
            .receive_raw(wait, visibility)
            .await?
            .into_iter()
            .map(|m| InboxMessage {
                batch: decode_message(&m.body).map_err(|e| e.to_string()),
                last_try: m.receives >= MAX_RECEIVES,
                receipt: m.receipt,
                receives: m.receives,
                sent_at: m.sent_at,
            })
            .collect())
    }

    /// Deletes a message after its batch was applied.
    async fn delete(&self, receipt: &str) -> Result<(), StoreError> {
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(sdk_err)?;
        Ok(())
    }

    /// The queue's message counts, from its attributes.
    async fn depth(&self) -> Result<QueueDepth, StoreError> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
            .send()
            .await
            .map_err(sdk_err)?;
        let get = |k: QueueAttributeName| -> u64 {
            out.attributes()
                .and_then(|a| a.get(&k))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Ok(QueueDepth {
            visible: get(QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
            delayed: get(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        })
    }
}

/// A queue opened on first use, so a proxy starts (and keeps redirecting) while SQS is
/// unreachable; its clicks are dropped and counted meanwhile.
#[derive(Debug)]
pub struct LazyClickQueue {
    client: Client,
    name: String,
    queue: tokio::sync::OnceCell<SqsClickQueue>,
}

impl LazyClickQueue {
    pub fn new(client: Client, name: impl Into<String>) -> LazyClickQueue {
        LazyClickQueue {
            client,
            name: name.into(),
            queue: tokio::sync::OnceCell::new(),
        }
    }

    /// The queue, opening it if this is the first successful use.
    pub async fn get(&self) -> Result<&SqsClickQueue, StoreError> {
        self.queue
            .get_or_try_init(|| SqsClickQueue::open(self.client.clone(), &self.name))
            .await
    }
}

/// Distributed mode: a data plane's click batches go to the queue, for the control plane's
/// consumer.
#[async_trait::async_trait]
impl ClickSink for LazyClickQueue {
    async fn ship(&self, batches: &[ClickBatch]) -> Result<(), StoreError> {
        self.get().await?.send(batches).await
    }
}

/// Distributed mode: a data plane's breakdowns go to the same queue, for the same consumer.
#[async_trait::async_trait]
impl BreakdownSink for LazyClickQueue {
    async fn ship_breakdowns(&self, batches: &[DimensionBatch]) -> Result<(), StoreError> {
        self.get().await?.send_breakdowns(batches).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_and_garbage_is_refused() {
        let add = |code: &str, clicks, bot_clicks| ClickAdd {
            code: code.into(),
            day: Day(20_000),
            clicks,
            bot_clicks,
        };
        let b = ClickBatch {
            id: "b-1".into(),
            adds: vec![add("abc", 7, 0), add("def", 1, 4)],
        };
        let wire = encode_batch(&b);
        assert_eq!(decode_batch(&wire).unwrap(), b);
        // An add without bots in the form a consumer from before bots reads.
        assert_eq!(wire, r#"{"adds":[["abc",20000,7],["def",20000,1,4]],"id":"b-1"}"#);
        for bad in [
            "",
            "{}",
            "not json",
            r#"{"id":"","adds":[]}"#,
            r#"{"id":"x","adds":[["a",1]]}"#,
            r#"{"id":"x","adds":[["a",1,2,3,4]]}"#,
            r#"{"id":"x","adds":[["a",1,-2]]}"#,
            r#"{"id":"x","adds":[],"x":1}"#,
        ] {
            assert!(decode_batch(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn breakdowns_round_trip_and_a_consumer_from_before_refuses_them() {
        let add = |code: &str, dimension, value: &str, clicks| DimensionAdd {
            code: code.into(),
            day: Day(20_001),
            dimension,
            value: value.into(),
            clicks,
        };
        let b = DimensionBatch {
            id: "d-1".into(),
            adds: vec![
                add("abc", Dimension::Country, "DE", 3),
                add("abc", Dimension::UtmCampaign, "spring \"sale\"", 1),
            ],
        };
        let wire = encode_breakdowns(&b);
        assert_eq!(decode_message(&wire).unwrap(), QueuedBatch::Breakdowns(b));
        assert!(decode_batch(&wire).is_err(), "not a click batch");
        // Old messages read as click batches, as before.
        let old = r#"{"adds":[["abc",20000,7]],"id":"b-1"}"#;
        assert!(matches!(decode_message(old).unwrap(), QueuedBatch::Clicks(_)));
        // The decoder of the consumers before breakdowns (83479ed's `decode_batch`): it
        // refuses the message, which then waits in the dead-letter queue for the upgrade.
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Before {
            id: String,
            adds: Vec<(String, i32, u64)>,
        }
        assert!(serde_json::from_str::<Before>(old).is_ok());
        assert!(serde_json::from_str::<Before>(&wire).is_err());
        for bad in [
            r#"{"kind":"breakdowns","id":"x","adds":[["a",1,"country","DE"]]}"#,
            r#"{"kind":"breakdowns","id":"x","adds":[["a",1,"planet","DE",1]]}"#,
            r#"{"kind":"breakdowns","id":"x","adds":[["a",1,"country","DE",-1]]}"#,
            r#"{"kind":"breakdowns","id":"","adds":[]}"#,
            r#"{"kind":"views","id":"x","adds":[]}"#,
        ] {
            assert!(decode_message(bad).is_err(), "{bad}");
        }
    }

    async fn client() -> Client {
        Client::new(
            &rebound_store::testing::local_aws_config(&rebound_store::testing::endpoint("REBOUND_TEST_SQS_URL")).await,
        )
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_SQS_URL (the test services): scripts/test starts them and runs it"]
    async fn provision_send_receive_delete_and_redrive() {
        let client = client().await;
        let name = format!(
            "t{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        assert_eq!(SqsClickQueue::provision(&client, &name, 1).await.unwrap().len(), 2);
        assert!(
            SqsClickQueue::provision(&client, &name, 1).await.unwrap().is_empty(),
            "idempotent"
        );
        let q = SqsClickQueue::open(client.clone(), &name).await.unwrap();
        let batches: Vec<ClickBatch> = (0..25)
            .map(|i| ClickBatch {
                id: format!("b{i}"),
                adds: vec![ClickAdd {
                    code: "abc".into(),
                    day: Day(1),
                    clicks: 1,
                    bot_clicks: 0,
                }],
            })
            .collect();
        q.send(&batches).await.unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..20 {
            for m in q
                .receive(Duration::from_secs(1), Duration::from_secs(30))
                .await
                .unwrap()
            {
                seen.insert(m.batch.unwrap().id().to_owned());
                q.delete(&m.receipt).await.unwrap();
            }
            if seen.len() == 25 {
                break;
            }
        }
        assert_eq!(seen.len(), 25);

        // A message never deleted moves to the dead-letter queue after three receives.
        q.send_raw("poison").await.unwrap();
        let mut receives = 0;
        for _ in 0..20 {
            let got = q.receive(Duration::from_secs(1), Duration::from_secs(1)).await.unwrap();
            for m in &got {
                receives += 1;
                assert!(m.batch.is_err(), "an unreadable body is received as such");
                assert_eq!(m.last_try, receives == 3, "the third receive is its last");
            }
            if got.is_empty() && receives >= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1100)).await;
        }
        assert_eq!(receives, 3);
        let dlq = SqsClickQueue::open(client, &format!("{name}-dlq")).await.unwrap();
        let dead = dlq
            .receive_raw(Duration::from_secs(1), Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].body, "poison");
    }
}
