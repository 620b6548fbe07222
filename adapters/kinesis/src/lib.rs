//! The click stream on Amazon Kinesis Data Streams: each click event is one record, a JSON
//! object ([`encode_event`]; its fields are documented in docs/analytics.md, "The click
//! stream") with the link's code as partition key, put with `PutRecords` at most once: the
//! client makes one attempt per call (the SDK's retries are off), and a record the stream
//! refuses is not sent again. What is not put is counted as lost.

use aws_sdk_kinesis::client::Waiters;
use aws_sdk_kinesis::config::retry::RetryConfig;
use aws_sdk_kinesis::config::timeout::TimeoutConfig;
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, StreamMode, StreamModeDetails};
use aws_sdk_kinesis::Client;
use rebound_core::UnixMillis;
use rebound_store::click_stream::{ClickEvent, ClickStreamSink, StreamPut};
use rebound_store::StoreError;
use std::time::Duration;

/// Kinesis's limits on one `PutRecords`: records, and bytes of data and partition keys.
pub const MAX_RECORDS: usize = 500;
pub const MAX_CALL_BYTES: usize = 5 * 1024 * 1024;
/// The longest a call may take before its records count as lost.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// A failed call as `Unavailable`, the SDK's error kept whole: its own text is only "service
/// error" or "dispatch failure", what Kinesis or the connection said is among its causes.
fn sdk_err<E: std::error::Error + Send + Sync + 'static>(e: E) -> StoreError {
    StoreError::unavailable("Kinesis", e)
}

/// The record of `event`: one JSON object, every field present (`null` for a dimension that
/// is switched off, or a campaign parameter the query did not carry), and a newline: Firehose
/// writes records to S3 back to back, and so they land as JSON lines, one event a line.
pub fn encode_event(event: &ClickEvent) -> Vec<u8> {
    /// The record's fields, in the order they are written (by name, as they always were).
    /// Serialized straight from borrowed values: building a `serde_json::Value` first cost
    /// about 18,000 instructions an event under callgrind, most of the stream's own work.
    #[derive(serde::Serialize)]
    struct Line<'a> {
        bot: bool,
        browser: Option<&'a str>,
        code: &'a str,
        country: Option<&'a str>,
        device: Option<&'a str>,
        domain: &'a str,
        os: Option<&'a str>,
        referrer: Option<&'a str>,
        /// Which of the link's rules chose the target (`default`, `N`, `N/V`); null for a
        /// link without rules.
        rule: Option<&'a str>,
        ts: UnixMillis,
        utm_campaign: Option<&'a str>,
        utm_medium: Option<&'a str>,
        utm_source: Option<&'a str>,
        version: u64,
    }
    let d = &event.dimensions;
    let agent = d.agent.as_ref();
    let campaign = d.campaign.as_deref();
    let rule = d.rule.map(|r| r.label());
    let line = Line {
        bot: event.bot,
        browser: agent.map(|a| a.browser.as_str()),
        code: &event.code,
        country: d.country.as_ref().map(|c| c.as_str()),
        device: agent.map(|a| a.device.as_str()),
        domain: &event.domain,
        os: agent.map(|a| a.os.as_str()),
        referrer: d.referrer.as_ref().map(|r| r.as_str()),
        rule: rule.as_ref().map(|r| r.as_str()),
        ts: event.at,
        utm_campaign: campaign.and_then(|c| c.campaign.as_ref()).map(|v| v.as_str()),
        utm_medium: campaign.and_then(|c| c.medium.as_ref()).map(|v| v.as_str()),
        utm_source: campaign.and_then(|c| c.source.as_ref()).map(|v| v.as_str()),
        version: event.version,
    };
    let mut bytes = Vec::with_capacity(320);
    // Borrowed strings and numbers: writing them to a Vec cannot fail.
    serde_json::to_writer(&mut bytes, &line).expect("a click event serializes");
    bytes.push(b'\n');
    bytes
}

/// A client from the standard AWS configuration (region, endpoint, credentials), making one
/// attempt per call: a retried `PutRecords` whose first attempt was taken but not answered
/// would put its records twice.
pub async fn client_from_env() -> Client {
    let conf = aws_config::defaults(aws_config::BehaviorVersion::latest()).load().await;
    client_of(&conf)
}

/// [`client_from_env`]'s client on a configuration of the caller's.
pub fn client_of(conf: &aws_config::SdkConfig) -> Client {
    let conf = aws_sdk_kinesis::config::Builder::from(conf)
        .retry_config(RetryConfig::disabled())
        .timeout_config(TimeoutConfig::builder().operation_timeout(CALL_TIMEOUT).build())
        .build();
    Client::from_conf(conf)
}

