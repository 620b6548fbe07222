//! [`DynamoStore`]: the client, the table names, and how the SDK's errors are read.

use aws_sdk_dynamodb::Client;
use rebound_store::StoreError;

/// The DynamoDB adapter.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    pub(crate) client: Client,
    pub(crate) prefix: String,
    /// The region slot whose click rollups this store adds to (docs/regions.md).
    pub(crate) rollup_slot: u8,
}

/// A failed call as `Unavailable`, the SDK's error kept whole: its own text is only "service
/// error" or "dispatch failure", what DynamoDB or the connection said is among its causes.
pub(crate) fn sdk_err<E: std::error::Error + Send + Sync + 'static>(e: E) -> StoreError {
    StoreError::unavailable("DynamoDB", e)
}

/// A request this code built without a field it requires: a bug, not an outage.
pub(crate) fn unbuilt(e: aws_sdk_dynamodb::error::BuildError) -> StoreError {
    StoreError::Internal(format!("a DynamoDB request built incomplete: {e}"))
}

/// A failed conditional request (`PutItem`, `UpdateItem`, `DeleteItem`): `ConditionFailed`
/// when its condition did not hold (the caller says what that means), else the outage.
pub(crate) fn condition_refused<E, R>(e: aws_sdk_dynamodb::error::SdkError<E, R>) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match e.as_service_error().and_then(|s| s.code()) {
        Some("ConditionalCheckFailedException") => StoreError::ConditionFailed,
        _ => sdk_err(e),
    }
}

/// Which items of a cancelled transaction failed their condition.
pub(crate) fn cancelled_conditions<R>(
    e: &aws_sdk_dynamodb::error::SdkError<
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError,
        R,
    >,
) -> Option<Vec<bool>> {
    match e.as_service_error()? {
        aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c) => {
            Some(
                c.cancellation_reasons()
                    .iter()
                    .map(|r| r.code() == Some("ConditionalCheckFailed"))
                    .collect(),
            )
        }
        _ => None,
    }
}

impl DynamoStore {
    /// A store on `client`, with tables named `<prefix><table>`.
    pub fn new(client: Client, prefix: impl Into<String>) -> DynamoStore {
        DynamoStore {
            client,
            prefix: prefix.into(),
            rollup_slot: 0,
        }
    }

    /// This store with its click rollups added to region slot `slot`'s own items: in a fleet
    /// of several regions over a global table, two regions adding to one item within the
    /// replication lag would lose one region's clicks (last writer wins), so each region
    /// adds to its own items and a read sums them. Slot 0 keeps the items a fleet of one
    /// region always had.
    pub fn with_rollup_slot(mut self, slot: u8) -> DynamoStore {
        self.rollup_slot = slot;
        self
    }

    /// A client from the standard AWS configuration (environment, profile, credential
    /// chain, `AWS_ENDPOINT_URL`), with short timeouts: the redirect path budgets 1 s.
    pub async fn client_from_env() -> Client {
        Client::new(&Self::config_loader().load().await)
    }

    /// [`DynamoStore::client_from_env`] for the replica in `region` (another region's, in a
    /// fleet of several: docs/regions.md), at `endpoint` when given (a DynamoDB-compatible
    /// server) instead of the SDK's endpoint for the region.
    pub async fn client_for(region: &str, endpoint: Option<&str>) -> Client {
        let mut loader = Self::config_loader().region(aws_config::Region::new(region.to_owned()));
        if let Some(endpoint) = endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        Client::new(&loader.load().await)
    }

    fn config_loader() -> aws_config::ConfigLoader {
        let timeouts = aws_config::timeout::TimeoutConfig::builder()
            .connect_timeout(std::time::Duration::from_millis(500))
            .operation_attempt_timeout(std::time::Duration::from_secs(2))
            .build();
        aws_config::defaults(aws_config::BehaviorVersion::latest()).timeout_config(timeouts)
    }

    /// The full name of `name` (`links`, `breakdowns`, …): the prefix and the table.
    pub fn table(&self, name: &str) -> String {
        format!("{}{}", self.prefix, name)
    }

    /// The client it calls DynamoDB with (tools and tests read tables through it).
    pub fn client(&self) -> &Client {
        &self.client
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::tests::fresh_store;

    /// dynalite parses expressions like real DynamoDB (reserved words included), but has
    /// neither transactions nor TTL: it runs the rest of the contract.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNALITE_URL (the test services): scripts/test starts them and runs it"]
    async fn expressions_pass_a_strict_dynamodb_engine() {
        let conf =
            rebound_store::testing::local_aws_config(&rebound_store::testing::endpoint("REBOUND_TEST_DYNALITE_URL"))
                .await;
        let prefix = format!(
            "s{}_",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let store = DynamoStore::new(Client::new(&conf), prefix);
        assert_eq!(store.create_tables(false).await.unwrap().len(), 9);
        rebound_store::conformance::run_without_transactions(&store).await;
        rebound_store::certs::contract(&store).await;
        rebound_store::domains::contract(&store).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
    async fn dynamodb_store_passes_the_contract() {
        let store = fresh_store().await;
        rebound_store::conformance::run_all(&store).await;
        rebound_store::conformance::breakdowns_apply_once_and_stay_bounded(&store).await;
    }

    /// Loses the first answer that comes back: a 500 in its place, which the SDK retries.
    #[derive(Debug, Default)]
    struct LoseFirstAnswer(std::sync::atomic::AtomicBool);

    impl aws_sdk_dynamodb::config::Intercept for LoseFirstAnswer {
        fn name(&self) -> &'static str {
            "LoseFirstAnswer"
        }

        fn modify_before_deserialization(
            &self,
            context: &mut aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextMut<'_>,
            _: &aws_sdk_dynamodb::config::RuntimeComponents,
            _: &mut aws_sdk_dynamodb::config::ConfigBag,
        ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
            if !self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
                *context.response_mut().status_mut() = 500.try_into()?;
            }
            Ok(())
        }
    }

    /// An insert whose write landed but whose answer was lost is retried by the SDK; the
    /// retry finds the code taken by that very write: the insert succeeds. A rival's equal
    /// link is still refused.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
    async fn an_insert_retried_after_its_write_landed_succeeds() {
        use rebound_store::{LinkReads, LinkStore};
        let plain = fresh_store().await;
        let conf = rebound_store::testing::local_aws_config(&crate::tables::tests::endpoint()).await;
        let losing = aws_sdk_dynamodb::config::Builder::from(&conf)
            .interceptor(LoseFirstAnswer::default())
            .build();
        let store = DynamoStore::new(Client::from_conf(losing), plain.table(""));
        let link = rebound_core::Link::new_active(
            format!("retried{}", plain.table("")),
            "https://example.com/retried".into(),
            rebound_core::RedirectKind::Found,
            false,
            1_000,
            "owner".into(),
            None,
        );
        store.insert_link(&link, None).await.unwrap();
        assert_eq!(plain.get_link(&link.code).await.unwrap(), Some(link.clone()));
        // Another insert of an equal link is a rival's, not a retry.
        assert!(matches!(
            plain.insert_link(&link, None).await,
            Err(StoreError::AlreadyExists)
        ));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore = "needs REBOUND_TEST_DYNAMODB_URL (the test services): scripts/test starts them and runs it"]
    async fn dynamodb_store_keeps_the_certificates_contract() {
        rebound_store::certs::contract(&fresh_store().await).await;
    }
}
