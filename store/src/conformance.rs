//! The contract every store adapter must pass. Each adapter's tests call [`run_all`]
//! (the DynamoDB adapter against a real DynamoDB-API server), so the fake and the real
//! stores cannot drift apart. Each check uses codes and names of its own, so the suite
//! also runs against a store that already holds data.

use crate::*;
use rebound_core::RedirectKind;

fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("{prefix}{:x}{}", nanos, N.fetch_add(1, Ordering::Relaxed))
}

fn link(code: &str, owner: &str, created_at: i64) -> Link {
    Link::new_active(
        code.into(),
        format!("https://example.com/{code}"),
        RedirectKind::Found,
        false,
        created_at,
        owner.into(),
        None,
    )
}

/// Runs every check of the contract.
pub async fn run_all<S: Store + ?Sized>(store: &S) {
    conditional_insert(store).await;
    bulk_insert(store).await;
    idempotency_in_the_same_transaction(store).await;
    versioned_deactivation(store).await;
    propagation_pending_in_the_deactivating_write(store).await;
    versioned_edit_with_its_propagation_pending(store).await;
    versioned_restore_with_its_propagation_pending(store).await;
    propagation_leases_are_exclusive(store).await;
    finishing_a_propagation_is_conditional_on_its_version(store).await;
    listing_newest_first_with_cursor(store).await;
    indexes_by_target_host_and_by_domain(store).await;
    index_of_links_with_rules(store).await;
    bad_cursors(store).await;
    aliases_are_listed_from_the_index(store).await;
    keys(store).await;
    counter_blocks_never_overlap(store).await;
    settings_are_written_once(store).await;
    click_batches_apply_once(store).await;
    audit_log(store).await;
}

/// The checks that need no DynamoDB transaction, for engines without them (dynalite,
/// which is stricter than moto about reserved words in expressions).
pub async fn run_without_transactions<S: Store + ?Sized>(store: &S) {
    conditional_insert(store).await;
    bulk_insert(store).await;
    versioned_deactivation(store).await;
    propagation_pending_in_the_deactivating_write(store).await;
    versioned_edit_with_its_propagation_pending(store).await;
    versioned_restore_with_its_propagation_pending(store).await;
    propagation_leases_are_exclusive(store).await;
    finishing_a_propagation_is_conditional_on_its_version(store).await;
    listing_newest_first_with_cursor(store).await;
    indexes_by_target_host_and_by_domain(store).await;
    index_of_links_with_rules(store).await;
    index_of_links_with_rules(store).await;
    bad_cursors(store).await;
    aliases_are_listed_from_the_index(store).await;
    counter_blocks_never_overlap(store).await;
    settings_are_written_once(store).await;
    audit_log(store).await;
    // Reads that parse every remaining expression.
    assert_eq!(store.read_clicks(&unique("rc"), Day(1), Day(2)).await.unwrap(), vec![]);
    assert_eq!(store.get_idempotency(&unique("s"), "k", 0).await.unwrap(), None);
    assert_eq!(store.find_key_by_hash(&unique("h")).await.unwrap(), None);
    assert!(matches!(
        store.revoke_key(&unique("id"), 1).await,
        Err(StoreError::NotFound)
    ));
}

async fn conditional_insert<S: Store + ?Sized>(store: &S) {
    let code = unique("ci");
    let first = link(&code, "owner", 1);
    store.insert_link(&first, None).await.unwrap();
    let mut second = first.clone();
    second.long_url = "https://other.example/".into();
    assert!(matches!(
        store.insert_link(&second, None).await,
        Err(StoreError::AlreadyExists)
    ));
    assert_eq!(
        store.get_link(&code).await.unwrap(),
        Some(first),
        "the first write stands"
    );
    assert_eq!(store.get_link(&unique("none")).await.unwrap(), None);
}

async fn bulk_insert<S: Store + ?Sized>(store: &S) {
    let taken = unique("bt");
    store.insert_link(&link(&taken, "owner", 1), None).await.unwrap();
    let fresh: Vec<String> = (0..3).map(|_| unique("bi")).collect();
    let batch = vec![
        link(&fresh[0], "o", 1),
        link(&taken, "o", 1),
        link(&fresh[1], "o", 1),
        link(&fresh[2], "o", 1),
    ];
    let outcomes = store.insert_links(&batch).await.unwrap();
    assert_eq!(outcomes.len(), 4);
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok() && outcomes[3].is_ok());
    assert!(matches!(outcomes[1], Err(StoreError::AlreadyExists)));
    for c in &fresh {
        assert!(store.get_link(c).await.unwrap().is_some());
    }
    assert_eq!(
        store.get_link(&taken).await.unwrap().unwrap().created_by,
        "owner",
        "the taken code kept its link"
    );
}

