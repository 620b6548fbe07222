//! The click stream's Kinesis (moto's, at `REBOUND_TEST_KINESIS_URL`), read back.

use aws_sdk_kinesis::types::ShardIteratorType;

/// A client of the test services' Kinesis.
pub async fn kinesis() -> aws_sdk_kinesis::Client {
    let url = crate::env::env_or_panic("REBOUND_TEST_KINESIS_URL");
    aws_sdk_kinesis::Client::new(&rebound_store::testing::local_aws_config(&url).await)
}

/// Every record of `stream`, read from the start of each shard: its partition key and its
/// data as text.
pub async fn read_stream(client: &aws_sdk_kinesis::Client, stream: &str) -> Vec<(String, String)> {
    let mut records = Vec::new();
    let shards = client.list_shards().stream_name(stream).send().await.unwrap();
    for shard in shards.shards() {
        let mut iterator = client
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(shard.shard_id())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap()
            .shard_iterator
            .unwrap();
        loop {
            let out = client.get_records().shard_iterator(&iterator).send().await.unwrap();
            for r in out.records() {
                let data = String::from_utf8(r.data().as_ref().to_vec()).unwrap();
                records.push((r.partition_key().unwrap_or_default().to_owned(), data));
            }
            match out.next_shard_iterator() {
                Some(next) if !out.records().is_empty() => iterator = next.to_owned(),
                _ => break,
            }
        }
    }
    records
}