/// One Kinesis data stream of click events.
#[derive(Debug, Clone)]
pub struct KinesisClickStream {
    client: Client,
    name: String,
}

impl KinesisClickStream {
    /// The stream named `name`, which must exist (`rebound provision` creates it).
    pub async fn open(client: Client, name: &str) -> Result<KinesisClickStream, StoreError> {
        client
            .describe_stream_summary()
            .stream_name(name)
            .send()
            .await
            .map_err(sdk_err)?;
        Ok(KinesisClickStream {
            client,
            name: name.to_owned(),
        })
    }

    /// Creates the stream (on-demand capacity) when missing, and waits until it is active.
    /// Idempotent. True when it created it.
    pub async fn provision(client: &Client, name: &str) -> Result<bool, StoreError> {
        let exists = client.describe_stream_summary().stream_name(name).send().await;
        let created = match exists {
            Ok(_) => false,
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                let on_demand = StreamModeDetails::builder()
                    .stream_mode(StreamMode::OnDemand)
                    .build()
                    .map_err(|e| StoreError::Internal(format!("a Kinesis stream mode built incomplete: {e}")))?;
                client
                    .create_stream()
                    .stream_name(name)
                    .stream_mode_details(on_demand)
                    .send()
                    .await
                    .map_err(sdk_err)?;
                true
            }
            Err(e) => return Err(sdk_err(e)),
        };
        client
            .wait_until_stream_exists()
            .stream_name(name)
            .wait(Duration::from_secs(300))
            .await
            .map_err(sdk_err)?;
        Ok(created)
    }

    /// Puts `events`, at most [`MAX_RECORDS`] and [`MAX_CALL_BYTES`] per call, each call
    /// once. A call that fails loses its records; an error only when none was put.
    pub async fn put(&self, events: &[ClickEvent]) -> Result<StreamPut, StoreError> {
        let mut done = StreamPut::default();
        let mut first_error = None;
        let records: Vec<Vec<u8>> = events.iter().map(encode_event).collect();
        let mut start = 0;
        while start < records.len() {
            let mut call = Vec::new();
            let mut bytes = 0;
            for (data, event) in records[start..].iter().zip(&events[start..]) {
                let size = data.len() + event.code.len();
                if call.len() == MAX_RECORDS || (!call.is_empty() && bytes + size > MAX_CALL_BYTES) {
                    break;
                }
                bytes += size;
                call.push(
                    PutRecordsRequestEntry::builder()
                        .data(Blob::new(data.as_slice()))
                        .partition_key(&event.code)
                        .build()
                        // A field this code left out: a bug, not an outage.
                        .map_err(|e| StoreError::Internal(format!("a Kinesis record built incomplete: {e}")))?,
                );
            }
            start += call.len();
            let n = call.len() as u64;
            match self
                .client
                .put_records()
                .stream_name(&self.name)
                .set_records(Some(call))
                .send()
                .await
            {
                Ok(out) => {
                    let failed = out.failed_record_count().map_or(0, |f| f.max(0) as u64).min(n);
                    done.sent += n - failed;
                    done.lost += failed;
                }
                Err(e) => {
                    done.lost += n;
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if done.sent == 0 => Err(sdk_err(e)),
            _ => Ok(done),
        }
    }
}

/// A stream opened on first use, so a data plane starts (and keeps redirecting) while
/// Kinesis is unreachable; its events are lost and counted meanwhile, and the next put
/// tries to open it again.
#[derive(Debug)]
pub struct LazyClickStream {
    client: Client,
    name: String,
    stream: tokio::sync::OnceCell<KinesisClickStream>,
}

impl LazyClickStream {
    pub fn new(client: Client, name: impl Into<String>) -> LazyClickStream {
        LazyClickStream {
            client,
            name: name.into(),
            stream: tokio::sync::OnceCell::new(),
        }
    }

    /// The stream, opening it if this is the first successful use.
    pub async fn get(&self) -> Result<&KinesisClickStream, StoreError> {
        self.stream
            .get_or_try_init(|| KinesisClickStream::open(self.client.clone(), &self.name))
            .await
    }
}

#[async_trait::async_trait]
impl ClickStreamSink for LazyClickStream {
    async fn put(&self, events: &[ClickEvent]) -> Result<StreamPut, StoreError> {
        self.get().await?.put(events).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::dimensions::{
        AgentFamilies, Campaign, CampaignValue, Country, DeviceClass, Dimensions, Family, Label, Referrer,
    };

    fn event(code: &str, bot: bool, dimensions: Dimensions) -> ClickEvent {
        ClickEvent {
            at: 1_765_000_000_123,
            code: code.into(),
            domain: "sho.rt".into(),
            version: 3,
            bot,
            dimensions,
        }
    }

    fn full() -> Dimensions {
        Dimensions {
            country: Some(Country::from_code(b"fr")),
            referrer: Some(Referrer::Host(Label::truncated("news.ycombinator.com"))),
            agent: Some(AgentFamilies {
                device: DeviceClass::Mobile,
                browser: Family::truncated("Chrome Mobile"),
                os: Family::truncated("Android"),
            }),
            campaign: Some(Box::new(Campaign {
                source: Some(CampaignValue::truncated("newsletter")),
                medium: None,
                campaign: Some(CampaignValue::truncated("spring \"sale\"")),
            })),
            rule: Some(rebound_core::rules::Decided { rule: 2, variant: 1 }),
        }
    }

    #[test]
    fn an_event_is_one_json_object_with_every_field_named() {
        let wire = String::from_utf8(encode_event(&event("abc", false, full()))).unwrap();
        assert_eq!(
            wire,
            r#"{"bot":false,"browser":"Chrome Mobile","code":"abc","country":"FR","device":"mobile","domain":"sho.rt","os":"Android","referrer":"news.ycombinator.com","rule":"2/1","ts":1765000000123,"utm_campaign":"spring \"sale\"","utm_medium":null,"utm_source":"newsletter","version":3}"#.to_owned() + "\n"
        );
        // Dimensions switched off are null, never left out: a table's columns stay put.
        let bare: serde_json::Value =
            serde_json::from_slice(&encode_event(&event("abc", true, Dimensions::default()))).unwrap();
        assert_eq!(bare.as_object().unwrap().len(), 14);
        assert_eq!(bare["bot"], true);
        for field in ["country", "referrer", "device", "browser", "os", "utm_source", "rule"] {
            assert!(bare[field].is_null(), "{field}");
        }
    }

    async fn client() -> Client {
        client_of(
            &rebound_store::testing::local_aws_config(&rebound_store::testing::endpoint("REBOUND_TEST_KINESIS_URL"))
                .await,
        )
    }

    fn unique(prefix: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("{prefix}{nanos}")
    }

    /// Every record of `name`, read from the start of each shard, its data as JSON.
    async fn read_back(client: &Client, name: &str) -> Vec<(String, serde_json::Value)> {
        rebound_test_support::stream::read_stream(client, name)
            .await
            .into_iter()
            .map(|(key, data)| (key, serde_json::from_str(&data).unwrap()))
            .collect()
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_KINESIS_URL (the test services): scripts/test starts them and runs it"]
    async fn provision_put_in_calls_of_500_and_read_back() {
        let client = client().await;
        let name = unique("clicks-");
        assert!(KinesisClickStream::provision(&client, &name).await.unwrap());
        assert!(
            !KinesisClickStream::provision(&client, &name).await.unwrap(),
            "idempotent"
        );
        let stream = LazyClickStream::new(client.clone(), name.clone());
        // 1,201 events: three calls (500, 500, 201).
        let events: Vec<ClickEvent> = (0..1_201)
            .map(|i| event(&format!("c{}", i % 7), i % 3 == 0, full()))
            .collect();
        assert_eq!(stream.put(&events).await.unwrap(), StreamPut { sent: 1_201, lost: 0 });
        let records = read_back(&client, &name).await;
        assert_eq!(records.len(), 1_201);
        for (key, value) in &records {
            assert_eq!(
                value["code"].as_str(),
                Some(key.as_str()),
                "the partition key is the code"
            );
            assert_eq!(value["country"], "FR");
        }
        let bots = records.iter().filter(|(_, v)| v["bot"] == true).count();
        assert_eq!(bots, 401);
    }

    #[tokio::test]
    #[ignore = "needs REBOUND_TEST_KINESIS_URL (the test services): scripts/test starts them and runs it"]
    async fn a_missing_stream_loses_the_events_and_is_opened_once_it_exists() {
        let client = client().await;
        let name = unique("late-");
        let stream = LazyClickStream::new(client.clone(), name.clone());
        let events = [event("abc", false, Dimensions::default())];
        let err = stream.put(&events).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Unavailable { what: "Kinesis", .. }),
            "{err:?}"
        );
        KinesisClickStream::provision(&client, &name).await.unwrap();
        assert_eq!(stream.put(&events).await.unwrap(), StreamPut { sent: 1, lost: 0 });
        assert_eq!(read_back(&client, &name).await.len(), 1);
    }
}