async fn idempotency_in_the_same_transaction<S: Store + ?Sized>(store: &S) {
    let scope = unique("scope");
    let rec = IdempotencyRecord {
        scope: scope.clone(),
        key: "k1".into(),
        request_hash: "h".into(),
        status: 201,
        body: "{}".into(),
        created_at: 1_000,
        expires_at: 1_000 + 86_400_000,
    };
    let a = link(&unique("ia"), "owner", 1);
    store.insert_link(&a, Some(&rec)).await.unwrap();
    assert_eq!(
        store.get_idempotency(&scope, "k1", 2_000).await.unwrap(),
        Some(rec.clone())
    );
    assert_eq!(
        store.get_idempotency(&scope, "k1", rec.expires_at).await.unwrap(),
        None,
        "expired records are not returned"
    );
    assert_eq!(store.get_idempotency(&scope, "k2", 2_000).await.unwrap(), None);

    // The same key again: nothing is written, not even the link.
    let b = link(&unique("ib"), "owner", 1);
    let again = IdempotencyRecord {
        created_at: 2_000,
        ..rec.clone()
    };
    assert!(matches!(
        store.insert_link(&b, Some(&again)).await,
        Err(StoreError::IdempotencyKeyExists)
    ));
    assert_eq!(store.get_link(&b.code).await.unwrap(), None);

    // A taken code writes no idempotency record.
    let other = IdempotencyRecord {
        key: "k3".into(),
        ..rec.clone()
    };
    assert!(matches!(
        store.insert_link(&a, Some(&other)).await,
        Err(StoreError::AlreadyExists)
    ));
    assert_eq!(store.get_idempotency(&scope, "k3", 2_000).await.unwrap(), None);

    // After expiry the key may be used again.
    let later = IdempotencyRecord {
        created_at: rec.expires_at + 1,
        expires_at: rec.expires_at + 100_000,
        ..rec
    };
    store.insert_link(&b, Some(&later)).await.unwrap();
    assert_eq!(
        store.get_idempotency(&scope, "k1", later.created_at).await.unwrap(),
        Some(later)
    );
}

async fn versioned_deactivation<S: Store + ?Sized>(store: &S) {
    let code = unique("vd");
    store.insert_link(&link(&code, "owner", 1), None).await.unwrap();
    let deletion = Deletion {
        at: 500,
        by: "op".into(),
        reason: Some("phishing".into()),
    };
    assert!(matches!(
        store.deactivate_link(&code, 2, &deletion).await,
        Err(StoreError::ConditionFailed)
    ));
    let down = store.deactivate_link(&code, 1, &deletion).await.unwrap();
    assert!(!down.is_active);
    assert_eq!(down.version, 2);
    assert_eq!(down.deleted_by.as_deref(), Some("op"));
    assert_eq!(down.delete_reason.as_deref(), Some("phishing"));
    assert_eq!(store.get_link(&code).await.unwrap(), Some(down));
    // A second deactivation at the old version fails and changes nothing.
    assert!(matches!(
        store.deactivate_link(&code, 1, &deletion).await,
        Err(StoreError::ConditionFailed)
    ));
    assert!(matches!(
        store.deactivate_link(&code, 2, &deletion).await,
        Err(StoreError::ConditionFailed)
    ));
    assert_eq!(store.get_link(&code).await.unwrap().unwrap().version, 2);
    assert!(matches!(
        store.deactivate_link(&unique("nx"), 1, &deletion).await,
        Err(StoreError::NotFound)
    ));
}

/// Whether `code` at `version` is among the propagations due at `now` (a large page: the
/// store may hold others).
async fn pending_at<S: Store + ?Sized>(store: &S, now: i64, code: &str) -> Option<Propagation> {
    let page = store.pending_propagations(now, 1_000).await.unwrap();
    assert!(
        page.windows(2).all(|w| w[0].lease_until <= w[1].lease_until),
        "oldest lease first"
    );
    assert!(page.iter().all(|p| p.lease_until <= now), "only expired leases");
    page.into_iter().find(|p| p.code == code)
}

/// A link taken down, with its propagation pending and leased to `owner` until `until`.
async fn down_and_pending<S: Store + ?Sized>(store: &S, prefix: &str, owner: &str, until: i64) -> String {
    let code = unique(prefix);
    store.insert_link(&link(&code, "owner", 1), None).await.unwrap();
    let deletion = Deletion {
        at: 100,
        by: "op".into(),
        reason: None,
    };
    let lease = PropagationLease {
        owner: owner.into(),
        until,
    };
    let down = store
        .deactivate_link_pending(&code, 1, &deletion, &lease)
        .await
        .unwrap();
    assert_eq!((down.is_active, down.version), (false, 2));
    code
}

async fn propagation_pending_in_the_deactivating_write<S: Store + ?Sized>(store: &S) {
    let code = down_and_pending(store, "pp", "cp-a", 1_000).await;
    assert_eq!(pending_at(store, 999, &code).await, None, "leased to its writer");
    assert_eq!(
        pending_at(store, 1_000, &code).await,
        Some(Propagation {
            code: code.clone(),
            version: 2,
            lease_owner: "cp-a".into(),
            lease_until: 1_000,
        })
    );
    // A deactivation whose condition fails writes no pending record.
    let other = unique("pn");
    store.insert_link(&link(&other, "owner", 1), None).await.unwrap();
    let deletion = Deletion {
        at: 100,
        by: "op".into(),
        reason: None,
    };
    let lease = PropagationLease {
        owner: "cp-a".into(),
        until: 10,
    };
    assert!(matches!(
        store.deactivate_link_pending(&other, 7, &deletion, &lease).await,
        Err(StoreError::ConditionFailed)
    ));
    assert!(store.get_link(&other).await.unwrap().unwrap().is_active);
    assert_eq!(pending_at(store, i64::MAX / 2, &other).await, None);
    for version in [1, 2, 7, 8] {
        assert!(matches!(
            store.lease_propagation(&other, version, &lease, 1_000).await,
            Err(StoreError::ConditionFailed)
        ));
    }
    assert!(matches!(
        store.deactivate_link_pending(&unique("px"), 1, &deletion, &lease).await,
        Err(StoreError::NotFound)
    ));
    // A bounded page.
    for _ in 0..3 {
        down_and_pending(store, "pb", "cp-a", 5).await;
    }
    assert!(store.pending_propagations(1_000, 2).await.unwrap().len() <= 2);
}

