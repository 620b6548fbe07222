//! Helpers for tests against local AWS-compatible servers (moto, dynalite).

/// An AWS configuration for a local endpoint with dummy credentials.
pub async fn local_aws_config(endpoint: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_credential_types::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .load()
        .await
}

/// The endpoint named by `variable`, which the test scripts set.
pub fn endpoint(variable: &str) -> String {
    std::env::var(variable)
        .unwrap_or_else(|_| panic!("{variable} is not set: run scripts/test, which starts the test servers"))
}