async fn versioned_edit_with_its_propagation_pending<S: Store + ?Sized>(store: &S) {
    let code = unique("ed");
    let original = Link {
        expires_at: Some(9_000_000_000_000),
        purge_at: Some(9_000_000_000_000),
        password_hash: Some("$argon2id$v=19$m=19456,t=2,p=1$b3JpZ2luYWw$b3JpZ2luYWw".into()),
        rules: conformance_rules("https://example.org/fr"),
        ..link(&code, "owner", 1)
    };
    store.insert_link(&original, None).await.unwrap();
    assert_eq!(
        store.get_link(&code).await.unwrap(),
        Some(original.clone()),
        "the password's hash kept"
    );
    let lease = |until: i64| PropagationLease {
        owner: "cp-a".into(),
        until,
    };
    let edit = LinkEdit {
        long_url: "https://example.org/new?x=1".into(),
        redirect: RedirectKind::Permanent,
        forward_query: true,
        expires_at: None,
        password_hash: Some("$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2g".into()),
        rules: conformance_rules("https://example.org/de"),
    };
    let edited = store.edit_link_pending(&code, 1, &edit, &lease(1_000)).await.unwrap();
    assert_eq!(edited, original.edited(&edit));
    assert_eq!(
        store.get_link(&code).await.unwrap(),
        Some(edited.clone()),
        "every field as written"
    );
    assert_eq!(
        (edited.version, edited.expires_at, edited.purge_at, edited.is_active),
        (2, None, None, true)
    );
    assert_eq!(pending_at(store, 999, &code).await, None, "leased to its writer");
    assert_eq!(pending_at(store, 1_000, &code).await.map(|p| p.version), Some(2));
    // An expiry set again; a stale version or a link that went down writes nothing.
    // The password and the rules removed with it.
    let expiring = LinkEdit {
        expires_at: Some(8_000_000_000_000),
        password_hash: None,
        rules: Vec::new(),
        ..edit.clone()
    };
    let again = store
        .edit_link_pending(&code, 2, &expiring, &lease(2_000))
        .await
        .unwrap();
    assert_eq!(store.get_link(&code).await.unwrap(), Some(again.clone()));
    assert_eq!((again.version, again.purge_at), (3, Some(8_000_000_000_000)));
    assert_eq!(
        pending_at(store, 2_000, &code).await.map(|p| p.version),
        Some(3),
        "the newer version replaced it"
    );
    assert!(matches!(
        store.edit_link_pending(&code, 2, &edit, &lease(3_000)).await,
        Err(StoreError::ConditionFailed)
    ));
    let deletion = Deletion {
        at: 100,
        by: "op".into(),
        reason: None,
    };
    store.deactivate_link(&code, 3, &deletion).await.unwrap();
    assert!(matches!(
        store.edit_link_pending(&code, 4, &edit, &lease(3_000)).await,
        Err(StoreError::ConditionFailed)
    ));
    let down = store.get_link(&code).await.unwrap().unwrap();
    assert_eq!(
        (down.is_active, down.version, down.long_url.as_str()),
        (false, 4, edit.long_url.as_str())
    );
    assert!(matches!(
        store.edit_link_pending(&unique("ex"), 1, &edit, &lease(3_000)).await,
        Err(StoreError::NotFound)
    ));
}

async fn versioned_restore_with_its_propagation_pending<S: Store + ?Sized>(store: &S) {
    let code = unique("rs");
    let original = Link {
        expires_at: Some(9_000_000_000_000),
        purge_at: Some(9_000_000_000_000),
        ..link(&code, "owner", 1)
    };
    store.insert_link(&original, None).await.unwrap();
    let lease = PropagationLease {
        owner: "cp-a".into(),
        until: 1_000,
    };
    assert!(
        matches!(
            store.restore_link_pending(&code, 1, &lease).await,
            Err(StoreError::ConditionFailed)
        ),
        "an active link is not restored"
    );
    let deletion = Deletion {
        at: 100,
        by: "threat-lists".into(),
        reason: Some("threat-list:urlhaus".into()),
    };
    store.deactivate_link(&code, 1, &deletion).await.unwrap();
    assert!(matches!(
        store.restore_link_pending(&code, 1, &lease).await,
        Err(StoreError::ConditionFailed)
    ));
    let restored = store.restore_link_pending(&code, 2, &lease).await.unwrap();
    assert_eq!(
        restored,
        Link {
            version: 3,
            ..original.clone()
        }
    );
    assert_eq!(
        store.get_link(&code).await.unwrap(),
        Some(restored),
        "every field as written"
    );
    assert_eq!(pending_at(store, 1_000, &code).await.map(|p| p.version), Some(3));
    // Without an expiry: never purged.
    let forever = unique("rs");
    store.insert_link(&link(&forever, "owner", 1), None).await.unwrap();
    store.deactivate_link(&forever, 1, &deletion).await.unwrap();
    let back = store.restore_link_pending(&forever, 2, &lease).await.unwrap();
    assert_eq!(store.get_link(&forever).await.unwrap(), Some(back.clone()));
    assert_eq!((back.purge_at, back.deleted_at, back.is_active), (None, None, true));
    assert!(matches!(
        store.restore_link_pending(&unique("rx"), 1, &lease).await,
        Err(StoreError::NotFound)
    ));
}

async fn propagation_leases_are_exclusive<S: Store + ?Sized>(store: &S) {
    let code = down_and_pending(store, "pl", "cp-a", 1_000).await;
    let lease = |owner: &str, until: i64| PropagationLease {
        owner: owner.into(),
        until,
    };
    // Held by its writer: another control plane cannot take it before it expires.
    assert!(matches!(
        store.lease_propagation(&code, 2, &lease("cp-b", 5_000), 999).await,
        Err(StoreError::ConditionFailed)
    ));
    // Expired: taken over, and the link as stored comes back.
    let link = store
        .lease_propagation(&code, 2, &lease("cp-b", 5_000), 1_000)
        .await
        .unwrap();
    assert_eq!(
        (link.code.as_str(), link.version, link.is_active),
        (code.as_str(), 2, false)
    );
    assert_eq!(pending_at(store, 4_999, &code).await, None);
    assert!(matches!(
        store.lease_propagation(&code, 2, &lease("cp-a", 9_000), 2_000).await,
        Err(StoreError::ConditionFailed)
    ));
    // Only at the pending version.
    assert!(matches!(
        store.lease_propagation(&code, 1, &lease("cp-b", 9_000), 9_000).await,
        Err(StoreError::ConditionFailed)
    ));
    // Its holder renews it, and gives it back.
    store
        .lease_propagation(&code, 2, &lease("cp-b", 6_000), 2_000)
        .await
        .unwrap();
    assert!(matches!(
        store.lease_propagation(&code, 2, &lease("cp-a", 9_000), 5_500).await,
        Err(StoreError::ConditionFailed)
    ));
    store
        .lease_propagation(&code, 2, &lease("cp-b", 2_500), 2_500)
        .await
        .unwrap();
    let due = pending_at(store, 2_500, &code).await.unwrap();
    assert_eq!((due.lease_owner.as_str(), due.lease_until), ("cp-b", 2_500));
    store
        .lease_propagation(&code, 2, &lease("cp-a", 9_000), 2_500)
        .await
        .unwrap();
}

async fn finishing_a_propagation_is_conditional_on_its_version<S: Store + ?Sized>(store: &S) {
    let code = down_and_pending(store, "pf", "cp-a", 1_000).await;
    for version in [1, 3] {
        assert!(matches!(
            store.finish_propagation(&code, version).await,
            Err(StoreError::ConditionFailed)
        ));
    }
    assert!(pending_at(store, 1_000, &code).await.is_some(), "still pending");
    store.finish_propagation(&code, 2).await.unwrap();
    assert_eq!(pending_at(store, i64::MAX / 2, &code).await, None);
    assert!(matches!(
        store.finish_propagation(&code, 2).await,
        Err(StoreError::ConditionFailed)
    ));
    let lease = PropagationLease {
        owner: "cp-a".into(),
        until: 9_000,
    };
    assert!(matches!(
        store.lease_propagation(&code, 2, &lease, 2_000).await,
        Err(StoreError::ConditionFailed)
    ));
    let stored = store.get_link(&code).await.unwrap().unwrap();
    assert_eq!((stored.is_active, stored.version), (false, 2), "the link is untouched");
    assert!(matches!(
        store.finish_propagation(&unique("fx"), 1).await,
        Err(StoreError::ConditionFailed)
    ));
}

async fn listing_newest_first_with_cursor<S: Store + ?Sized>(store: &S) {
    let owner = unique("lister");
    let mut codes = Vec::new();
    for i in 0..7 {
        let code = unique("ls");
        // Two links share a timestamp to exercise the code tie-break.
        store
            .insert_link(&link(&code, &owner, 1_000 + (i / 2)), None)
            .await
            .unwrap();
        codes.push((1_000 + (i / 2), code));
    }
    store
        .insert_link(&link(&unique("lo"), &unique("other"), 5_000), None)
        .await
        .unwrap();
    codes.sort_by(|a, b| b.cmp(a));
    let want: Vec<String> = codes.into_iter().map(|(_, c)| c).collect();

    let mut got = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store.list_links(Some(&owner), 3, cursor.as_deref()).await.unwrap();
        assert!(page.links.len() <= 3);
        got.extend(page.links.iter().map(|l| l.code.clone()));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(got, want);

    let all = store.list_links(None, 1000, None).await.unwrap();
    assert!(all.links.len() >= 8);
    assert!(all
        .links
        .windows(2)
        .all(|w| (w[0].created_at, &w[0].code) > (w[1].created_at, &w[1].code)));
}

async fn host_page<S: Store + ?Sized>(store: &S, prefix: &str, limit: usize) -> Vec<String> {
    let (mut codes, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let page = store
            .links_by_target_host(prefix, limit, cursor.as_deref())
            .await
            .unwrap();
        assert!(page.links.len() <= limit);
        codes.extend(page.links.into_iter().map(|l| l.code));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return codes,
        }
    }
}

async fn domain_page<S: Store + ?Sized>(store: &S, id: &str) -> Vec<String> {
    let (mut codes, mut cursor) = (Vec::new(), None::<String>);
    loop {
        let page = store.links_on_domain(id, 1, cursor.as_deref()).await.unwrap();
        codes.extend(page.links.into_iter().map(|l| l.code));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return codes,
        }
    }
}

/// Rules of every kind, for a record to round-trip.
fn conformance_rules(target: &str) -> Vec<rebound_core::rules::Rule> {
    use rebound_core::rules::{Device, Os, Rule, Variant};
    vec![
        Rule {
            countries: vec!["FR".into(), "BE".into()],
            languages: vec!["fr".into()],
            target: Some(target.into()),
            ..Rule::default()
        },
        Rule {
            os: vec![Os::Ios, Os::Android],
            devices: vec![Device::Mobile],
            split: vec![
                Variant {
                    target: "https://example.org/a".into(),
                    weight: 3,
                },
                Variant {
                    target: "https://example.org/b".into(),
                    weight: 1,
                },
            ],
            ..Rule::default()
        },
    ]
}

/// Every code of `store`'s index of links with rules, read in pages of `limit`.
async fn with_rules<S: Store + ?Sized>(store: &S, limit: usize) -> Vec<String> {
    let (mut codes, mut cursor) = (Vec::new(), None::<String>);
    for _ in 0..10_000 {
        let page = store.links_with_rules(limit, cursor.as_deref()).await.unwrap();
        codes.extend(page.links.into_iter().map(|l| l.code));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return codes,
        }
    }
    panic!("the index of links with rules never ends");
}

/// The index of active links with rules: a link is in it while it is active and has rules;
/// an edit that adds rules puts it in, one that removes them takes it out, a delete takes it
/// out and a restore puts it back; each is read once, whatever the page size.
async fn index_of_links_with_rules<S: Store + ?Sized>(store: &S) {
    let p = unique("wr");
    let lease = PropagationLease {
        owner: "cp".into(),
        until: 1,
    };
    let ruled = |code: &str| Link {
        rules: conformance_rules("https://example.org/r"),
        ..link(code, "o", 1)
    };
    let codes: Vec<String> = (0..6).map(|i| format!("{p}{i}")).collect();
    for (i, code) in codes.iter().enumerate() {
        let l = match i {
            0 | 2 | 3 | 5 => ruled(code),
            _ => link(code, "o", 1),
        };
        store.insert_link(&l, None).await.unwrap();
    }
    let ours = |all: Vec<String>| {
        let mut mine: Vec<String> = all.into_iter().filter(|c| c.starts_with(&p)).collect();
        mine.sort();
        mine
    };
    let want = |idx: &[usize]| idx.iter().map(|&i| codes[i].clone()).collect::<Vec<_>>();
    assert_eq!(ours(with_rules(store, 100).await), want(&[0, 2, 3, 5]));
    // Rules added to 1, removed from 2; 3 deleted.
    let add = LinkEdit {
        rules: conformance_rules("https://example.org/added"),
        ..link(&codes[1], "o", 1).editable()
    };
    store.edit_link_pending(&codes[1], 1, &add, &lease).await.unwrap();
    let remove = LinkEdit {
        rules: Vec::new(),
        ..ruled(&codes[2]).editable()
    };
    store.edit_link_pending(&codes[2], 1, &remove, &lease).await.unwrap();
    let deletion = Deletion {
        at: 5,
        by: "op".into(),
        reason: None,
    };
    store.deactivate_link(&codes[3], 1, &deletion).await.unwrap();
    for limit in [1, 2, 100] {
        let all = with_rules(store, limit).await;
        let mut unique_codes = all.clone();
        unique_codes.sort();
        unique_codes.dedup();
        assert_eq!(unique_codes.len(), all.len(), "each once, pages of {limit}");
        assert_eq!(ours(all), want(&[0, 1, 5]), "pages of {limit}");
    }
    // A restore puts it back.
    store.restore_link_pending(&codes[3], 2, &lease).await.unwrap();
    assert_eq!(ours(with_rules(store, 3).await), want(&[0, 1, 3, 5]));
}

/// The index of active links by target host and the per-domain index: a link is in them
/// while active, under its target's host as last edited; an edit moves it, a delete takes
/// it out, a restore puts it back, links written one by one or in bulk alike.
async fn indexes_by_target_host_and_by_domain<S: Store + ?Sized>(store: &S) {
    let h = unique("h");
    let id = unique("d");
    let on = |code: &str, url: String| Link {
        long_url: url,
        ..link(code, "owner", 1)
    };
    let (a, b, c, d) = (
        unique("ia"),
        unique("ib"),
        unique("ic"),
        format!("{}.{id}", unique("id")),
    );
    store
        .insert_link(&on(&a, format!("https://{h}.example/a")), None)
        .await
        .unwrap();
    let bulk = [
        on(&b, format!("https://sub.{h}.example/b?q=1")),
        on(&c, format!("https://not{h}.example/c")),
        on(&d, format!("http://{h}.example:8080/d")),
    ];
    assert!(store.insert_links(&bulk).await.unwrap().iter().all(Result::is_ok));
    let prefix = format!("example.{h}.");
    // Links under one host key come in any order (DynamoDB's, within a sort key).
    let sorted = |mut v: Vec<String>| {
        v[..2].sort();
        v
    };
    let under_h = sorted(vec![a.clone(), d.clone(), b.clone()]);
    assert_eq!(
        sorted(host_page(store, &prefix, 1).await),
        under_h,
        "the host, then its subdomain, paged"
    );
    assert_eq!(sorted(host_page(store, &prefix, 100).await), under_h);
    assert_eq!(
        host_page(store, &format!("example.{h}.sub."), 10).await,
        vec![b.clone()]
    );
    assert_eq!(host_page(store, &format!("example.not{h}."), 10).await, vec![c.clone()]);
    assert_eq!(domain_page(store, &id).await, vec![d.clone()]);
    // An edit moves it; a delete takes it out; a restore puts it back.
    let lease = PropagationLease {
        owner: "cp".into(),
        until: 1,
    };
    let moved = LinkEdit {
        long_url: format!("https://else{h}.example/b"),
        redirect: RedirectKind::Found,
        forward_query: false,
        expires_at: None,
        password_hash: None,
        rules: Vec::new(),
    };
    store.edit_link_pending(&b, 1, &moved, &lease).await.unwrap();
    let deletion = Deletion {
        at: 5,
        by: "op".into(),
        reason: Some("threat-list:x".into()),
    };
    store.deactivate_link(&a, 1, &deletion).await.unwrap();
    store.deactivate_link(&d, 1, &deletion).await.unwrap();
    assert_eq!(host_page(store, &prefix, 10).await, Vec::<String>::new());
    assert_eq!(
        host_page(store, &format!("example.else{h}."), 10).await,
        vec![b.clone()]
    );
    assert_eq!(domain_page(store, &id).await, Vec::<String>::new());
    store.restore_link_pending(&a, 2, &lease).await.unwrap();
    store.restore_link_pending(&d, 2, &lease).await.unwrap();
    let mut back = vec![a.clone(), d.clone()];
    back.sort();
    let mut found = host_page(store, &prefix, 10).await;
    found.sort();
    assert_eq!(found, back);
    assert_eq!(domain_page(store, &id).await, vec![d.clone()]);
    // An address, and nothing at all under a prefix no link has.
    let ip = unique("ip");
    store
        .insert_link(&on(&ip, "http://[::ffff:203.0.113.77]/x".into()), None)
        .await
        .unwrap();
    assert!(host_page(store, "[203.0.113.77]", 10).await.contains(&ip));
    assert_eq!(
        host_page(store, &format!("example.{}.", unique("none")), 10).await,
        Vec::<String>::new()
    );
    assert!(matches!(
        store.links_by_target_host(&prefix, 10, Some("not a cursor")).await,
        Err(StoreError::BadCursor)
    ));
    // Older links indexed: nothing is left to do once done.
    let mut cursor = store.index_older_links(None, 100).await.unwrap();
    while let Some(c) = cursor {
        cursor = store.index_older_links(Some(&c), 100).await.unwrap();
    }
}

async fn bad_cursors<S: Store + ?Sized>(store: &S) {
    for bad in ["", "abc", "12", ".abc", "x.abc", "12.a", "12.a b", "-5.abc"] {
        assert!(
            matches!(store.list_links(None, 10, Some(bad)).await, Err(StoreError::BadCursor)),
            "{bad:?}"
        );
    }
}

async fn aliases_are_listed_from_the_index<S: Store + ?Sized>(store: &S) {
    let mine: Vec<String> = (0..5).map(|_| unique("al")).collect();
    for c in &mine {
        store.record_alias(c).await.unwrap();
        store.insert_link(&link(c, "o", 1), None).await.unwrap();
    }
    // Recording is idempotent.
    store.record_alias(&mine[0]).await.unwrap();
    // A link inserted without being recorded (a generated code) is not listed.
    let generated = unique("gn");
    store.insert_link(&link(&generated, "o", 1), None).await.unwrap();
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.list_aliases(after.as_deref(), 2).await.unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        after = page.last().cloned();
        seen.extend(page);
    }
    for c in &mine {
        assert_eq!(seen.iter().filter(|s| *s == c).count(), 1, "{c} listed once");
    }
    assert!(!seen.contains(&generated), "only aliases are in the index");
}

async fn keys<S: Store + ?Sized>(store: &S) {
    let id = unique("key");
    let rec = ApiKeyRecord {
        id: id.clone(),
        name: "ci".into(),
        role: Role::Creator,
        key_hash: unique("hash"),
        created_at: 1,
        revoked_at: None,
        domains: None,
    };
    store.insert_key(&rec).await.unwrap();
    // A key scoped to domains reads back with them, in order.
    let scoped = ApiKeyRecord {
        id: unique("key"),
        key_hash: unique("hash"),
        domains: Some(vec!["go.acme.example".into(), "acme.example".into()]),
        ..rec.clone()
    };
    store.insert_key(&scoped).await.unwrap();
    assert_eq!(
        store.find_key_by_hash(&scoped.key_hash).await.unwrap(),
        Some(scoped.clone())
    );
    assert_eq!(store.revoke_key(&scoped.id, 5).await.unwrap().domains, scoped.domains);
    assert!(matches!(store.insert_key(&rec).await, Err(StoreError::AlreadyExists)));
    assert_eq!(store.find_key_by_hash(&rec.key_hash).await.unwrap(), Some(rec.clone()));
    assert_eq!(store.find_key_by_hash("nope").await.unwrap(), None);
    let revoked = store.revoke_key(&id, 10).await.unwrap();
    assert_eq!(revoked.revoked_at, Some(10));
    // Revoking again keeps the first time.
    assert_eq!(store.revoke_key(&id, 20).await.unwrap().revoked_at, Some(10));
    assert_eq!(
        store.find_key_by_hash(&rec.key_hash).await.unwrap().unwrap().revoked_at,
        Some(10)
    );
    assert!(matches!(
        store.revoke_key(&unique("nokey"), 1).await,
        Err(StoreError::NotFound)
    ));
}

async fn counter_blocks_never_overlap<S: Store + ?Sized>(store: &S) {
    let name = unique("ctr");
    let a = store.lease_block(&name, 100).await.unwrap();
    let b = store.lease_block(&name, 100).await.unwrap();
    assert_eq!(a, 0..100);
    assert_eq!(b, 100..200);
    let c = store.lease_block(&name, 1).await.unwrap();
    assert_eq!(c, 200..201);
    // The high-water mark is the end of the last block; 0 for a counter never leased.
    assert_eq!(store.high_water(&name).await.unwrap(), 201);
    assert_eq!(store.high_water(&unique("ctr")).await.unwrap(), 0);
}

async fn settings_are_written_once<S: Store + ?Sized>(store: &S) {
    let name = unique("set");
    assert_eq!(store.get_or_init_setting(&name, "first").await.unwrap(), "first");
    assert_eq!(store.get_or_init_setting(&name, "second").await.unwrap(), "first");
    assert_eq!(store.read_setting(&name).await.unwrap().as_deref(), Some("first"));
    assert_eq!(store.read_setting(&unique("set")).await.unwrap(), None);
}

async fn click_batches_apply_once<S: Store + ?Sized>(store: &S) {
    let code = unique("ck");
    let add = |day: i32, clicks: u64, bot_clicks: u64| ClickAdd {
        code: code.clone(),
        day: Day(day),
        clicks,
        bot_clicks,
    };
    let batch = ClickBatch {
        id: unique("batch"),
        adds: vec![add(100, 3, 0), add(101, 2, 5)],
    };
    assert_eq!(store.apply_clicks(&batch).await.unwrap(), BatchOutcome::Applied);
    assert_eq!(store.apply_clicks(&batch).await.unwrap(), BatchOutcome::AlreadyApplied);
    let second = ClickBatch {
        id: unique("batch"),
        adds: vec![add(100, 4, 1)],
    };
    assert_eq!(store.apply_clicks(&second).await.unwrap(), BatchOutcome::Applied);
    assert_eq!(
        store.read_clicks(&code, Day(99), Day(102)).await.unwrap(),
        vec![(Day(100), Clicks::new(7, 1)), (Day(101), Clicks::new(2, 5))]
    );
    assert_eq!(
        store.read_clicks(&code, Day(101), Day(101)).await.unwrap(),
        vec![(Day(101), Clicks::new(2, 5))]
    );
    assert_eq!(store.read_clicks(&code, Day(102), Day(200)).await.unwrap(), vec![]);
    // One flush of several batches, one of them seen before; a day of bots alone is read.
    let third = ClickBatch {
        id: unique("batch"),
        adds: vec![add(101, 1, 0), add(102, 0, 2)],
    };
    let outcomes = store.apply_click_batches(&[third, second]).await.unwrap();
    assert_eq!(outcomes, vec![BatchOutcome::Applied, BatchOutcome::AlreadyApplied]);
    assert_eq!(
        store.read_clicks(&code, Day(101), Day(102)).await.unwrap(),
        vec![(Day(101), Clicks::new(3, 5)), (Day(102), Clicks::new(0, 2))]
    );
}

async fn audit_log<S: Store + ?Sized>(store: &S) {
    let code = unique("au");
    for (outcome, detail) in [("invalidate_failed", None), ("ok", Some(r#"{"old":{},"new":{}}"#))] {
        store
            .append_audit(&AuditEvent {
                at: 5,
                actor: "op".into(),
                action: "takedown".into(),
                code: Some(code.clone()),
                reason: Some("malware".into()),
                outcome: outcome.into(),
                detail: detail.map(str::to_owned),
            })
            .await
            .unwrap();
    }
    let events = store.audit_for(&code).await.unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].outcome, "invalidate_failed");
    assert_eq!(events[0].detail, None);
    assert_eq!(events[1].outcome, "ok");
    assert_eq!(events[1].reason.as_deref(), Some("malware"));
    assert_eq!(events[1].detail.as_deref(), Some(r#"{"old":{},"new":{}}"#));
}

/// Breakdown batches apply at most once per id, add up per value, keep each code's day to
/// its first [`crate::Dimension::values_per_day`] values of a dimension (50 of a click's,
/// 1,000 of a domain's links; the rest under [`crate::breakdowns::OTHER`]), and read back
/// summed over the days asked, most clicked first.
pub async fn breakdowns_apply_once_and_stay_bounded<S: crate::BreakdownStore + ?Sized>(store: &S) {
    use crate::breakdowns::{LINKS_PER_SCOPE_DAY, OTHER, VALUES_PER_LINK_DAY};
    use crate::{Dimension, DimensionAdd, DimensionBatch, ValueClicks};
    let add = |code: &str, day: i32, dimension: Dimension, value: &str, clicks: u64| DimensionAdd {
        code: code.into(),
        day: Day(day),
        dimension,
        value: value.into(),
        clicks,
    };
    let first = DimensionBatch {
        id: "dims-1".into(),
        adds: vec![
            add("bd1", 10, Dimension::Country, "DE", 3),
            add("bd1", 10, Dimension::Country, "FR", 1),
            add("bd1", 11, Dimension::Country, "DE", 2),
            add("bd1", 10, Dimension::Referrer, "news.example", 4),
            add("bd2", 10, Dimension::Country, "JP", 7),
        ],
    };
    assert_eq!(store.apply_dimensions(&first).await.unwrap(), BatchOutcome::Applied);
    assert_eq!(
        store.apply_dimensions(&first).await.unwrap(),
        BatchOutcome::AlreadyApplied
    );
    let read = |code: &'static str, d: Dimension, from: i32, to: i32| async move {
        store
            .read_breakdown(code, d, Day(from), Day(to))
            .await
            .unwrap()
            .into_iter()
            .map(|ValueClicks { value, clicks }| (value, clicks))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        read("bd1", Dimension::Country, 10, 11).await,
        vec![("DE".to_owned(), 5), ("FR".to_owned(), 1)]
    );
    assert_eq!(
        read("bd1", Dimension::Country, 11, 11).await,
        vec![("DE".to_owned(), 2)]
    );
    assert_eq!(
        read("bd1", Dimension::Referrer, 0, 99).await,
        vec![("news.example".to_owned(), 4)]
    );
    assert_eq!(read("bd1", Dimension::Device, 0, 99).await, vec![]);
    assert_eq!(
        read("bd2", Dimension::Country, 10, 10).await,
        vec![("JP".to_owned(), 7)]
    );
    // A day full of values: a new one counts as other, one held already still adds up.
    let many: Vec<DimensionAdd> = (0..VALUES_PER_LINK_DAY)
        .map(|i| add("bd3", 20, Dimension::Referrer, &format!("h{i:02}.example"), 1))
        .collect();
    for (i, chunk) in many.chunks(20).enumerate() {
        let batch = DimensionBatch {
            id: format!("dims-many-{i}"),
            adds: chunk.to_vec(),
        };
        store.apply_dimensions(&batch).await.unwrap();
    }
    let beyond = DimensionBatch {
        id: "dims-beyond".into(),
        adds: vec![
            add("bd3", 20, Dimension::Referrer, "late.example", 5),
            add("bd3", 20, Dimension::Referrer, "h07.example", 2),
            add("bd3", 21, Dimension::Referrer, "late.example", 1),
        ],
    };
    store.apply_dimensions(&beyond).await.unwrap();
    let day20 = read("bd3", Dimension::Referrer, 20, 20).await;
    assert_eq!(day20.len(), VALUES_PER_LINK_DAY + 1, "{day20:?}");
    assert_eq!(day20[0], (OTHER.to_owned(), 5));
    assert_eq!(day20[1], ("h07.example".to_owned(), 3));
    assert_eq!(
        read("bd3", Dimension::Referrer, 21, 21).await,
        vec![("late.example".to_owned(), 1)],
        "the next day has room again"
    );
    // A domain's links, under its scope code: a bound of their own, well past 50.
    let scope = crate::breakdowns::scope_code(Some("7"));
    let links: Vec<DimensionAdd> = (0..LINKS_PER_SCOPE_DAY)
        .map(|i| add(&scope, 30, Dimension::Link, &format!("c{i:04}"), 1))
        .collect();
    for (i, chunk) in links.chunks(500).enumerate() {
        let batch = DimensionBatch {
            id: format!("dims-links-{i}"),
            adds: chunk.to_vec(),
        };
        store.apply_dimensions(&batch).await.unwrap();
    }
    let past = DimensionBatch {
        id: "dims-links-past".into(),
        adds: vec![
            add(&scope, 30, Dimension::Country, "DE", 4),
            add(&scope, 30, Dimension::Link, "c0999", 2),
            add(&scope, 30, Dimension::Link, "late", 6),
            // Two late links in one batch: both under the one `(other)`.
            add(&scope, 30, Dimension::Link, "later", 1),
        ],
    };
    store.apply_dimensions(&past).await.unwrap();
    let scope_read = |d: Dimension| {
        let scope = scope.clone();
        async move {
            store
                .read_breakdown(&scope, d, Day(30), Day(30))
                .await
                .unwrap()
                .into_iter()
                .map(|ValueClicks { value, clicks }| (value, clicks))
                .collect::<Vec<_>>()
        }
    };
    let day30 = scope_read(Dimension::Link).await;
    assert_eq!(day30.len(), LINKS_PER_SCOPE_DAY + 1);
    assert_eq!(day30[0], (OTHER.to_owned(), 7));
    assert_eq!(day30[1], ("c0999".to_owned(), 3));
    assert_eq!(
        scope_read(Dimension::Country).await,
        vec![("DE".to_owned(), 4)],
        "a scope's countries are bounded apart from its links"
    );
}
